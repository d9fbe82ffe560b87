"""Live-source supervision end to end: framefused against a real RTSP server (GStreamer's
gst-rtsp-server, tests/integration/rtsp_server.py; H.264 and HEVC cameras) on 127.0.0.1, frozen with
SIGSTOP, killed and restarted, while a looping realtime file keeps running next to it. Observed through /metrics and
the daemon's log. Everything stays on loopback; every wait is bounded.

Needs python3-gi and GStreamer's RTSP server (tools/bootstrap --test); without them it exits 77,
which ctest reports as skipped."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from pathlib import Path

import ctest_main  # this directory: the tests run as scripts

FRAMEFUSED = os.environ.get("FRAMEFUSED", "build/daemon/framefused")
HERE = Path(__file__).resolve().parent
SERVER_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

STALL_S = 2.0           # stall_timeout
SOCKET_TIMEOUT_S = 3.0  # timeout: also the stalled session's grace before it is given up
FILE_FPS = 30
SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout, interval=0.05):
    """Polls `predicate` until it returns something truthy (returned) or `timeout` s pass (fails)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class RtspServer:
    """rtsp_server.py as a child process: start() waits for READY; kill() is SIGKILL."""

    def __init__(self, port, user):
        self.port, self.user, self.proc = port, user, None

    def start(self):
        self.proc = subprocess.Popen([SERVER_PYTHON, str(HERE / "rtsp_server.py"), str(self.port), "--user", self.user],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()   # READY, or EOF if it died
        if line.strip() != "READY":
            self.proc.kill()
            raise AssertionError(f"rtsp_server.py did not start: {line!r} {self.proc.stderr.read()}")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)   # a stopped process still dies, but be explicit
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc:
            self.proc.stdout.close()
            self.proc.stderr.close()


class Daemon:
    """framefused with stderr in a file; metrics() parses /metrics into {(name, labels): value}."""

    def __init__(self, config, http_port, log_path):
        self.http_port = http_port
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([FRAMEFUSED, "run", "--config", str(config), "--device", "cpu",
                                      "--http-port", str(http_port)], stdout=subprocess.DEVNULL, stderr=self.log)

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as r:
            return r.read().decode()

    def metrics(self):
        out = {}
        for line in self.get("/metrics").splitlines():
            m = re.match(r'^(\w+)(?:\{(.*)\})? (\S+)$', line)
            if m:
                labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
                out[(m.group(1), labels)] = float(m.group(3))
        return out

    def value(self, name, pipeline, **labels):
        return self.metrics().get((name, frozenset({"pipeline": pipeline, **labels}.items())))

    def state(self, pipeline):
        for (name, labels), v in self.metrics().items():
            d = dict(labels)
            if name == "framefuse_source_state" and d.get("pipeline") == pipeline and v == 1:
                return d["state"]
        return None

    def decoded(self, pipeline):
        return self.value("framefuse_frames_decoded_total", pipeline) or 0

    def reconnects(self, pipeline):
        return self.value("framefuse_source_reconnects_total", pipeline) or 0

    def stderr(self):
        return Path(self.log_path).read_text()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("framefused did not stop within 20 s of SIGTERM")
        self.log.close()
        return self.proc.returncode


class RtspSupervisionTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.clip = self.dir / "clip.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size=160x120:rate={FILE_FPS}",
                        "-frames:v", str(FILE_FPS), "-c:v", "libx264", "-threads", "1", "-pix_fmt", "yuv420p",
                        str(self.clip)], check=True)
        self.server = RtspServer(free_port(), "viewer:secret")
        self.server.start()
        self.addCleanup(self.server.kill)
        self.addCleanup(self.tmp.cleanup)

    def write_config(self):
        url = f"rtsp://viewer:secret@127.0.0.1:{self.server.port}/cam"
        live = (f"stall_timeout: {int(STALL_S * 1000)}ms, timeout: {int(SOCKET_TIMEOUT_S * 1000)}ms, "
                "reconnect: {initial: 200ms, max: 1s}")
        sources = {
            "cam": f'{{uri: "{url}", transport: tcp, {live}}}',
            "cam_udp": f'{{uri: "{url}", transport: udp, {live}}}',
            "cam_hevc": f'{{uri: "{url}265", transport: tcp, {live}}}',
            "file": f"{{uri: {self.clip}, loop: true, realtime: true}}",
            "dead": f'{{uri: "rtsp://127.0.0.1:{free_port()}/nothing", reconnect: {{initial: 100ms, attempts: 2}}}}',
        }
        lines = ["http: {enabled: true}", "pipelines:"]
        for name, source in sources.items():
            lines += [f"  - name: {name}", f"    source: {source}",
                      "    outputs: [{name: small, resize: {width: 64, height: 48}}]", "    sink: {type: null}"]
        path = self.dir / "rtsp.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def test_stall_kill_restart_and_isolation(self):
        daemon = Daemon(self.write_config(), free_port(), self.dir / "framefused.log")
        self.addCleanup(daemon.stop)
        try:
            self.scenario(daemon)
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- framefused log (last 40 lines):\n" +
                                 "\n".join(daemon.stderr().splitlines()[-40:])) from None

    def scenario(self, daemon):
        t_start = time.monotonic()
        wait_for("/metrics", lambda: daemon.proc.poll() is not None or self._try(daemon.metrics), 10)
        self.assertIsNone(daemon.proc.poll(), "framefused exited")
        file_samples = []   # (time, decoded frames of the file pipeline) at every phase

        def file_keeps_running(phase):
            t, n = time.monotonic(), daemon.decoded("file")
            if file_samples:
                self.assertGreater(n, file_samples[-1][1], f"file pipeline stopped during: {phase}")
            file_samples.append((t, n))

        # 1. Frames flow over TCP and UDP, H.264 and HEVC; /status names each camera's codec.
        for cam in ("cam", "cam_udp", "cam_hevc"):
            n0 = wait_for(f"{cam} decoding", lambda c=cam: daemon.decoded(c) > 0 and daemon.decoded(c), 20)
            wait_for(f"{cam} frames increasing", lambda c=cam, n=n0: daemon.decoded(c) > n + 5, 10)
            self.assertEqual(daemon.state(cam), "streaming")
        codecs = {p["name"]: p["codec"] for p in json.loads(daemon.get("/status"))["pipelines"]}
        self.assertRegex(codecs["cam"], r"^h264\b")
        self.assertEqual(codecs["cam_hevc"], "hevc Main")
        file_keeps_running("start")

        # A source that never answers gives up after its 2 reconnects, alone: state failed.
        wait_for("dead pipeline failed", lambda: daemon.state("dead") == "failed", 20)
        self.assertEqual(daemon.reconnects("dead"), 2)
        self.assertRegex(daemon.stderr(),
                         r"pipeline 'dead': source '[^']+': .*; giving up after 2 reconnect\(s\) without a frame")

        # 2. A freeze shorter than the grace: stalled, then the same session streams on (no reconnect).
        reconnects_before = daemon.reconnects("cam")
        self.server.signal(signal.SIGSTOP)
        wait_for("cam stalled (short freeze)", lambda: daemon.state("cam") == "stalled", STALL_S + 1.0)
        self.server.signal(signal.SIGCONT)
        n_stalled = daemon.decoded("cam")
        wait_for("cam streaming on after the short freeze",
                 lambda: daemon.state("cam") == "streaming" and daemon.decoded("cam") > n_stalled + 5, 10)
        self.assertEqual(daemon.reconnects("cam"), reconnects_before, "a short freeze reconnected")
        self.assertIn("frames again after a stall", daemon.stderr())
        file_keeps_running("short freeze")

        # 3. Server frozen: stalled within stall_timeout + 1 s while the read still waits, given up
        # after the socket timeout's grace, then backoff/connecting; streaming again after SIGCONT.
        reconnects_before = daemon.reconnects("cam")
        self.server.signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        wait_for("cam stalled", lambda: daemon.state("cam") == "stalled", STALL_S + 1.0)
        detected = time.monotonic() - t_stop
        self.assertIn(f"pipeline 'cam': source 'rtsp://viewer:***@127.0.0.1:{self.server.port}/cam': "
                      f"no frame for {int(STALL_S * 1000)} ms: stalled", daemon.stderr())
        wait_for("cam reconnecting while frozen", lambda: daemon.state("cam") in ("backoff", "connecting"),
                 SOCKET_TIMEOUT_S + 1.5)
        given_up = time.monotonic() - t_stop
        self.assertGreaterEqual(given_up, STALL_S + SOCKET_TIMEOUT_S - 0.5, "the stalled session had no grace")
        time.sleep(SOCKET_TIMEOUT_S + 0.5)   # at least one connection attempt to the frozen server
        self.assertNotEqual(daemon.state("cam"), "streaming")
        file_keeps_running("server frozen")
        self.server.signal(signal.SIGCONT)
        n_frozen = daemon.decoded("cam")
        wait_for("cam streaming after SIGCONT",
                 lambda: daemon.state("cam") == "streaming" and daemon.decoded("cam") > n_frozen + 5, 20)
        self.assertGreater(daemon.reconnects("cam"), reconnects_before)
        file_keeps_running("server resumed")

        # 4. Server killed and restarted 5 times: 5 recoveries.
        for i in range(5):
            before = daemon.reconnects("cam")
            self.server.kill()
            wait_for(f"cam reconnecting after kill {i + 1}", lambda b=before: daemon.reconnects("cam") > b, 10)
            n_down = daemon.decoded("cam")   # the old session is gone: frames from now on are new
            self.assertNotEqual(daemon.state("cam"), "streaming")
            self.server.start()
            wait_for(f"cam streaming after restart {i + 1}",
                     lambda n=n_down: daemon.state("cam") == "streaming" and daemon.decoded("cam") > n + 3, 20)
            file_keeps_running(f"restart {i + 1}")
        self.assertGreaterEqual(daemon.reconnects("cam") - reconnects_before, 6)   # SIGSTOP + 5 kills
        for cam in ("cam_udp", "cam_hevc"):
            wait_for(f"{cam} streaming after the restarts", lambda c=cam: daemon.state(c) == "streaming", 20)
        self.assertEqual(daemon.state("file"), "streaming")

        # Realtime file: paced at its frame rate (not as fast as it decodes), looping throughout.
        (t0, n0), (t1, n1) = file_samples[0], file_samples[-1]
        rate = (n1 - n0) / (t1 - t0)
        self.assertGreater(rate, 0.5 * FILE_FPS, "realtime file fell far behind")
        self.assertLess(rate, 1.2 * FILE_FPS, "realtime file not paced")

        # Credentials never shown: not in /metrics, /status, nor the log.
        status_json = daemon.get("/status")
        self.assertIn("viewer:***@", status_json)
        self.assertNotIn("secret", status_json)
        self.assertNotIn("secret", daemon.get("/metrics"))
        reconnects = daemon.reconnects("cam")
        elapsed = time.monotonic() - t_start
        status = daemon.stop()
        log = daemon.stderr()
        self.assertNotIn("secret", log)
        self.assertEqual(status, 1, "a failed pipeline ('dead') makes the exit status 1")
        self.assertRegex(log, r"summary 'file': \d+ frames decoded")

        # Logs: only the daemon's own lines (FFmpeg's go through it), and each repeated failure
        # shown at most once per 30 s: far fewer reconnect lines than reconnects.
        for line in log.splitlines():
            self.assertRegex(line, r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \w+ ", "a line outside the log format")
        failures = {}
        reconnect_line = r"pipeline 'cam': source '[^']+': (.*); reconnecting in \d+ ms( \(repeated (\d+) times\))?"
        for m in re.finditer(reconnect_line, log):
            failures[m.group(1)] = failures.get(m.group(1), 0) + 1
            if m.group(3):
                self.assertGreater(int(m.group(3)), 1)
        self.assertTrue(failures, "no reconnect line for 'cam'")
        bound = 1 + int(elapsed // 30) + 1
        for reason, count in failures.items():
            self.assertLessEqual(count, bound, f"'{reason}' logged {count} times in {elapsed:.0f} s")
        self.assertLess(sum(failures.values()), reconnects)
        print(f"\n  stall detected {detected:.2f} s after SIGSTOP (limit {STALL_S + 1:.1f}), session given up "
              f"after {given_up:.2f} s; {sum(failures.values())} reconnect lines for {int(reconnects)} reconnects; "
              f"file {rate:.1f} fps; {elapsed:.1f} s in all", file=sys.stderr)

    @staticmethod
    def _try(f):
        try:
            return f() or True
        except OSError:
            return False


def gst_rtsp_available():
    probe = "import gi; gi.require_version('Gst', '1.0'); gi.require_version('GstRtspServer', '1.0')"
    return subprocess.run([SERVER_PYTHON, "-c", probe], capture_output=True).returncode == 0


if __name__ == "__main__":
    if not gst_rtsp_available():
        print(f"SKIP: {SERVER_PYTHON} cannot import GstRtspServer (install python3-gi and "
              "gir1.2-gst-rtsp-server-1.0: tools/bootstrap --test)", file=sys.stderr)
        sys.exit(SKIP)
    ctest_main.main()
