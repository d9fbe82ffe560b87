"""The cuda_ipc sink end to end on a GPU host: framefused writes a device ring, this process opens it
with CUDA IPC (CuPy) and reads each frame in place, and the tensors must equal byte for byte what an
npy pipeline of the same clip on the same device writes. Exit 77 (skipped) without a CUDA device,
without CuPy, or without the sample clip (tools/make_sample_clip)."""
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("FRAMEFUSE_SOURCE_DIR", "."))
FRAMEFUSED = os.environ.get("FRAMEFUSED", "build/daemon/framefused")
CLIP = (SOURCE_DIR / "samples" / "sample_720p.mp4").resolve()
sys.path.insert(0, str(SOURCE_DIR / "tools"))


def skip_reason():
    try:
        import numpy  # noqa: F401
    except ImportError:
        return f"numpy is not installed for {sys.executable}"
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except ImportError:
        return f"CuPy is not installed for {sys.executable}"
    except Exception as e:   # cupy without a driver raises its CUDARuntimeError
        return f"no CUDA device ({e})"
    if not CLIP.exists():
        return f"{CLIP} not made (tools/make_sample_clip)"
    return None


class CudaIpcSinkTest(unittest.TestCase):
    OUTPUTS = """\
    - {name: cls, resize: {shorter_side: 256}, center_crop: [224, 224], mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
    - {name: det, resize: {width: 320, height: 320}, aspect: letterbox, dtype: float16}
    - {name: thumb, resize: {width: 160, height: 90}, layout: hwc, dtype: uint8}
    """

    def test_device_ring_carries_what_the_npy_sink_writes(self):
        import cupy
        import numpy as np
        from framefuse_shm import ShmRing  # tools/ is not a package
        torch = self.torch_on_the_device()
        cupy.zeros(1).sum()   # CUDA set up before the paced pipeline starts, as a consumer would be
        ring_name = f"framefuse-gpu-{os.getpid()}"
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out"
            outputs = textwrap.indent(textwrap.dedent(self.OUTPUTS), " " * 6)
            cfg = Path(tmp) / "ipc.yaml"
            control = "    control: {delay_frames: 2, auto_gain: {outputs: [cls], target: 0.6}}\n"
            cfg.write_text("http: {enabled: false}\ndevice: cuda\npipelines:\n"
                           f"  - name: files\n    source: {{uri: {CLIP}}}\n    decoder: nvdec\n"
                           f"    outputs:\n{outputs}{control}    sink: {{type: npy, directory: {out}}}\n"
                           f"  - name: ring\n    source: {{uri: {CLIP}, realtime: true}}\n    decoder: nvdec\n"
                           f"    outputs:\n{outputs}{control}    sink: {{type: cuda_ipc, name: {ring_name}, slots: 32}}\n")
            proc = subprocess.Popen([FRAMEFUSED, "run", "--config", str(cfg)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 30
                ring = None
                while ring is None and time.monotonic() < deadline:
                    self.assertIsNone(proc.poll(), "framefused exited before making its ring")
                    try:
                        ring = ShmRing(ring_name)
                    except (FileNotFoundError, ValueError):   # not there, or not published yet
                        time.sleep(0.005)
                self.assertIsNotNone(ring, "no ring within 30 s")
                with ring:
                    self.assertEqual(ring.memory, 1, "a cuda_ipc ring keeps its tensors on the device")
                    self.assertEqual(ring.pci_bus_id.lower(), cupy.cuda.runtime.deviceGetPCIBusId(0).lower())
                    self.assertEqual([(o.name, o.dtype, o.shape) for o in ring.outputs],
                                     [("cls", np.float32, (3, 224, 224)), ("det", np.float16, (3, 320, 320)),
                                      ("thumb", np.uint8, (90, 160, 3))])
                    self.assertTrue(all(o.offset % 256 == 0 for o in ring.outputs))
                    frames, views_ok, copies_ok, torch_checked = [], 0, 0, torch is None
                    for f in ring.frames(start=0, timeout_s=30, copy=False):   # paced at 30 fps
                        # Views of the slot: used in place, then the slot checked, as a consumer does.
                        host = {k: cupy.asnumpy(v) for k, v in f.outputs.items()}
                        if not torch_checked:
                            self.check_torch_view(torch, f.outputs["cls"])
                            torch_checked = True
                        if f.intact():
                            views_ok += 1
                            frames.append((f.frame_index, host))
                        # The same frame read again as copies (read()'s default): device arrays of
                        # their own, equal to the views.
                        copied = ring.read(f.counter)
                        if copied is not None and f.intact():
                            copies_ok += 1
                            for name, a in copied.outputs.items():
                                self.assertIsInstance(a, cupy.ndarray, name)
                                self.assertNotEqual(a.data.ptr, f.outputs[name].data.ptr, name)
                                self.assertEqual(cupy.asnumpy(a).tobytes(), host[name].tobytes(),
                                                 f"{name} frame {f.frame_index}: copy against view")
                    self.assertTrue(ring.closed(), "the pipeline's stop closes the ring")
                _, stderr = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
            self.assertEqual(proc.returncode, 0, stderr)
            self.assertFalse(os.path.exists(f"/dev/shm/{ring_name}"), "the ring's name goes with the pipeline")
            self.assertEqual(views_ok, 90, "every frame of the 3 s clip read intact in place")
            self.assertEqual(copies_ok, 90, "every frame of the 3 s clip copied out intact too")
            self.assertEqual([i for i, _ in frames], list(range(90)))
            for index, host in frames:
                for name, a in host.items():
                    b = np.load(out / name / f"{index:08d}.npy")
                    self.assertEqual(a.dtype, b.dtype, name)
                    self.assertEqual(a.tobytes(), b.tobytes(), f"{name} frame {index}")
            print(f"cuda_ipc: {len(frames)} frames read in place and {copies_ok} as copies, equal to the npy "
                  f"pipeline's; "
                  f"PyTorch view {'checked' if torch is not None else 'not checked (no torch)'}")

    @staticmethod
    def torch_on_the_device():
        """torch with its CUDA set up, or None without torch."""
        try:
            import torch
        except ImportError:
            return None
        torch.zeros(1, device="cuda").sum().item()
        return torch

    def check_torch_view(self, torch, view):
        """torch.from_dlpack of a ring view shares its memory (no copy)."""
        t = torch.from_dlpack(view)
        self.assertEqual(t.data_ptr(), view.data.ptr, "a PyTorch tensor over the ring's slot, not a copy")
        self.assertEqual(tuple(t.shape), view.shape)
        self.assertTrue(t.is_cuda)


if __name__ == "__main__":
    reason = skip_reason()
    if reason:
        print(f"cuda_ipc_test: SKIPPED, {reason}")
        sys.exit(77)
    unittest.main()
