#pragma once
//! A decoded frame as sources hand it to the pipeline: a view of its planes, where they live, and
//! the reference that keeps them alive (an AVFrame: FFmpeg's buffers, a frame pool slot or an
//! NVDEC surface).
#include <chrono>
#include <cstdint>
#include <memory>

#include "pipeline/fused/plan.hpp"
#include "pipeline/memory/frame_memory.hpp"

namespace framefuse {

struct DecodedFrame {
  FrameInfo info;
  ops::ImageView view{};        //!< valid while `owner` lives
  FrameMemory memory = FrameMemory::Host;   //!< where view's planes are (Device: the pipeline's GPU)
  int64_t index = 0;            //!< 0-based, in decode order, counting across loops/reconnects
  double pts_seconds = 0;       //!< presentation time in stream time base
  std::chrono::steady_clock::time_point decoded_at{};
  std::shared_ptr<const void> owner;
};

}  // namespace framefuse
