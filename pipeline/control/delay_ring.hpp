#pragma once
//! The delay buffer between statistics and control: a ring of D slots. Iteration i writes slot
//! i mod D after the fused pass of frame i; the control step of iteration i (before that pass)
//! reads slot (i - d) mod D when i >= d. The iteration counter lives in the ring header, next to
//! the slots, and only the statistics step advances it, so a replayed CUDA graph needs no
//! per-frame parameter edits. D = d + 1: the slot being read is never the one being written.
#include <cstdint>

#include "pipeline/control/control_state.hpp"
#include "pipeline/control/stats.hpp"
#include "pipeline/ops/op_traits.hpp"

namespace framefuse::control {

inline constexpr int32_t kMaxDelay = 64;   //!< largest delay_frames

struct RingHeader {
  uint64_t iteration;   //!< frames completed since setup (the current iteration's index)
  int32_t delay;        //!< d >= 1
  int32_t depth;        //!< D = d + 1 slots
};

//! One slot: the statistics of frame `iteration` and the control state its fused pass used.
struct Slot {
  uint64_t iteration;
  ControlState applied;
  FrameStats stats;
};

FF_HD int32_t write_slot(uint64_t i, int32_t depth) { return static_cast<int32_t>(i % uint64_t(depth)); }

//! Whether iteration i has a delayed input: frame i - d exists.
FF_HD bool has_input(uint64_t i, int32_t delay) { return i >= uint64_t(delay); }

//! Slot holding frame i - d; only valid when has_input(i, d).
FF_HD int32_t read_slot(uint64_t i, int32_t delay, int32_t depth) {
  return static_cast<int32_t>((i - uint64_t(delay)) % uint64_t(depth));
}

}  // namespace framefuse::control
