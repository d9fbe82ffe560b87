#pragma once
//! Where a decoded frame's planes live, so that executors know how to read them.
#include <cstdint>

namespace framefuse {

//! Host: ordinary host memory (a CUDA executor stages it into its own pinned buffer first).
//! Pinned: page-locked host memory (uploaded by DMA straight from the frame).
//! Device: CUDA memory of the pipeline's device, e.g. an NVDEC frame (read in place), whose writes
//! have finished when the frame is handed on.
enum class FrameMemory : uint8_t { Host, Pinned, Device };

//! Iterations (frames, or batches) an executor keeps submitted and not completed by default: the
//! frames (batches) it holds while they are processed (CudaEngineOptions::in_flight).
inline constexpr int kExecutorRing = 2;

//! The fewest slots of a device ring (sink cuda_ipc): the frames in flight are made in their own
//! slots, so a reader has slots - kExecutorRing frame intervals to read a published frame.
inline constexpr int kMinDeviceRingSlots = kExecutorRing + 1;

}  // namespace framefuse
