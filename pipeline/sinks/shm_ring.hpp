#pragma once
//! The layout of a framefuse ring: a POSIX shared-memory object (/dev/shm/<name>) that one writer
//! (a pipeline) fills with each frame and any number of readers on the host map read-only. Little
//! endian; every offset from the object's start.
//!
//!   ShmHeader      at 0, kShmHeaderBytes: what the ring holds (outputs, dtypes, shapes, slots)
//!   slot i         at header_bytes + i * slot_bytes, i < slots: a ShmSlot, a ShmControl, then
//!                  (memory Host, sink `type: shm`) each output's tensor at its `offset` in the
//!                  slot (64-byte aligned), C order.
//!
//! With memory Cuda (sink `type: cuda_ipc`) the tensors are in GPU memory instead: one device
//! allocation exported as `ipc_handle` (cudaIpcOpenMemHandle opens it in another process, on the
//! device `pci_bus_id`), slot i at i * device_slot_bytes, each output at its `offset` from the
//! slot's start (256-byte aligned). The fused kernel writes a frame's outputs straight into its
//! device slot (seq reads "being written" from the frame's submit), and they are complete before
//! the slot's seq says so, so a reader can use the slot's tensors in place (zero-copy) and check
//! seq afterwards. The device memory is the writer's: it is gone when the writer exits.
//!
//! Frame c (c = 0, 1, ... in the order written) goes to slot c % slots. Writing it: slot.seq =
//! 2c + 1, the tensors, the control block, slot.frame_index, then slot.seq = 2c + 2 and
//! header.published = c + 1 (release stores). A reader takes c = published - 1 (or an earlier c
//! still in the ring), checks slot.seq == 2c + 2 before and after copying the frame out, and
//! retries when either differs: the writer never waits, so a reader more than `slots` frames
//! behind loses the oldest frames (it sees the gap in c). `closed` becomes 1 when the pipeline stops; a new writer of the same name
//! makes a new object, so a reader still mapping the old one sees `closed`, or the writer's pid
//! gone. tools/framefuse_shm.py reads rings from Python (numpy; CuPy for device rings).
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace framefuse::shm {

inline constexpr char kMagic[8] = {'F', 'F', 'S', 'H', 'M', 'R', 'N', 'G'};
inline constexpr uint32_t kVersion = 2;   //!< 2: `memory` and the device ring's fields
inline constexpr uint32_t kShmHeaderBytes = 4096;
inline constexpr uint32_t kMaxOutputs = 8;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr size_t kAlign = 64;   //!< tensor offsets and the slot header
inline constexpr size_t kDeviceAlign = 256;   //!< tensor offsets and slots in a device ring

//! Where a ring's tensors are.
enum class RingMemory : uint32_t {
  Host = 0,   //!< in the slots of the shared-memory object
  Cuda = 1,   //!< in the device ring `ipc_handle` exports
};

//! One output's tensors: `bytes` at `offset` in every slot.
struct ShmOutput {
  char name[32];       //!< NUL-terminated
  char dtype[8];       //!< numpy's: "float32", "float16", "uint8"; NUL-terminated
  uint32_t ndim;       //!< entries of shape used
  uint32_t reserved;
  int64_t shape[kMaxDims];
  uint64_t offset;     //!< from the slot's start
  uint64_t bytes;
};
static_assert(sizeof(ShmOutput) == 96);

struct ShmHeader {
  char magic[8];                     //!< kMagic
  uint32_t version;                  //!< kVersion
  uint32_t header_bytes;             //!< kShmHeaderBytes: slot 0 starts here
  uint32_t slots;
  uint32_t outputs;                  //!< entries of `output` used
  uint64_t slot_bytes;               //!< distance between slots, a multiple of 4096
  int64_t writer_pid;
  std::atomic<uint64_t> published;   //!< frames written so far
  std::atomic<uint32_t> closed;      //!< 1 once the writer stopped
  uint32_t reserved;
  char pipeline[64];                 //!< the writing pipeline's name, NUL-terminated
  ShmOutput output[kMaxOutputs];
  uint32_t memory;                   //!< RingMemory
  uint32_t reserved2;
  uint64_t device_slot_bytes;        //!< Cuda: distance between slots in the device ring
  char pci_bus_id[32];               //!< Cuda: the ring's GPU, e.g. "0000:3B:00.0"; NUL-terminated
  uint8_t ipc_handle[64];            //!< Cuda: the device ring's cudaIpcMemHandle_t
};
static_assert(sizeof(ShmHeader) <= kShmHeaderBytes);
static_assert(offsetof(ShmHeader, published) == 40 && offsetof(ShmHeader, closed) == 48 &&
              offsetof(ShmHeader, pipeline) == 56 && offsetof(ShmHeader, output) == 120 &&
              offsetof(ShmHeader, memory) == 888 && offsetof(ShmHeader, device_slot_bytes) == 896 &&
              offsetof(ShmHeader, pci_bus_id) == 904 && offsetof(ShmHeader, ipc_handle) == 936);

//! The start of every slot.
struct alignas(kAlign) ShmSlot {
  std::atomic<uint64_t> seq;           //!< 2c + 1 while frame c is written, 2c + 2 once it is complete
  std::atomic<int64_t> frame_index;    //!< the pipeline's index of the frame (decode order)
};
static_assert(sizeof(ShmSlot) == kAlign);

//! The frame's control record (pipelines with `control:`; control/control_step.hpp's
//! ControlRecord), right after the ShmSlot: the statistics the loops used and what they set, so a
//! reader maps outputs back to the frame (each output's crop window, which roi_follow moves).
struct alignas(kAlign) ShmControl {
  uint32_t valid;                  //!< 1 when the frame came with a record; the rest is 0 otherwise
  uint32_t health_flags;           //!< bit c: condition c raised (frozen, black, overexposed, scene_change)
  uint64_t measured_frame;         //!< the frame (iteration since set-up) the statistics came from
  float mean_luma, variance, motion, black_fraction, white_fraction, scene_distance;   //!< whole frame, 0..1
  uint32_t outputs;                //!< entries of `output` used
  uint32_t reserved;
  struct Output {
    float gain;                    //!< auto_gain's factor
    float mean_luma;               //!< gain x the window's mean luma
    float motion;
    int32_t x, y, w, h;            //!< the crop window read, frame pixels
  } output[kMaxOutputs];
};
static_assert(sizeof(ShmControl::Output) == 28 && offsetof(ShmControl, output) == 48 && sizeof(ShmControl) == 320);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the ring's atomics are shared between processes");

}  // namespace framefuse::shm
