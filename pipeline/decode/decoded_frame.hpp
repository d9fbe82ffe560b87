#pragma once
//! A decoded frame as sources hand it to the pipeline: a view of host memory plus the reference
//! that keeps that memory alive (an AVFrame, later a pinned pool slot).
#include <chrono>
#include <cstdint>
#include <memory>

#include "pipeline/fused/plan.hpp"

namespace framefuse {

struct DecodedFrame {
  FrameInfo info;
  ops::ImageView view{};        //!< host memory, valid while `owner` lives
  int64_t index = 0;            //!< 0-based, in decode order, counting across loops/reconnects
  double pts_seconds = 0;       //!< presentation time in stream time base
  std::chrono::steady_clock::time_point decoded_at{};
  std::shared_ptr<const void> owner;
};

}  // namespace framefuse
