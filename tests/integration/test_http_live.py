"""Live end-to-end tests of framefused's HTTP endpoint: the real binary on generated clips, an
ephemeral port learned from its log, answers checked by independent tools (promtool, json, a JPEG
header parser plus an FFmpeg decode, headless Chromium). Loopback only; every wait is bounded."""
import http.client
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import textwrap
import threading
import time
import unittest
from pathlib import Path

import ctest_main  # this directory: the tests run as scripts

import numpy as np

FRAMEFUSED = os.environ.get("FRAMEFUSED", "build/daemon/framefused")
PREVIEW_MAX_WIDTH = 640        # daemon/http/routes.hpp kPreviewMaxWidth
WIDE = (850, 478)              # previewed at 640 x round(478 * 640 / 850) = 640 x 360
SMALL = (320, 240)             # narrower than the limit: previewed at its own size
SECRET = "s3cr3t-pw"
RTSP_URI = f"rtsp://user:{SECRET}@127.0.0.1:1/x"   # nothing listens on port 1: connect is refused at once


def make_clip(path, size, frames, rate=30, fmt=None):
    """A deterministic H.264 clip with motion (ffmpeg lavfi testsrc2)."""
    w, h = size
    extra = ["-f", fmt] if fmt else []
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={w}x{h}:rate={rate}",
                    "-frames:v", str(frames), "-c:v", "libx264", "-threads", "1", "-pix_fmt", "yuv420p", *extra,
                    str(path)], check=True, timeout=60)


def feed_fifo(fifo, data, timeout=10):
    """Writes `data` into `fifo` once a reader has it open (bounded wait for the reader)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:   # ENXIO: no reader yet
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
    os.set_blocking(fd, True)
    try:
        with os.fdopen(fd, "wb") as w:
            w.write(data)
    except BrokenPipeError:   # the daemon stopped reading (test teardown)
        pass


def preview_size(width, height):
    """The preview rule: at most PREVIEW_MAX_WIDTH wide, aspect kept, height rounded half away from 0."""
    if width <= PREVIEW_MAX_WIDTH:
        return width, height
    return PREVIEW_MAX_WIDTH, max(1, math.floor(height * PREVIEW_MAX_WIDTH / width + 0.5))


def jpeg_size(data):
    """(width, height) from the first start-of-frame marker of a JPEG; raises on a malformed stream."""
    if data[:2] != b"\xff\xd8":
        raise ValueError("no SOI marker")
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise ValueError(f"expected a marker at byte {i}")
        marker = data[i + 1]
        if marker == 0xFF:          # fill byte
            i += 1
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if marker in (0xC0, 0xC1, 0xC2):   # SOF0 baseline (SOF1/SOF2 accepted for the size only)
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return marker, width, height
        if marker == 0xDA:
            raise ValueError("scan data before any SOF marker")
        i += 2 + length
    raise ValueError("no SOF marker")


def parse_metrics(text):
    """{(name, frozenset(labels.items())): value} of a Prometheus text exposition."""
    out = {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = sample.match(line)
        if not m:
            raise ValueError(f"unparsable sample line: {line!r}")
        labels = frozenset(label.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    if key not in samples:
        raise AssertionError(f"no sample {name}{labels}")
    return samples[key]


class Daemon:
    """framefused run --http-port 0 in the background; stderr goes to a file that is read for the port."""

    def __init__(self, config, log_path):
        self.log_path = log_path
        self.log_file = open(log_path, "w")
        self.proc = subprocess.Popen([FRAMEFUSED, "run", "--config", str(config), "--device", "cpu", "--http-port", "0"],
                                     stdout=subprocess.DEVNULL, stderr=self.log_file)
        self.port = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"http: serving .* on 127\.0\.0\.1:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise AssertionError(f"framefused did not report its HTTP port:\n{self.log()}")
        if self.port == 0:
            self.stop()
            raise AssertionError("framefused logged port 0 instead of the port it bound")

    def log(self):
        return Path(self.log_path).read_text(errors="replace")

    def get(self, path, timeout=5):
        """(status, headers as dict with lower-case names, body bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def metrics(self):
        status, headers, body = self.get("/metrics")
        assert status == 200, (status, body)
        return body.decode(), parse_metrics(body.decode())

    def status(self):
        status, headers, body = self.get("/status")
        assert status == 200, (status, body)
        assert headers["content-type"].startswith("application/json"), headers
        return json.loads(body)

    def wait_for(self, what, predicate, timeout=10, interval=0.1):
        """Polls predicate() until it returns a true value; fails naming `what` after `timeout` s."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"framefused exited ({self.proc.returncode}) waiting for {what}:\n{self.log()}")
            last = predicate()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self):
        """SIGTERM, then SIGKILL if it does not stop in time; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.log_file.close()
        return self.proc.returncode


class HttpLiveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        make_clip(cls.dir / "wide.mp4", WIDE, 30)
        make_clip(cls.dir / "small.mp4", SMALL, 30)
        make_clip(cls.dir / "feed.ts", SMALL, 150, fmt="mpegts")   # 5 s at realtime: the daemon outlives the checks

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.daemon = None

    def tearDown(self):
        if self.daemon:
            self.daemon.stop()

    def write_config(self, name, body):
        path = self.dir / name
        path.write_text(textwrap.dedent(body))
        return path

    @staticmethod
    def pipeline(name, uri, source_extra=", loop: true, realtime: true", width=16):
        return f"""
          - name: {name}
            source: {{uri: "{uri}"{source_extra}}}
            outputs: [{{name: o, resize: {{width: {width}, height: 16}}}}]
            sink: {{type: null}}"""

    def config(self, name, *pipelines, readiness="any"):
        body = f"log: {{level: info}}\nreadiness: {readiness}\npipelines:" + "".join(textwrap.dedent(p) for p in pipelines)
        return self.write_config(name, body)

    def rtsp_pipeline(self):
        return self.pipeline("secretcam", RTSP_URI,
                             source_extra=", timeout: 1s, reconnect: {initial: 200ms, max: 1s}")

    def start(self, config):
        self.daemon = Daemon(config, self.dir / f"{config.stem}.log")
        return self.daemon

    def wait_processing(self, d, name, at_least=3):
        def processed():
            p = {p["name"]: p for p in d.status()["pipelines"]}.get(name)
            return p if p and p["frames_processed"] >= at_least else None
        return d.wait_for(f"pipeline '{name}' to process {at_least} frames", processed)

    # --- /readyz --------------------------------------------------------------------------------

    def test_readyz_is_503_until_the_first_frame_then_200(self):
        # A FIFO as the file source: opening it blocks until a writer comes, so no frame can have been
        # processed before we feed it; an MPEG-TS stream needs no seeking.
        fifo = self.dir / "feed_fifo.ts"
        if fifo.exists():
            fifo.unlink()
        os.mkfifo(fifo)
        cfg = self.config("fifo.yaml", self.pipeline("feed", fifo, source_extra=", realtime: true"), readiness="any")
        d = self.start(cfg)
        for _ in range(3):
            status, headers, body = d.get("/readyz")
            self.assertEqual(status, 503, body)
            self.assertEqual(headers.get("retry-after"), "1")
            self.assertIn(b"pipeline 'feed' is connecting", body)
            time.sleep(0.1)
        self.assertEqual(d.status()["pipelines"][0]["frames_processed"], 0)
        self.assertEqual(metric(d.metrics()[1], "framefuse_ready"), 0)
        writer = threading.Thread(target=feed_fifo, args=(fifo, (self.dir / "feed.ts").read_bytes()), daemon=True)
        writer.start()
        d.wait_for("/readyz 200", lambda: d.get("/readyz")[0] == 200)
        feed = d.status()["pipelines"][0]
        self.assertEqual(feed["state"], "streaming")
        self.assertGreater(feed["frames_processed"], 0)
        self.assertEqual(metric(d.metrics()[1], "framefuse_ready"), 1)

    def test_readyz_policy_all_waits_for_every_pipeline(self):
        cfg = self.config("ready_all.yaml", self.pipeline("cam", "wide.mp4"), self.rtsp_pipeline(), readiness="all")
        d = self.start(cfg)
        self.wait_processing(d, "cam")   # one pipeline streams, the other can never connect
        for _ in range(3):
            status, _, body = d.get("/readyz")
            self.assertEqual(status, 503, body)
            self.assertRegex(body.decode(), r"pipeline 'secretcam' is (connecting|backoff)")
            self.assertNotIn("'cam'", body.decode())
            time.sleep(0.2)
        # The same pipelines under policy `any` (a reload; cam itself is unchanged): ready.
        self.config("ready_all.yaml", self.pipeline("cam", "wide.mp4"), self.rtsp_pipeline(), readiness="any")
        d.signal(signal.SIGHUP)
        d.wait_for("/readyz 200 after switching to readiness: any", lambda: d.get("/readyz")[0] == 200)
        self.assertEqual(d.get("/readyz")[2], b"ready\n")
        self.assertIn("reload applied: 2 unchanged, 0 restarted, 0 started", d.log())
        self.assertEqual(d.get("/livez")[0], 200)

    # --- /metrics -------------------------------------------------------------------------------

    def test_metrics_pass_promtool_and_count_live(self):
        promtool = shutil.which("promtool")
        cfg = self.config("metrics.yaml", self.pipeline("cam", "wide.mp4"), self.pipeline("small", "small.mp4"),
                          self.rtsp_pipeline())
        d = self.start(cfg)
        self.wait_processing(d, "cam")
        self.wait_processing(d, "small")
        status, headers, body = d.get("/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8")
        first = parse_metrics(body.decode())
        if promtool:
            r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 0, (r.stdout + r.stderr).decode())
            self.assertEqual((r.stdout + r.stderr).strip(), b"", "promtool lint findings")
        self.assertEqual(metric(first, "framefuse_build_info", version=d.status()["version"]), 1)
        self.assertEqual(metric(first, "framefuse_ready"), 1)

        for name, state in (("cam", "streaming"), ("small", "streaming")):
            states = {s: metric(first, "framefuse_source_state", pipeline=name, state=s)
                      for s in ("connecting", "streaming", "stalled", "backoff", "finished", "failed")}
            self.assertEqual(states[state], 1, states)
            self.assertEqual(sum(states.values()), 1, states)
        rtsp_states = {s: metric(first, "framefuse_source_state", pipeline="secretcam", state=s)
                       for s in ("connecting", "streaming", "stalled", "backoff", "finished", "failed")}
        self.assertEqual(rtsp_states["connecting"] + rtsp_states["backoff"], 1, rtsp_states)
        self.assertEqual(metric(first, "framefuse_frames_processed_total", pipeline="secretcam"), 0)
        codecs = {dict(k[1])["pipeline"]: dict(k[1])["codec"] for k, v in first.items()
                  if k[0] == "framefuse_source_codec_info" and v == 1}
        self.assertEqual(codecs, {"cam": "h264 High", "small": "h264 High"}, "secretcam never opened")

        # The latency histogram: cumulative buckets ending at +Inf == _count == frames processed so far
        for name in ("cam", "small"):
            buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in first.items()
                              if k[0] == "framefuse_decode_to_output_seconds_bucket" and dict(k[1])["pipeline"] == name))
            self.assertGreaterEqual(len(buckets), 2)
            self.assertEqual(buckets[-1][0], math.inf)
            self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets), "buckets must be cumulative")
            count = metric(first, "framefuse_decode_to_output_seconds_count", pipeline=name)
            self.assertEqual(buckets[-1][1], count)
            self.assertGreater(count, 0)
            processed = metric(first, "framefuse_frames_processed_total", pipeline=name)
            self.assertLessEqual(abs(count - processed), 3, "one observation per processed frame (read apart)")
            total = metric(first, "framefuse_decode_to_output_seconds_sum", pipeline=name)
            self.assertGreater(total, 0)
            self.assertLess(total / count, 1.0, "mean latency of a 16x16 output on a small clip")
            # The part before the submit: one observation per latency, never more time than it.
            waited = metric(first, "framefuse_queue_wait_seconds_sum", pipeline=name)
            waits = metric(first, "framefuse_queue_wait_seconds_count", pipeline=name)
            self.assertLessEqual(0, count - waits)
            self.assertLessEqual(count - waits, 3, "read apart by frames processed meanwhile")
            self.assertGreaterEqual(waited, 0)
            self.assertLessEqual(waited, total)
            # The submit call's part, after the wait: as many observations, no more time than is left.
            submitted = metric(first, "framefuse_submit_seconds_sum", pipeline=name)
            submits = metric(first, "framefuse_submit_seconds_count", pipeline=name)
            self.assertLessEqual(0, count - submits)
            self.assertLessEqual(count - submits, 3, "read apart by frames processed meanwhile")
            self.assertGreater(submitted, 0, "a submit takes time")
            self.assertLessEqual(waited + submitted, total)

        time.sleep(0.6)   # realtime at 30 fps: ~18 more frames
        second = parse_metrics(d.get("/metrics")[2].decode())
        for name in ("cam", "small"):
            a = metric(first, "framefuse_frames_processed_total", pipeline=name)
            b = metric(second, "framefuse_frames_processed_total", pipeline=name)
            self.assertGreater(b, a, f"{name}: frames_processed_total must grow between scrapes")
            self.assertGreaterEqual(metric(second, "framefuse_frames_decoded_total", pipeline=name), b)
        self.assertGreater(metric(second, "framefuse_uptime_seconds"), metric(first, "framefuse_uptime_seconds"))

        # The process families, against what the kernel says of the daemon's process.
        with open(f"/proc/{d.proc.pid}/status") as f:
            vm_rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
        rss = metric(second, "process_resident_memory_bytes")
        self.assertLess(abs(rss - vm_rss), 0.25 * vm_rss, (rss, vm_rss))
        self.assertGreaterEqual(metric(second, "process_virtual_memory_bytes"), rss)
        self.assertGreater(metric(second, "process_cpu_seconds_total"), metric(first, "process_cpu_seconds_total"))
        started = metric(second, "process_start_time_seconds")
        self.assertLess(abs(started - (time.time() - metric(second, "framefuse_uptime_seconds"))), 5.0)
        fds = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        self.assertLess(abs(metric(second, "process_open_fds") - fds), 8, fds)
        self.assertGreaterEqual(metric(second, "process_max_fds"), metric(second, "process_open_fds"))
        if not promtool:
            self.skipTest("promtool not installed (Debian package 'prometheus'): format not checked")

    # --- /status and redaction ------------------------------------------------------------------

    def test_status_json_and_credentials_never_leak(self):
        cfg = self.config("status.yaml", self.pipeline("cam", "wide.mp4"), self.rtsp_pipeline())
        d = self.start(cfg)
        self.wait_processing(d, "cam")
        d.wait_for("a failed RTSP connect",
                   lambda: {p["name"]: p for p in d.status()["pipelines"]}["secretcam"]["last_error"])
        s = d.status()
        self.assertEqual(s["device"], "cpu")
        self.assertEqual(s["config"]["path"], str(cfg))
        pipes = {p["name"]: p for p in s["pipelines"]}
        self.assertEqual(set(pipes), {"cam", "secretcam"})
        cam, rtsp = pipes["cam"], pipes["secretcam"]
        self.assertEqual(cam["state"], "streaming")
        self.assertGreater(cam["frames_decoded"], 0)
        self.assertGreaterEqual(cam["frames_decoded"], cam["frames_processed"])
        self.assertEqual(cam["frame"], f"{WIDE[0]}x{WIDE[1]} yuv420p bt601/limited")
        self.assertEqual(cam["codec"], "h264 High")   # libx264's default profile for 8-bit 4:2:0
        self.assertIsNone(rtsp["codec"], "never connected")
        self.assertEqual(cam["source"], str(self.dir / "wide.mp4"))
        self.assertLessEqual({"queue_full", "decode_error", "process_error"}, set(cam["dropped"]))
        self.assertGreater(cam["latency"]["count"], 0)
        self.assertLessEqual(abs(cam["latency"]["count"] - cam["frames_processed"]), 3, "one latency per frame")
        self.assertLessEqual(abs(cam["queue_wait"]["count"] - cam["latency"]["count"]), 3)
        self.assertLessEqual(cam["queue_wait"]["sum_s"], cam["latency"]["sum_s"])
        self.assertLessEqual(abs(cam["submit"]["count"] - cam["latency"]["count"]), 3)
        self.assertLessEqual(cam["queue_wait"]["sum_s"] + cam["submit"]["sum_s"], cam["latency"]["sum_s"])
        # The submits' thread CPU: some, and within their wall time (give or take the frames that
        # completed between the two counters' reads).
        self.assertGreater(cam["submit_cpu"]["sum_s"], 0)
        self.assertLessEqual(cam["submit_cpu"]["sum_s"], cam["submit"]["sum_s"] + 3 * cam["submit"]["mean_s"] + 1e-4)
        self.assertIn(rtsp["state"], ("connecting", "backoff"))
        self.assertEqual(rtsp["frames_processed"], 0)
        self.assertIsNone(rtsp["last_frame_age_s"])
        self.assertIsNone(rtsp["latency"]["mean_s"])
        self.assertIsNone(rtsp["submit_cpu"]["mean_s"])
        self.assertTrue(rtsp["source"].startswith("rtsp://") and "127.0.0.1:1/x" in rtsp["source"], rtsp["source"])
        self.assertRegex(rtsp["last_error"], r"(?i)refused")
        self.assertEqual(cam["sink"], {"type": "null", "target": None})
        # Hybrid decode's books: the cores carry the paced camera (850x478 at 30 fps, in 1080p frames
        # per second); the RTSP source never opened, so it holds nothing.
        self.assertEqual(s["decode"], [{"decoder": "cpu", "device": "host", "capacity_fps": 100 * os.cpu_count(),
                                        "paced_fps": s["decode"][0]["paced_fps"], "unpaced_streams": 0}])
        self.assertAlmostEqual(s["decode"][0]["paced_fps"], WIDE[0] * WIDE[1] * 30 / (1920 * 1080), places=6)

        bodies = {path: d.get(path)[2] for path in ("/status", "/metrics", "/readyz", "/preview/secretcam.jpg")}
        for path, body in bodies.items():
            self.assertNotIn(SECRET.encode(), body, path)
        self.assertEqual(d.stop(), 0)
        log = d.log()
        self.assertIn("secretcam", log)
        self.assertNotIn(SECRET, log)

    # --- /preview -------------------------------------------------------------------------------

    def test_preview_is_a_jpeg_of_the_current_frame(self):
        cfg = self.config("preview.yaml", self.pipeline("cam", "wide.mp4"), self.pipeline("small", "small.mp4"),
                          self.rtsp_pipeline())
        d = self.start(cfg)
        self.wait_processing(d, "cam")
        self.wait_processing(d, "small")
        ref = self.reference_frames("wide.mp4", preview_size(*WIDE))
        for name, size in (("cam", WIDE), ("small", SMALL)):
            status, headers, body = d.get(f"/preview/{name}.jpg")
            self.assertEqual(status, 200, body[:200])
            self.assertEqual(headers["content-type"], "image/jpeg")
            self.assertEqual(body[:2], b"\xff\xd8", "SOI")
            self.assertEqual(body[-2:], b"\xff\xd9", "EOI")
            marker, w, h = jpeg_size(body)
            self.assertEqual(marker, 0xC0, "baseline JPEG (SOF0)")
            self.assertEqual((w, h), preview_size(*size), name)
            if name == "cam":
                self.assert_matches_a_frame(body, (w, h), ref)
        self.assertEqual(preview_size(*WIDE), (640, 360))   # the rule really downscaled
        status, headers, body = d.get("/preview/cam/o.jpg")   # output o's tensor, de-normalized: 16 x 16
        self.assertEqual((status, headers["content-type"]), (200, "image/jpeg"), body[:200])
        self.assertEqual(jpeg_size(body)[1:], (16, 16))
        status, headers, body = d.get("/preview/secretcam.jpg")
        self.assertEqual(status, 503, body)
        self.assertEqual(headers.get("retry-after"), "1")
        self.assertEqual(d.get("/preview/nope.jpg")[0], 404)

    def reference_frames(self, clip, size):
        """Every frame of `clip` as RGB at `size`, scaled by FFmpeg (area filter): [n, h, w, 3] uint8."""
        w, h = size
        raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(self.dir / clip), "-vf", f"scale={w}:{h}:flags=area",
                              "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True,
                             timeout=30).stdout
        return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3).astype(np.int16)

    def assert_matches_a_frame(self, jpeg, size, ref):
        w, h = size
        raw = subprocess.run(["ffmpeg", "-v", "error", "-f", "mjpeg", "-i", "-", "-f", "rawvideo", "-pix_fmt", "rgb24",
                              "-"], input=jpeg, capture_output=True, check=True, timeout=30).stdout
        img = np.frombuffer(raw, np.uint8).reshape(h, w, 3).astype(np.int16)
        self.assertGreater(float(img.std()), 20, "preview is flat")
        errors = np.abs(ref - img[None]).mean(axis=(1, 2, 3))
        best = float(errors.min())
        # JPEG at q5 and another scaler: ~2 levels off the right frame. The next frame of testsrc2 is ~4.5
        # off, a BT.709 matrix ~9, a full-range reading ~14, a mirrored image (complementary bars) ~200.
        self.assertLess(best, 4.0, f"preview matches no source frame (mean abs errors {np.round(errors, 1)})")
        mirrored = float(np.abs(ref - img[None, :, ::-1]).mean(axis=(1, 2, 3)).min())
        self.assertGreater(mirrored, 3 * best, "the oracle cannot tell a mirrored preview apart")

    # --- / in a browser ---------------------------------------------------------------------------

    def test_index_page_renders_live_numbers_in_chromium(self):
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if not browser:
            self.skipTest("chromium not installed (apt-get install chromium): page not rendered")
        cfg = self.config("page.yaml", self.pipeline("cam", "wide.mp4"), self.pipeline("small", "small.mp4"))
        d = self.start(cfg)
        self.wait_processing(d, "cam", at_least=10)
        self.wait_processing(d, "small", at_least=10)
        status, headers, page = d.get("/")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/html"))
        self.assertNotIn(b"cam", page, "pipeline names must come from /status, not the static page")
        with tempfile.TemporaryDirectory() as profile:
            r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                                f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom",
                                f"http://127.0.0.1:{d.port}/"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        dom = r.stdout
        self.assertIn('id="pipelines"', dom, dom[:500])
        for name in ("cam", "small"):
            self.assertIn(f"<h2>{name}<span", dom, f"no card for {name}")
        m = re.search(r'<div id="daemon">([^<]*)</div>', dom)
        self.assertTrue(m, dom[:2000])
        self.assertRegex(m.group(1), r"^ready \S device cpu \S up \d+ s \S config .*page\.yaml \(reloads 0 ok, 0 failed\)$")
        version = re.search(r'<span id="version">([^<]*)</span>', dom)
        self.assertEqual(version.group(1), d.status()["version"])
        counts = re.findall(r"<td>decoded / processed</td><td>(\d+) / (\d+)</td>", dom)
        self.assertEqual(len(counts), 2, dom)
        for decoded, processed in counts:
            self.assertGreaterEqual(int(processed), 10)
            self.assertGreaterEqual(int(decoded), int(processed))
        self.assertIn(f"<td>frame</td><td>{WIDE[0]}x{WIDE[1]} yuv420p bt601/limited</td>", dom)
        self.assertRegex(dom, r"<td>fps</td><td>\d+\.\d</td>")
        self.assertRegex(dom, r"<td>mean latency</td><td>\d+\.\d\d ms</td>")
        self.assertRegex(dom, r'<span class="state streaming">streaming</span>')
        self.assertRegex(dom, r'<img alt="preview of cam" src="/preview/cam\.jpg\?boxes=1&amp;t=\d+"')
        self.assertRegex(dom, r'<img alt="output o" src="/preview/cam/o\.jpg\?t=\d+"')

    # --- SIGHUP -----------------------------------------------------------------------------------

    def test_sighup_reload_counters(self):
        cfg = self.config("reload.yaml", self.pipeline("cam", "wide.mp4"), self.pipeline("small", "small.mp4"))
        d = self.start(cfg)
        self.wait_processing(d, "cam", at_least=10)
        self.wait_processing(d, "small", at_least=10)
        m0 = d.metrics()[1]
        self.assertEqual(metric(m0, "framefuse_config_reloads_total", result="success"), 0)
        self.assertEqual(metric(m0, "framefuse_config_reloads_total", result="failure"), 0)
        self.assertEqual(metric(m0, "framefuse_config_last_reload_success"), 1)
        cam0 = metric(m0, "framefuse_frames_processed_total", pipeline="cam")

        # valid change: 'small' gets another output size, 'cam' is unchanged
        self.config("reload.yaml", self.pipeline("cam", "wide.mp4"), self.pipeline("small", "small.mp4", width=24))
        before = time.time()
        d.signal(signal.SIGHUP)
        m1 = d.wait_for("a successful reload", lambda: (lambda m: m if metric(
            m, "framefuse_config_reloads_total", result="success") == 1 else None)(d.metrics()[1]))
        self.assertEqual(metric(m1, "framefuse_config_reloads_total", result="failure"), 0)
        self.assertEqual(metric(m1, "framefuse_config_last_reload_success"), 1)
        self.assertGreaterEqual(metric(m1, "framefuse_config_last_reload_timestamp_seconds"), before - 1)
        self.assertGreaterEqual(metric(m1, "framefuse_frames_processed_total", pipeline="cam"), cam0,
                                "an unchanged pipeline keeps running and counting")
        self.assertIn("reload applied: 1 unchanged, 1 restarted, 0 started", d.log())

        # invalid config: refused, counters kept
        time.sleep(0.3)
        m1 = d.metrics()[1]
        self.write_config("reload.yaml", "pipelines: [ {name: broken\n")
        d.signal(signal.SIGHUP)
        m2 = d.wait_for("a refused reload", lambda: (lambda m: m if metric(
            m, "framefuse_config_reloads_total", result="failure") == 1 else None)(d.metrics()[1]))
        self.assertEqual(metric(m2, "framefuse_config_reloads_total", result="success"), 1)
        self.assertEqual(metric(m2, "framefuse_config_last_reload_success"), 0)
        for name in ("cam", "small"):
            self.assertGreaterEqual(metric(m2, "framefuse_frames_processed_total", pipeline=name),
                                    metric(m1, "framefuse_frames_processed_total", pipeline=name), name)
        s = d.status()
        self.assertEqual([p["name"] for p in s["pipelines"]], ["cam", "small"])
        self.assertEqual((s["config"]["reloads_ok"], s["config"]["reloads_failed"], s["config"]["last_reload_ok"]),
                         (1, 1, False))
        time.sleep(0.4)
        m3 = d.metrics()[1]
        for name in ("cam", "small"):
            self.assertGreater(metric(m3, "framefuse_frames_processed_total", pipeline=name),
                               metric(m2, "framefuse_frames_processed_total", pipeline=name),
                               f"{name} keeps running after a refused reload")
        self.assertRegex(d.log(), r"reload refused, keeping the running config: .*reload\.yaml:\d+:\d+")

    def test_sighup_applies_log_settings_and_warns_about_http(self):
        cfg = self.config("relog.yaml", self.pipeline("cam", "wide.mp4"))
        d = self.start(cfg)
        self.wait_processing(d, "cam")
        self.write_config("relog.yaml", "log: {level: warn}\nhttp: {max_connections: 8}\n" +
                          cfg.read_text().replace("log: {level: info}\n", "").replace("width: 16", "width: 24"))
        d.signal(signal.SIGHUP)
        d.wait_for("a successful reload", lambda: metric(d.metrics()[1], "framefuse_config_reloads_total",
                                                       result="success") == 1)
        d.wait_for("the http warning", lambda: "reload: http settings changed" in d.log(), timeout=2)
        self.assertNotIn("reload applied", d.log(), "log.level: warn must silence this reload's info lines")
        self.assertEqual(d.get("/livez")[0], 200, "the HTTP server keeps serving on its port")


if __name__ == "__main__":
    ctest_main.main()
