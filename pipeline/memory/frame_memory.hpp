#pragma once
//! Where a decoded frame's planes live, so that executors know how to read them.
#include <cstdint>

namespace framefuse {

//! Host: ordinary host memory (a CUDA executor stages it into its own pinned buffer first).
//! Pinned: page-locked host memory (uploaded by DMA straight from the frame).
//! Device: CUDA memory of the pipeline's device, e.g. an NVDEC surface (read in place).
enum class FrameMemory : uint8_t { Host, Pinned, Device };

}  // namespace framefuse
