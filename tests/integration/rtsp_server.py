"""A real RTSP server for the integration tests: GStreamer's gst-rtsp-server (python3-gi) serving a
synthetic live H.264 stream (videotestsrc ! x264enc ! rtph264pay) at PATH and the same as HEVC
(x265enc ! rtph265pay) at PATH265, on 127.0.0.1 only.

Usage: rtsp_server.py PORT [--path /cam] [--user NAME:PASSWORD] [--size 320x240] [--fps 30]
Prints "READY" on stdout once listening; runs until killed. With --user, clients must
authenticate (HTTP Basic), so credentials in the client's URI are really used.
"""
import argparse
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("--path", default="/cam")
    ap.add_argument("--user", help="NAME:PASSWORD required from clients")
    ap.add_argument("--size", default="320x240")
    ap.add_argument("--fps", type=int, default=30)
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.split("x"))

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))

    # A keyframe every second, parameter sets with every IDR: a client joining mid-stream decodes
    # within ~1 s.
    # 4:2:0 as cameras send it (x265enc would otherwise take videotestsrc's 4:4:4: HEVC Rext).
    source = (f"videotestsrc is-live=true pattern=ball ! video/x-raw,format=I420,width={width},height={height},"
              f"framerate={args.fps}/1")
    encoders = {
        args.path: f"x264enc tune=zerolatency speed-preset=ultrafast threads=1 key-int-max={args.fps} ! "
                   "rtph264pay name=pay0 pt=96 config-interval=-1",
        args.path + "265": f"x265enc tune=zerolatency speed-preset=ultrafast key-int-max={args.fps} "
                           "option-string=pools=1:frame-threads=1 ! rtph265pay name=pay0 pt=96 config-interval=-1",
    }
    factories = {}
    for path, encoder in encoders.items():
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(f"( {source} ! {encoder} )")
        # A pipeline per client: a stale session's TEARDOWN (after SIGSTOP/SIGCONT) ends only itself.
        factory.set_shared(False)
        factories[path] = factory

    if args.user:
        name, password = args.user.split(":", 1)
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string("media.factory.role", name)
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(name, password), token)
        server.set_auth(auth)
        permissions = GstRtspServer.RTSPPermissions()
        permissions.add_permission_for_role(name, "media.factory.access", True)
        permissions.add_permission_for_role(name, "media.factory.construct", True)
        for factory in factories.values():
            factory.set_permissions(permissions)

    for path, factory in factories.items():
        server.get_mount_points().add_factory(path, factory)
    if server.attach(None) == 0:
        sys.exit(f"rtsp_server: cannot listen on 127.0.0.1:{args.port}")
    print("READY", flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()
