"""Reads a framefuse ring (a pipeline with `sink: {type: shm}` or `{type: cuda_ipc}`) from Python.

    from framefuse_shm import ShmRing
    ring = ShmRing("lobby")                 # maps /dev/shm/lobby read-only
    for frame in ring.frames():             # new frames as they come; ends when the pipeline stops
        x = frame.outputs["classifier"]     # numpy array with the output's shape and dtype (a copy)

Opening a name whose writer is still making the ring raises NotReady (a ValueError): open it again.

A cuda_ipc ring keeps the tensors in GPU memory: its outputs are CuPy arrays on the ring's GPU
(opened with CUDA IPC; `torch.from_dlpack(x)` makes a PyTorch tensor of one without a copy).
`frames(copy=False)` hands out views of the ring's slots instead of copies (no copy at all, also for
shm rings): a view holds its frame until the writer comes round to the slot again, `slots` frames
later, so check `frame.intact()` after using the views and discard results when it is False.

Layout and protocol: pipeline/sinks/shm_ring.hpp. Frame c of the ring sits in slot c % slots and is
complete while the slot's sequence word is 2c + 2; a read checks that before and after copying the
tensors out, so a frame the writer overwrote meanwhile is never returned torn. A pipeline that
starts again (a reload, a new stream resolution) makes a new ring under the same name: frames() ends
at the old one's close, and opening the name again follows the new one. A cuda_ipc ring's GPU
memory goes with its writer: close() the ring once frames() has ended.
"""
import mmap
import os
import struct
import time
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"FFSHMRNG"
VERSION = 2
HOST, CUDA = 0, 1                           # the header's `memory`: where the tensors are
_HEADER = struct.Struct("<8sIIIIQq")        # magic, version, header_bytes, slots, outputs, slot_bytes, writer_pid
_PUBLISHED, _CLOSED, _PIPELINE, _OUTPUTS = 40, 48, 56, 120
_OUTPUT = struct.Struct("<32s8sII4qQQ")     # name, dtype, ndim, reserved, shape[4], offset, bytes
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_CONTROL = struct.Struct("<IIQ6fII")        # valid, health_flags, measured_frame, 6 frame statistics, outputs
_CONTROL_OUTPUT = struct.Struct("<3f4i")    # gain, mean_luma, motion, x, y, w, h
_CONTROL_AT, _CONTROL_OUTPUTS_AT = 64, 64 + 48
_DEVICE_AT = 888
_DEVICE = struct.Struct("<IIQ32s64s")       # memory, reserved, device_slot_bytes, pci_bus_id, ipc_handle
HEALTH = ("frozen", "black", "overexposed", "scene_change")


@dataclass
class Output:
    name: str
    dtype: np.dtype
    shape: tuple
    offset: int
    nbytes: int


@dataclass
class Frame:
    counter: int          # the ring's count of this frame: 0, 1, ... in the order written
    frame_index: int      # the pipeline's index of the frame (decode order)
    outputs: dict = field(default_factory=dict)
    control: dict = None  # pipelines with `control:`: statistics, health and per-output gain / crop window
    ring: "ShmRing" = None

    def intact(self):
        """True while the slot still holds this frame: views (copy=False) read so far were this frame's."""
        return self.ring._seq(self.counter) == 2 * self.counter + 2


class _DeviceRing:
    """A cuda_ipc ring's GPU memory, opened in this process with CUDA IPC (CuPy)."""

    def __init__(self, handle, pci_bus_id, nbytes):
        try:
            import cupy   # only device rings need it
        except ImportError as e:
            raise ImportError("a cuda_ipc ring's tensors are in GPU memory: reading them needs CuPy") from e
        self._cupy = cupy
        runtime = cupy.cuda.runtime
        ids = [i for i in range(runtime.getDeviceCount()) if runtime.deviceGetPCIBusId(i).lower() == pci_bus_id.lower()]
        if not ids:
            raise ValueError(f"the ring's GPU {pci_bus_id} is not visible to this process (CUDA_VISIBLE_DEVICES?)")
        self.device_id = ids[0]
        with cupy.cuda.Device(self.device_id):
            self._ptr = runtime.ipcOpenMemHandle(handle)
        self._memory = cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(self._ptr, nbytes, self, self.device_id), 0)

    def view(self, offset, dtype, shape):
        return self._cupy.ndarray(shape, dtype, self._memory + offset)

    def copies(self, views):
        """`views` (name -> view) copied, the copies complete (one wait for all) before the slot is
        checked again."""
        with self._cupy.cuda.Device(self.device_id):
            out = {k: v.copy() for k, v in views.items()}
            self._cupy.cuda.get_current_stream().synchronize()
        return out

    def close(self):
        if self._ptr:
            with self._cupy.cuda.Device(self.device_id):
                self._cupy.cuda.runtime.ipcCloseMemHandle(self._ptr)
            self._ptr = 0


class NotReady(ValueError):
    """The name exists, but its writer has not finished making the ring yet: open it again shortly."""


class ShmRing:
    """A read-only mapping of /dev/shm/<name>. Raises FileNotFoundError when there is no such ring yet,
    NotReady while its writer is still making it, ValueError for an object that is not a ring this
    reader knows."""

    def __init__(self, name, directory="/dev/shm"):
        self.path = os.path.join(directory, name)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            self.inode = st.st_ino
            if st.st_size < _DEVICE_AT + _DEVICE.size:   # created, not yet sized
                raise NotReady(f"{self.path}: the ring is being made")
            self._map = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        magic, version, self.header_bytes, self.slots, count, self.slot_bytes, self.writer_pid = \
            _HEADER.unpack_from(self._map, 0)
        if magic == bytes(len(MAGIC)):   # the magic is written last
            self._map.close()
            raise NotReady(f"{self.path}: the ring is being made")
        if magic != MAGIC:
            self._map.close()
            raise ValueError(f"{self.path}: not a framefuse ring (magic {magic!r})")
        if version != VERSION:
            raise ValueError(f"{self.path}: ring version {version}, this reader knows {VERSION}")
        self.pipeline = self._map[_PIPELINE:_PIPELINE + 64].split(b"\0", 1)[0].decode()
        self.memory, _, self.device_slot_bytes, bus, handle = _DEVICE.unpack_from(self._map, _DEVICE_AT)
        self.pci_bus_id = bus.split(b"\0", 1)[0].decode()
        self.outputs = []
        for k in range(count):
            name, dtype, ndim, _, *rest = _OUTPUT.unpack_from(self._map, _OUTPUTS + k * _OUTPUT.size)
            shape, offset, nbytes = tuple(rest[:ndim]), rest[4], rest[5]
            self.outputs.append(Output(name.split(b"\0", 1)[0].decode(), np.dtype(dtype.split(b"\0", 1)[0].decode()),
                                       shape, offset, nbytes))
        self._device = None
        if self.memory == CUDA:
            self._device = _DeviceRing(handle, self.pci_bus_id, self.slots * self.device_slot_bytes)
        elif self.memory != HOST:
            raise ValueError(f"{self.path}: tensors in memory kind {self.memory}, this reader knows host and cuda")

    def close(self):
        """Unmaps the ring; a cuda_ipc ring's views and arrays of views are invalid from here on."""
        if self._device:
            self._device.close()
        self._map.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def published(self):
        """Frames the writer has completed so far."""
        return _U64.unpack_from(self._map, _PUBLISHED)[0]

    def closed(self):
        """True once the writing pipeline stopped: no frame follows."""
        return struct.unpack_from("<I", self._map, _CLOSED)[0] == 1

    def writer_alive(self):
        """False once the writing process is gone (a framefused that was killed never closes its ring)."""
        try:
            os.kill(self.writer_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:   # alive, another user's
            pass
        return True

    def replaced(self):
        """True when /dev/shm/<name> is now another ring (the pipeline restarted) or gone."""
        try:
            return os.stat(self.path).st_ino != self.inode
        except FileNotFoundError:
            return True

    def _seq(self, counter):
        return _U64.unpack_from(self._map, self.header_bytes + (counter % self.slots) * self.slot_bytes)[0]

    def _view(self, base, slot, o):
        if self._device:
            return self._device.view(slot * self.device_slot_bytes + o.offset, o.dtype, o.shape)
        return np.frombuffer(self._map, o.dtype, o.nbytes // o.dtype.itemsize, base + o.offset).reshape(o.shape)

    def read(self, counter, copy=True):
        """Frame `counter`, or None when its slot holds another frame by now. copy: its tensors copied
        out (numpy arrays; CuPy arrays on the ring's GPU for a cuda_ipc ring), else views of the slot
        (see Frame.intact)."""
        slot = counter % self.slots
        base = self.header_bytes + slot * self.slot_bytes
        want = 2 * counter + 2
        if self._seq(counter) != want:
            return None
        frame_index = _I64.unpack_from(self._map, base + 8)[0]
        outputs = {o.name: self._view(base, slot, o) for o in self.outputs}
        if copy:
            outputs = self._device.copies(outputs) if self._device else {k: v.copy() for k, v in outputs.items()}
        control = self._control(base)
        if self._seq(counter) != want:
            return None
        return Frame(counter, frame_index, outputs, control, self)

    def _control(self, base):
        valid, flags, measured, luma, variance, motion, black, white, scene, count, _ = \
            _CONTROL.unpack_from(self._map, base + _CONTROL_AT)
        if not valid:
            return None
        outputs = {}
        for k in range(min(count, len(self.outputs))):
            gain, out_luma, out_motion, x, y, w, h = \
                _CONTROL_OUTPUT.unpack_from(self._map, base + _CONTROL_OUTPUTS_AT + k * _CONTROL_OUTPUT.size)
            outputs[self.outputs[k].name] = {"gain": gain, "mean_luma": out_luma, "motion": out_motion,
                                             "roi": (x, y, w, h)}
        return {"measured_frame": measured, "mean_luma": luma, "variance": variance, "motion": motion,
                "black": black, "white": white, "scene_distance": scene,
                "health": [name for bit, name in enumerate(HEALTH) if flags & (1 << bit)], "outputs": outputs}

    def frames(self, start=None, poll_s=0.001, timeout_s=None, copy=True):
        """Yields frames in the order written, from `start` (default: the next one published), as
        read(copy=copy). A frame overwritten before it was read is skipped (`counter` shows the gap).
        Ends when the pipeline stops and the last frame was yielded, when the writer is gone or the
        name names a new ring, or after `timeout_s` without a new frame."""
        counter = self.published() if start is None else start
        idle_since = time.monotonic()
        while True:
            published = self.published()
            if counter >= published:
                if self.closed() or self.replaced() or not self.writer_alive():
                    return
                if timeout_s is not None and time.monotonic() - idle_since > timeout_s:
                    return
                time.sleep(poll_s)
                continue
            counter = max(counter, published - self.slots)   # older ones are overwritten
            frame = self.read(counter, copy)
            counter += 1
            if frame is not None:
                idle_since = time.monotonic()
                yield frame
