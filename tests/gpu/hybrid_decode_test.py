"""Hybrid decode end to end on a GPU host: framefused spreads `decoder: auto` streams over NVDEC and
the cores as the `decode:` capacities say, logs each choice, and every stream decodes to the end.
Exit 77 (skipped) without a CUDA device (nvidia-smi) or the sample clip."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("FRAMEFUSE_SOURCE_DIR", "."))
FRAMEFUSED = os.environ.get("FRAMEFUSED", "build/daemon/framefused")
CLIP = (SOURCE_DIR / "samples" / "sample_720p.mp4").resolve()


def skip_reason():
    smi = shutil.which("nvidia-smi")
    if not smi or subprocess.run([smi, "-L"], capture_output=True).returncode != 0:
        return "no CUDA device (nvidia-smi)"
    if not CLIP.exists():
        return f"{CLIP} not made (tools/make_sample_clip)"
    return None


class HybridDecodeTest(unittest.TestCase):
    def test_auto_streams_spread_over_nvdec_and_the_cores(self):
        """NVDEC and the cores given equal capacities: four unpaced files alternate, NVDEC first; a
        `decoder: cpu` stream counts on the cores, so the next auto stream takes NVDEC."""
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "hybrid.yaml"
            pipelines = "".join(
                f"  - {{name: s{i}, source: {{uri: {CLIP}, loop: true, max_frames: 240}}, decoder: {d},\n"
                f"     outputs: [{{name: o, resize: {{width: 224, height: 224}}}}], sink: {{type: null}}}}\n"
                for i, d in enumerate(["auto", "auto", "auto", "auto", "cpu", "auto"]))
            cfg.write_text("http: {enabled: false}\ndevice: cuda\ndecode: {nvdec_fps: 100, cpu_fps: 100}\n"
                           f"pipelines:\n{pipelines}")
            proc = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg), "--log-level", "info"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                _, log = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
        self.assertEqual(proc.returncode, 0, log)
        chosen = dict(re.findall(r"pipeline '(s\d)': hybrid decode: (nvdec|software)", log))
        # The streams open concurrently, so the order they ask in is not s0..s5: count instead.
        auto = [chosen.get(f"s{i}") for i in (0, 1, 2, 3, 5)]
        self.assertNotIn(None, auto, log)
        self.assertNotIn("s4", chosen, "a `decoder: cpu` stream is not chosen for")
        self.assertEqual(sorted(auto), ["nvdec", "nvdec", "nvdec", "software", "software"], log)
        for i in range(6):
            self.assertRegex(log, rf"summary 's{i}': 240 frames decoded, 240 processed, 0 dropped")
        print("hybrid decode:", ", ".join(f"s{i} {chosen.get(f's{i}', 'cpu (fixed)')}" for i in range(6)))


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"hybrid_decode_test: SKIPPED, {reason}")
        sys.exit(77)
    unittest.main()
