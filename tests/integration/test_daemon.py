"""End-to-end tests of the framefused binary: real clips decoded by FFmpeg, tensors read back
with numpy, bad input rejected with one clear line, signals handled."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

import ctest_main  # this directory: the tests run as scripts

import numpy as np

FRAMEFUSED = os.environ.get("FRAMEFUSED", "build/daemon/framefused")
sys.path.insert(0, str(Path(os.environ.get("FRAMEFUSE_SOURCE_DIR", ".")) / "tools"))
from framefuse_shm import NotReady, ShmRing  # noqa: E402  (tools/ is not a package)


def run(*args, timeout=120, **kw):
    return subprocess.run([FRAMEFUSED, *args], capture_output=True, text=True, timeout=timeout, **kw)


def open_ring(name, proc, timeout_s=20):
    """The ring framefused `proc` writes as /dev/shm/<name>, once published: the name exists a moment
    before the object is sized and its header written, and may still name a ring of an earlier writer."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ring = ShmRing(name)
            if ring.writer_pid == proc.pid:
                return ring
            ring.close()
        except (FileNotFoundError, ValueError):   # not there, not sized or not published yet
            pass
        if proc.poll() is not None:
            raise AssertionError(f"framefused exited ({proc.returncode}) before publishing ring '{name}'")
        if time.monotonic() > deadline:
            raise AssertionError(f"no ring '{name}' of framefused {proc.pid} within {timeout_s} s")
        time.sleep(0.005)


def make_clip(path, size="320x240", frames=20, rate=30):
    """A deterministic H.264 clip with motion (ffmpeg lavfi testsrc2)."""
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}",
                    "-frames:v", str(frames), "-c:v", "libx264", "-threads", "1", "-pix_fmt", "yuv420p", str(path)],
                   check=True)


class DaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = Path(cls.tmp.name)
        cls.clip = cls.dir / "clip.mp4"
        make_clip(cls.clip)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def write_config(self, name, body):
        path = self.dir / name
        path.write_text(textwrap.dedent(body))
        return path

    DEFAULT_OUTPUTS = """\
- name: cls
  resize: {shorter_side: 64}
  center_crop: [56, 56]
  mean: [0.485, 0.456, 0.406]
  std: [0.229, 0.224, 0.225]
- name: det
  resize: {width: 96, height: 96}
  aspect: letterbox
  dtype: float16
- name: thumb
  resize: {width: 80, height: 60}
  layout: hwc
  dtype: uint8
  scale: 1
"""

    def pipeline_config(self, name, out, extra_source="", outputs=None):
        outputs = textwrap.indent(outputs or self.DEFAULT_OUTPUTS, " " * 6)
        path = self.dir / name
        path.write_text(
            "http: {enabled: false}\n"
            "pipelines:\n"
            "  - name: cam\n"
            f"    source: {{uri: clip.mp4{extra_source}}}\n"
            "    outputs:\n"
            f"{outputs}"
            f"    sink: {{type: npy, directory: {out}}}\n")
        return path

    def pipelines_config(self, file, pipelines, outputs=None, top=""):
        """`file` with an npy pipeline for each (name, uri, sink directory, extra lines) of `pipelines`,
        each with `outputs` (default DEFAULT_OUTPUTS), after the top-level lines `top`."""
        outputs = textwrap.indent(outputs or self.DEFAULT_OUTPUTS, " " * 6)
        body = "http: {enabled: false}\n" + top + "pipelines:\n"
        for name, uri, directory, extra in pipelines:
            body += (f"  - name: {name}\n    source: {{uri: {uri}}}\n{extra}    outputs:\n{outputs}"
                     f"    sink: {{type: npy, directory: {directory}}}\n")
        path = self.dir / file
        path.write_text(body)
        return path

    def test_help_and_version(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("check-config", r.stdout)
        r = run("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"framefused \d+\.\d+\.\d+")

    def test_run_writes_numpy_tensors(self):
        out = self.dir / "out_run"
        cfg = self.pipeline_config("run.yaml", out)
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr, r"summary 'cam': 20 frames decoded, 20 processed, 0 dropped, "
                                   r"\d+\.\d fps from the first frame decoded to the last output \(\d+\.\d\d s\)")
        expect = {"cls": ((3, 56, 56), np.float32), "det": ((3, 96, 96), np.float16), "thumb": ((60, 80, 3), np.uint8)}
        for name, (shape, dtype) in expect.items():
            files = sorted((out / name).glob("*.npy"))
            self.assertEqual(len(files), 20, name)
            a = np.load(files[5])
            self.assertEqual(a.shape, shape, name)
            self.assertEqual(a.dtype, dtype, name)
            self.assertTrue(np.isfinite(a.astype(np.float64)).all(), name)
            self.assertGreater(float(a.astype(np.float64).std()), 0.01, f"{name} is flat")
        # letterbox of a 4:3 frame into a square: top and bottom rows are the pad value 114/255
        det = np.load(sorted((out / "det").glob("*.npy"))[0]).astype(np.float32)
        np.testing.assert_allclose(det[:, 0, :], 114 / 255, atol=1e-3)
        np.testing.assert_allclose(det[:, -1, :], 114 / 255, atol=1e-3)

    def test_frames_per_file_stacks(self):
        out = self.dir / "out_stack"
        cfg = self.write_config("stack.yaml", f"""
        http: {{enabled: false}}
        pipelines:
          - name: cam
            source: {{uri: clip.mp4}}
            outputs:
              - name: g
                resize: {{width: 32, height: 24}}
                channels: gray
                dtype: uint8
                scale: 1
            sink: {{type: npy, directory: {out}, frames_per_file: 8}}
        """)
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        shapes = [np.load(f).shape for f in sorted((out / "g").glob("*.npy"))]
        self.assertEqual(shapes, [(8, 1, 24, 32), (8, 1, 24, 32), (4, 1, 24, 32)])

    def test_ten_bit_hevc_gives_the_tensors_of_eight_bit_h264(self):
        """A 10-bit HEVC camera (Main 10, decoded in software into yuv420p10 frames the ops read as they
        are) gives the tensors of an 8-bit H.264 camera filming the same scene: a blurred test pattern
        with 10-bit detail, encoded losslessly as it is and, rounded to 8 bits (Y, U, V within 1/2 LSB),
        as H.264."""
        scene = "testsrc2=size=320x240:rate=30,format=yuv420p10le,gblur=sigma=1.5"
        to_8_bits = "min(floor((val+2)/4)*4\\,1020)"   # round to the nearest 8-bit value (swscale truncates)
        clips = {"hevc10.mp4": (scene, ["-pix_fmt", "yuv420p10le", "-c:v", "libx265", "-x265-params",
                                        "lossless=1:pools=none:frame-threads=1:log-level=error"]),
                 "h264.mp4": (f"{scene},lutyuv=y={to_8_bits}:u={to_8_bits}:v={to_8_bits},format=yuv420p",
                              ["-pix_fmt", "yuv420p", "-c:v", "libx264", "-qp", "0"])}
        for name, (graph, codec) in clips.items():
            subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", "-f", "lavfi", "-i", graph, "-frames:v", "12",
                            "-threads", "1", *codec, str(self.dir / name)], check=True)
        raw = subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-i", str(self.dir / "hevc10.mp4"), "-f", "rawvideo",
                              "-pix_fmt", "yuv420p10le", "-"], capture_output=True, check=True).stdout
        self.assertGreater(float((np.frombuffer(raw, np.uint16) % 4 != 0).mean()), 0.3,
                           "the 10-bit clip has no detail below 8 bits")
        cfg = self.pipelines_config("depth.yaml", [(Path(name).stem, name, self.dir / "out_depth" / Path(name).stem, "")
                                                   for name in clips])
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        # 1/2 LSB of Y, U and V reaches RGB as at most (1.164 + 2.018) / 2 = 1.6 LSB (BT.601 limited
        # range); cls divides by std >= 0.224; thumb rounds to integers once more.
        tolerance = {"cls": 1.6 / 255 / 0.224, "det": 1.6 / 255 + 1e-3, "thumb": 2}
        for output, atol in tolerance.items():
            ten = sorted((self.dir / "out_depth" / "hevc10" / output).glob("*.npy"))
            eight = sorted((self.dir / "out_depth" / "h264" / output).glob("*.npy"))
            self.assertEqual(len(ten), 12, output)
            self.assertEqual([f.name for f in ten], [f.name for f in eight], output)
            for a, b in zip(ten, eight):
                x, y = np.load(a).astype(np.float64), np.load(b).astype(np.float64)
                self.assertLessEqual(np.abs(x - y).max(), atol, f"{output}/{a.name}")
                self.assertGreater(y.std(), 10 * atol, f"{output}/{a.name} is flat")
                if output == "thumb":
                    # The 8-bit clip's rounding (ties up) moves its mean by ~0.13 LSB; the 10-bit clip's
                    # low bits dropped would move the 10-bit one's by another ~0.44.
                    self.assertLess(abs((x - y).mean()), 0.3, f"{output}/{a.name}")

    def test_control_metadata_in_sink(self):
        out = self.dir / "out_control"
        cfg = self.pipeline_config("control.yaml", out)
        cfg.write_text(cfg.read_text() + "    control: {delay_frames: 2, auto_gain: {target: 0.5}, health: {}}\n")
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        lines = [json.loads(l) for l in (out / "control.jsonl").read_text().splitlines()]
        self.assertEqual([l["frame"] for l in lines], list(range(20)))
        self.assertEqual([l["measured_frame"] for l in lines], list(range(20)))
        self.assertEqual(sorted(lines[0]["outputs"]), ["cls", "det", "thumb"])
        gains = [l["outputs"]["cls"]["gain"] for l in lines]
        # delay_frames 2: frames 0 and 1 have no statistics old enough; frame 2 acts on frame 0's
        self.assertEqual(gains[:2], [1.0, 1.0])
        self.assertNotEqual(gains[2], 1.0)
        self.assertTrue(all(0 <= l["mean_luma"] <= 1 for l in lines))

    def test_sink_failure_ends_only_its_pipeline(self):
        """A sink that cannot write (its folder cannot be made, even by root) fails its pipeline with one
        line that names it once; the other pipeline writes all its frames."""
        out = self.dir / "out_sinkfail"
        cfg = self.pipelines_config("sinkfail.yaml", [("good", "clip.mp4", out, ""),
                                                      ("bad", "clip.mp4", "/proc/framefuse-nope", "")],
                                    outputs="- {name: o, resize: {width: 32, height: 32}}\n")
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 1, "a pipeline failed: a runtime failure " + r.stderr)
        self.assertRegex(r.stderr, r"summary 'good': 20 frames decoded, 20 processed, 0 dropped")
        self.assertEqual(len(list((out / "o").glob("*.npy"))), 20)
        errors = [l for l in r.stderr.splitlines() if " error " in l]
        self.assertEqual(len(errors), 1, r.stderr)
        self.assertRegex(errors[0], r"error pipeline 'bad' sink: cannot create folder '/proc/framefuse-nope/o': ")
        self.assertEqual(errors[0].count("'bad'"), 1, errors[0])
        self.assertRegex(r.stderr, r"summary 'bad': .*state failed")

    def test_batch_group_outputs_equal_unbatched(self):
        """Three pipelines in one batch group write what an unbatched pipeline writes, byte for byte."""
        out = self.dir / "out_batch"
        cfg = self.pipelines_config(
            "batch.yaml", [(name, "clip.mp4", out / name, "" if name == "solo" else "    batch_group: lobby\n")
                           for name in ("cam0", "cam1", "cam2", "solo")],
            top="batching:\n  - {name: lobby, max_batch: 4, max_wait: 5ms}\n")
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("cam0", "cam1", "cam2"):
            self.assertRegex(r.stderr, rf"summary '{name}': 20 frames decoded, 20 processed, 0 dropped")
        m = re.search(r"summary batch group 'lobby': (\d+) batches, 60 frames", r.stderr)
        self.assertIsNotNone(m, r.stderr)
        self.assertGreaterEqual(int(m.group(1)), 15)   # at most 4 frames a batch
        for output in ("cls", "det", "thumb"):
            solo = sorted((out / "solo" / output).glob("*.npy"))
            self.assertEqual(len(solo), 20)
            for name in ("cam0", "cam1", "cam2"):
                files = sorted((out / name / output).glob("*.npy"))
                self.assertEqual([f.name for f in files], [f.name for f in solo], name)
                for a, b in zip(files, solo):
                    self.assertEqual(a.read_bytes(), b.read_bytes(), f"{name}/{output}/{a.name}")

    def test_shm_ring_carries_what_the_npy_sink_writes(self):
        """A pipeline with a shared-memory sink, read live by tools/framefuse_shm.py, hands out the
        tensors an npy pipeline of the same clip writes, byte for byte."""
        ring_name = f"framefuse-it-{os.getpid()}"
        out = self.dir / "out_shm"
        outputs = textwrap.indent(self.DEFAULT_OUTPUTS, " " * 6)
        cfg = self.dir / "shm.yaml"
        control = "    control: {delay_frames: 2, auto_gain: {outputs: [cls], target: 0.6}}\n"
        cfg.write_text("http: {enabled: false}\npipelines:\n"
                       f"  - name: files\n    source: {{uri: clip.mp4}}\n    outputs:\n{outputs}{control}"
                       f"    sink: {{type: npy, directory: {out}}}\n"
                       f"  - name: ring\n    source: {{uri: clip.mp4, realtime: true}}\n    outputs:\n{outputs}{control}"
                       f"    sink: {{type: shm, name: {ring_name}, slots: 32}}\n")
        proc = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg), "--device", "cpu"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            with open_ring(ring_name, proc) as ring:
                self.assertEqual(ring.pipeline, "ring")
                self.assertEqual(ring.slots, 32)
                self.assertEqual([(o.name, o.dtype, o.shape) for o in ring.outputs],
                                 [("cls", np.float32, (3, 56, 56)), ("det", np.float16, (3, 96, 96)),
                                  ("thumb", np.uint8, (60, 80, 3))])
                frames = []   # paced at 30 fps: read as they come, in place (views of the slots)
                for f in ring.frames(start=0, timeout_s=20, copy=False):
                    copied = {k: v.copy() for k, v in f.outputs.items()}
                    self.assertFalse(any(v.flags.writeable for v in f.outputs.values()), "views are read-only")
                    if f.intact():
                        f.outputs = copied
                        frames.append(f)
                self.assertTrue(ring.closed(), "the pipeline's stop closes the ring")
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(proc.returncode, 0, stderr)
        self.assertFalse(os.path.exists(f"/dev/shm/{ring_name}"), "the ring's name goes with the pipeline")
        self.assertEqual([f.counter for f in frames], list(range(20)))
        self.assertEqual([f.frame_index for f in frames], list(range(20)))
        records = {r["frame"]: r for r in map(json.loads, (out / "control.jsonl").read_text().splitlines())}
        self.assertEqual(sorted(records), list(range(20)))
        for f in frames:
            for name, a in f.outputs.items():
                b = np.load(out / name / f"{f.frame_index:08d}.npy")
                self.assertEqual(a.dtype, b.dtype, name)
                self.assertEqual(a.tobytes(), b.tobytes(), f"{name} frame {f.frame_index}")
            # The frame's control record, as the npy pipeline logged it for the same frame.
            c, r = f.control, records[f.frame_index]
            self.assertIsNotNone(c, f"frame {f.frame_index} has no control record")
            self.assertEqual(c["measured_frame"], r["measured_frame"])
            for key in ("mean_luma", "variance", "motion", "black", "white"):
                self.assertAlmostEqual(c[key], r[key], places=6, msg=key)
            self.assertEqual(c["health"], r["health"])
            self.assertEqual(list(c["outputs"]), ["cls", "det", "thumb"])
            for name, o in c["outputs"].items():
                self.assertAlmostEqual(o["gain"], r["outputs"][name]["gain"], places=5, msg=name)
                self.assertEqual(list(o["roi"]), r["outputs"][name]["roi"], name)
        self.assertNotEqual(frames[-1].control["outputs"]["cls"]["gain"], 1.0, "auto_gain moved the gain")

    def test_ring_reader_tells_a_ring_being_made_from_a_foreign_object(self):
        """The name of a ring exists a moment before the ring is sized and published: the reader says so
        (NotReady), and refuses objects that are not rings."""
        name = f"framefuse-it-notready-{os.getpid()}"
        path = f"/dev/shm/{name}"
        try:
            for content in (b"", bytes(8192)):   # created; sized, its magic not yet written
                with open(path, "wb") as f:
                    f.write(content)
                with self.assertRaises(NotReady):
                    ShmRing(name)
            with open(path, "wb") as f:
                f.write(b"NOTARING" + bytes(8184))
            with self.assertRaisesRegex(ValueError, "not a framefuse ring") as e:
                ShmRing(name)
            self.assertNotIsInstance(e.exception, NotReady)
        finally:
            os.unlink(path)
        with self.assertRaises(FileNotFoundError):
            ShmRing(name)

    def test_shm_readers_see_a_killed_writer_and_its_successor(self):
        """A framefused killed with SIGKILL never closes its ring: readers end on the writer's death, and
        the next framefused replaces the stale ring, which readers of the old one can tell."""
        ring_name = f"framefuse-it-killed-{os.getpid()}"
        cfg = self.write_config("shm_killed.yaml", f"""
            http: {{enabled: false}}
            pipelines:
              - name: cam
                source: {{uri: clip.mp4, loop: true, realtime: true}}
                outputs: [{{name: o, resize: {{width: 32, height: 24}}, dtype: uint8}}]
                sink: {{type: shm, name: {ring_name}, slots: 4}}
            """)

        def start():
            proc = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg), "--device", "cpu"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                return proc, open_ring(ring_name, proc)
            except AssertionError:
                proc.kill()
                raise

        first, ring = start()
        try:
            seen = 0
            for _ in ring.frames(timeout_s=10):
                seen += 1
                if seen == 5:
                    first.kill()   # SIGKILL: the ring stays behind, never closed
                    first.wait(timeout=10)
                if seen > 100:
                    break
            self.assertGreaterEqual(seen, 5)
            self.assertLess(seen, 20, "frames() ends once the writer is gone")
            self.assertFalse(ring.closed())
            self.assertFalse(ring.writer_alive())
            self.assertTrue(os.path.exists(f"/dev/shm/{ring_name}"), "a killed writer leaves its ring")
            second, ring2 = start()   # replaces the stale ring
            try:
                self.assertTrue(ring.replaced())
                self.assertIsNotNone(next(ring2.frames(timeout_s=10), None))
            finally:
                second.send_signal(signal.SIGTERM)
                self.assertEqual(second.wait(timeout=20), 0)
                ring2.close()
            self.assertFalse(os.path.exists(f"/dev/shm/{ring_name}"))
        finally:
            ring.close()
            if first.poll() is None:
                first.kill()
            if os.path.exists(f"/dev/shm/{ring_name}"):
                os.unlink(f"/dev/shm/{ring_name}")

    def test_cuda_ipc_sink_on_the_cpu_is_refused_at_start(self):
        """A device ring needs a CUDA device: on the CPU backend framefused refuses the config with one
        line naming the pipeline, before anything runs."""
        cfg = self.write_config("ipc_cpu.yaml", f"""
            http: {{enabled: false}}
            pipelines:
              - {{name: cam, source: {{uri: {self.clip}}}, outputs: [{{name: o}}], sink: {{type: cuda_ipc}}}}
            """)
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assert_one_line_error(r, r"pipeline 'cam': sink cuda_ipc needs a (CUDA device; the pipeline runs on the "
                                      r"CPU|build with CUDA)")
        self.assertFalse(os.path.exists("/dev/shm/cam"))

    def test_batch_group_members_need_the_same_outputs(self):
        cfg = self.write_config("batch_bad.yaml", """
        batching: [{name: lobby}]
        pipelines:
          - {name: a, source: {uri: clip.mp4}, batch_group: lobby, outputs: [{name: o}], sink: {type: null}}
          - {name: b, source: {uri: clip.mp4}, batch_group: lobby, outputs: [{name: o, interp: area}], sink: {type: null}}
        """)
        r = run("check-config", str(cfg))
        self.assert_one_line_error(r, r"batch_bad\.yaml:5:70: pipelines\[1\]\.outputs\[0\]: interp differs from "
                                      r"pipeline 'a' \(line 4\) in batch group 'lobby'")

    def test_json_log_lines_parse(self):
        import json, shutil
        quoted = self.dir / 'cam "north".mp4'   # quotes and spaces must be escaped in the JSON
        shutil.copy(self.clip, quoted)
        cfg = self.write_config("jsonlog.yaml", """
        log: {level: info, format: json}
        http: {enabled: false}
        pipelines:
          - name: cam
            source: {uri: 'cam "north".mp4'}
            outputs: [{name: a, resize: {width: 8, height: 8}}]
            sink: {type: null}
        """)
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = [json.loads(l) for l in r.stderr.splitlines() if l.strip()]
        self.assertTrue(all(set(l) == {"ts", "level", "msg"} for l in lines), lines)
        self.assertTrue(any('cam "north".mp4' in l["msg"] for l in lines), lines)
        self.assertTrue(any(l["msg"].startswith("summary 'cam': 20 frames decoded") for l in lines), lines)

    def test_bench_measures_decode_ceiling_and_pipeline(self):
        import json
        out = self.dir / "bench.json"
        r = run("bench", "--clip", str(self.clip), "--streams", "2", "--frames", "30", "--device", "cpu",
                "--json", str(out))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"pipeline / decode ceiling = \d+\.\d % \(while every stream runs: \d+\.\d %\)")
        result = json.loads(out.read_text())
        self.assertEqual((result["streams"], result["frames_per_stream"], result["device"]), (2, 30, "cpu"))
        self.assertEqual((result["codec"], result["frame"]), ("h264 High", "320x240 yuv420p bt601/limited"))
        self.assertIn(f"({result['codec']}, {result['frame']})", r.stdout)
        for phase in ("decode", "pipeline", "decode_again"):
            p = result[phase]
            self.assertEqual(p["frames"], 60, phase)   # 30 per stream: the 20-frame clip loops
            self.assertGreater(p["fps"], 0, phase)
            self.assertAlmostEqual(p["fps_per_stream"], p["fps"] / 2, delta=1e-6 * p["fps"])
            self.assertGreaterEqual(p["cpu_ms_per_frame"], 0, phase)   # the decode phase may fit in a tick
            self.assertGreater(p["peak_rss_mib"], 1, phase)
            self.assertEqual(p["decoder"], "cpu", phase)
            # While both streams ran (SteadyWindow; 0 if one was done before the other had 10 frames).
            self.assertGreaterEqual(p["steady_fps"], 0, phase)
        self.assertGreater(result["pipeline"]["cpu_ms_per_frame"], 0)
        self.assertTrue(0 < result["ratio"] <= 2, result["ratio"])
        ceiling = max(result["decode"]["fps"], result["decode_again"]["fps"])   # the faster decode run
        self.assertAlmostEqual(result["ratio"], result["pipeline"]["fps"] / ceiling, places=6)
        steady_ceiling = max(result["decode"]["steady_fps"], result["decode_again"]["steady_fps"])
        if steady_ceiling > 0:
            self.assertAlmostEqual(result["steady_ratio"], result["pipeline"]["steady_fps"] / steady_ceiling, places=6)
        else:
            self.assertEqual(result["steady_ratio"], 0)
        lat = result["pipeline"]
        self.assertIn(lat["latency_p50_ms"], [1e3 * b for b in (0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001,
                                                                 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.01,
                                                                 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)])
        self.assertLessEqual(lat["latency_p50_ms"], lat["latency_p99_ms"])
        # The pipelines' own submit calls: some host CPU, a part of the process's per frame.
        self.assertGreater(lat["submit_cpu_us"], 0)
        self.assertLessEqual(lat["submit_cpu_us"], 1e3 * lat["cpu_ms_per_frame"])
        self.assertRegex(r.stdout, r"submit CPU \d+\.\d\d us/frame")
        self.assertIn(f"{100 * result['ratio']:.1f} %", r.stdout)

    def test_bench_live_trials_beside_a_reconnecting_source(self):
        out = self.dir / "bench_churn.json"
        r = run("bench", "--clip", str(self.clip), "--frames", "10", "--device", "cpu", "--live", "2",
                "--live-seconds", "1", "--churn", "--json", str(out))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("beside a source that reopens the clip after every 10 frames", r.stdout)
        trials = json.loads(out.read_text())["live"]["trials"]
        self.assertGreaterEqual(len(trials), 2)   # 2 streams, then 80 % of the most held
        for t in trials:
            # 10 frames of the 320x240 clip decode in milliseconds: it reopened many times a second.
            self.assertGreater(t["reopens"], 5, t)
            self.assertEqual(t["frames"], 30 * t["streams"] - t["dropped"], t)

    def test_bench_bad_usage(self):
        r = run("bench", "--clip", str(self.dir / "no_such_clip.mp4"), "--device", "cpu")
        self.assert_one_line_error(r, r"--clip: '.*no_such_clip\.mp4': no such file")
        r = run("bench", "--clip", str(self.clip), "--streams", "0")
        self.assert_one_line_error(r, r"--streams: '0'")

    def test_check_config_accepts_valid(self):
        cfg = self.pipeline_config("valid.yaml", self.dir / "unused")
        r = run("check-config", str(cfg))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_kubernetes_manifest_config_is_valid(self):
        # docker/kubernetes.yaml embeds the daemon's config in a ConfigMap (a literal block up to the
        # next document) and probes the daemon's own endpoints on the port it binds for the pod.
        manifest = (Path(__file__).resolve().parents[2] / "docker" / "kubernetes.yaml").read_text()
        block = manifest.split("framefused.yaml: |\n", 1)[1].split("\n---", 1)[0]
        cfg = self.write_config("kubernetes.yaml", block)
        r = run("check-config", str(cfg), env={**os.environ, "CAMERA_PASSWORD": "secret"})
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("check-config", str(cfg), env={k: v for k, v in os.environ.items() if k != "CAMERA_PASSWORD"})
        self.assertEqual(r.returncode, 2, "the password comes from the Secret: without it the config is refused")
        self.assertIn("CAMERA_PASSWORD", r.stderr)
        self.assertIn('"--http-bind", "0.0.0.0"', manifest)
        for path in ("/livez", "/readyz", "/metrics"):
            self.assertIn(path, manifest)
        self.assertIn('"--http-bind", "0.0.0.0"', (Path(__file__).resolve().parents[2] / "docker" / "Dockerfile").read_text())

    def test_kubernetes_manifest_is_consistent(self):
        # What kubectl would only find on a cluster: names one object gives and another refers to.
        import yaml   # python3-yaml (tools/bootstrap --test)
        docs = {d["kind"]: d for d in yaml.safe_load_all(
            (Path(__file__).resolve().parents[2] / "docker" / "kubernetes.yaml").read_text())}
        self.assertEqual(sorted(docs), ["ConfigMap", "Deployment", "Service"])
        cm, deploy, svc = docs["ConfigMap"], docs["Deployment"], docs["Service"]
        pod = deploy["spec"]["template"]
        self.assertEqual(deploy["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
        self.assertEqual(svc["spec"]["selector"], pod["metadata"]["labels"])
        (c,) = pod["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"http": 9400}, "the daemon's default http.port")
        for probe in ("livenessProbe", "readinessProbe"):
            self.assertIn(c[probe]["httpGet"]["port"], ports)
        self.assertEqual(svc["spec"]["ports"][0]["targetPort"], "http")
        self.assertEqual(int(pod["metadata"]["annotations"]["prometheus.io/port"]), ports["http"])
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        self.assertEqual({m["name"] for m in c["volumeMounts"]}, set(volumes))
        self.assertEqual(volumes["config"]["configMap"]["name"], cm["metadata"]["name"])
        config_mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
        config_arg = c["args"][c["args"].index("--config") + 1]
        self.assertEqual(Path(config_arg).parent, Path(config_mount["mountPath"]))
        self.assertIn(Path(config_arg).name, cm["data"])
        tensors = next(m for m in c["volumeMounts"] if m["name"] == "tensors")["mountPath"]
        config = yaml.safe_load(cm["data"][Path(config_arg).name])
        for p in config["pipelines"]:
            if p["sink"]["type"] == "npy":
                self.assertTrue(p["sink"]["directory"].startswith(tensors + "/"), "sinks write into the volume")
        # The image (docker/Dockerfile) exposes that port and runs the same command by default.
        dockerfile = (Path(__file__).resolve().parents[2] / "docker" / "Dockerfile").read_text()
        self.assertIn(f"EXPOSE {ports['http']}\n", dockerfile)
        self.assertIn("CMD " + json.dumps(c["args"]) + "\n", dockerfile)
        secret_env = {e["name"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
        self.assertTrue(secret_env)
        for name in secret_env:
            self.assertIn("${" + name + "}", cm["data"][Path(config_arg).name])

    @unittest.skipUnless(shutil.which("systemd-analyze"), "systemd-analyze is not installed")
    def test_systemd_unit_verifies(self):
        # docker/framefused.service as systemd reads it: no unknown key, no unparsable value, an
        # executable ExecStart (this build's framefused stands in for /opt/framefuse/bin/framefused).
        unit = (Path(__file__).resolve().parents[2] / "docker" / "framefused.service").read_text()
        self.assertIn("ExecStart=/opt/framefuse/bin/framefused run --config ", unit)
        self.assertIn("Type=notify", unit)
        binary = str(Path(FRAMEFUSED).resolve())

        def verify(name, text):
            path = self.dir / name
            path.write_text(text.replace("/opt/framefuse/bin/framefused", binary))
            r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
            return r.returncode, (r.stdout + r.stderr).strip()

        rc, said = verify("framefused.service", unit)
        self.assertEqual((rc, said), (0, ""))
        # The check sees mistakes: a misspelt key and a bad value in a copy are both reported.
        rc, said = verify("broken.service", unit.replace("RestartSec=2s", "RestartSecs=2s")
                          .replace("Restart=on-failure", "Restart=sometimes"))
        self.assertIn("RestartSecs", said)
        self.assertIn("sometimes", said)

    def assert_one_line_error(self, r, pattern, status=2):
        self.assertEqual(r.returncode, status, r.stdout + r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertTrue(any(re.search(pattern, l) for l in lines), r.stderr)

    def test_missing_config_file(self):
        r = run("run", "--config", str(self.dir / "nope.yaml"))
        self.assert_one_line_error(r, r"nope\.yaml.*not found")

    def test_yaml_syntax_error_names_line(self):
        cfg = self.write_config("syntax.yaml", "pipelines:\n  - name: [unclosed\n")
        r = run("check-config", str(cfg))
        self.assert_one_line_error(r, r"syntax\.yaml:\d+:\d+")

    def test_unknown_key_is_rejected_with_suggestion(self):
        cfg = self.pipeline_config("unknown.yaml", self.dir / "o", extra_source=", loopp: true")
        r = run("check-config", str(cfg))
        self.assert_one_line_error(r, r"unknown\.yaml:\d+:\d+: .*loopp.*did you mean 'loop'")

    def test_missing_source_file(self):
        cfg = self.write_config("missing_src.yaml", """
        pipelines:
          - name: cam
            source: {uri: does_not_exist.mp4}
            outputs: [{name: a, resize: {width: 8, height: 8}}]
            sink: {type: null}
        """)
        r = run("check-config", str(cfg))
        self.assert_one_line_error(r, r"missing_src\.yaml:\d+:\d+: pipelines\[0\]\.source\.uri: .*does_not_exist\.mp4")

    def test_not_video_fails_that_pipeline_only(self):
        junk = self.dir / "junk.mp4"
        junk.write_bytes(b"this is not a video file\n" * 100)
        out = self.dir / "out_good"
        cfg = self.write_config("junk.yaml", f"""
        http: {{enabled: false}}
        pipelines:
          - name: bad
            source: {{uri: junk.mp4}}
            outputs: [{{name: a, resize: {{width: 8, height: 8}}}}]
            sink: {{type: null}}
          - name: good
            source: {{uri: clip.mp4}}
            outputs: [{{name: a, resize: {{width: 8, height: 8}}}}]
            sink: {{type: npy, directory: {out}}}
        """)
        r = run("run", "--config", str(cfg), "--device", "cpu")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"pipeline 'bad'.*junk\.mp4")
        self.assertEqual(len(list((out / "a").glob("*.npy"))), 20, "the good pipeline must finish")

    def test_cuda_requested_without_device(self):
        if Path("/dev/nvidia0").exists():
            self.skipTest("a GPU is present")
        cfg = self.pipeline_config("cuda.yaml", self.dir / "o_cuda")
        r = run("run", "--config", str(cfg), "--device", "cuda:0")
        self.assertEqual(r.returncode, 2, "a configuration this host cannot run: " + r.stderr)
        self.assertRegex(r.stderr, r"cuda\.yaml: --device: device cuda:0 requested but 0 CUDA device")
        # A pipeline's own device names its key, among many pipelines.
        cfg = self.pipelines_config("cuda_own.yaml", [
            ("a", "clip.mp4", self.dir / "o_cuda_a", ""),
            ("b", "clip.mp4", self.dir / "o_cuda_b", "    device: cuda:0\n"),
        ])
        r = run("run", "--config", str(cfg))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"cuda_own\.yaml: pipelines\[1\]\.device \(pipeline 'b'\): device cuda:0 "
                                   r"requested but 0 CUDA device")

    def run_until_sigterm(self, name, extra_source, top=""):
        """A CPU pipeline of clip.mp4 (`extra_source` in its source, `top` before the config) runs for
        1.5 s, then gets SIGTERM: (exit status, stderr, sink directory, the cls tensors written)."""
        out = self.dir / f"out_{name}"
        cfg = self.pipeline_config(f"{name}.yaml", out, extra_source=extra_source)
        cfg.write_text(top + cfg.read_text())
        p = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg), "--device", "cpu"],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=10)
        return p.returncode, err, out, sorted((out / "cls").glob("*.npy"))

    def test_sigterm_drains_and_exits(self):
        status, err, _, files = self.run_until_sigterm("sigterm", ", loop: true, realtime: true")
        self.assertEqual(status, 0, err)
        self.assertIn("SIGTERM", err)
        self.assertGreater(len(files), 10)
        for f in files:   # every file complete and loadable
            self.assertEqual(np.load(f).shape, (3, 56, 56))

    def test_sigterm_with_no_drain_time_drops_the_queue_and_exits_cleanly(self):
        status, err, out, files = self.run_until_sigterm("nodrain", ", loop: true", top="drain_timeout: 0s\n")
        self.assertEqual(status, 0, err)
        self.assertNotIn("exiting without waiting", err)
        self.assertGreater(len(files), 10)
        for f in files:   # the frames in flight finished, the sink flushed: every file loadable
            self.assertEqual(np.load(f).shape, (3, 56, 56))
        self.assertEqual(list(out.rglob("*.partial")), [])

    def test_sighup_reload_keeps_unchanged_and_refuses_invalid(self):
        body = """
        http: {{enabled: false}}
        pipelines:
          - name: a
            source: {{uri: clip.mp4, loop: true, realtime: true}}
            outputs: [{{name: o, resize: {{width: 8, height: 8}}}}]
            sink: {{type: null}}
        {extra}"""
        second = """  - name: b
            source: {uri: clip.mp4, loop: true, realtime: true}
            outputs: [{name: o, resize: {width: 8, height: 8}}]
            sink: {type: null}"""
        cfg = self.write_config("reload.yaml", body.format(extra=""))
        p = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg), "--device", "cpu"],
                             stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1.0)
            cfg.write_text(textwrap.dedent(body.format(extra=second)))
            p.send_signal(signal.SIGHUP)
            time.sleep(1.0)
            cfg.write_text("pipelines: [ {name: broken\n")
            p.send_signal(signal.SIGHUP)
            time.sleep(1.0)
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("reload applied: 1 unchanged, 0 restarted, 1 started", err)
        self.assertRegex(err, r"reload refused, keeping the running config: .*reload\.yaml:\d+:\d+")
        self.assertRegex(err, r"summary 'a': \d+ frames decoded")
        self.assertRegex(err, r"summary 'b': \d+ frames decoded")

    def test_sd_notify_sequence(self):
        import socket
        sock_path = str(self.dir / "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(sock_path)
        sock.settimeout(0.2)
        cfg = self.pipeline_config("notify.yaml", self.dir / "out_notify", extra_source=", loop: true, realtime: true")
        env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="400000")
        p = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg), "--device", "cpu"],
                             stderr=subprocess.PIPE, text=True, env=env)
        messages = []

        def drain(seconds):
            end = time.time() + seconds
            while time.time() < end:
                try:
                    messages.extend(sock.recv(4096).decode().splitlines())
                except socket.timeout:
                    pass

        try:
            drain(1.5)
            p.send_signal(signal.SIGHUP)
            drain(1.0)
            p.send_signal(signal.SIGTERM)
            drain(1.0)
            p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
            sock.close()
        states = [m for m in messages if m in ("READY=1", "RELOADING=1", "STOPPING=1")]
        self.assertEqual(states, ["READY=1", "RELOADING=1", "READY=1", "STOPPING=1"], messages)
        self.assertGreaterEqual(messages.count("WATCHDOG=1"), 3, messages)


if __name__ == "__main__":
    ctest_main.main()
