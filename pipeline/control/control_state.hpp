#pragma once
//! What the control loops hand to the fused chain: per output a gain and a crop-window offset.
//! The CPU executor applies it to its copy of an output's parameters before running the rows; the
//! GPU kernel applies it to the parameters it staged in shared memory. POD, no CUDA types.
#include <cstdint>

#include "pipeline/fused/fused_params.hpp"
#include "pipeline/ops/chain.hpp"

namespace framefuse::control {

struct OutputControl {
  float gain;       //!< multiplies the 0..255 pixel before normalize (1 = unchanged)
  int32_t dx, dy;   //!< crop window offset from the planned window, source pixels
};

struct ControlState {
  int32_t num_outputs;       //!< outputs k >= num_outputs are left alone
  int32_t frame_w, frame_h;  //!< the frame the windows must stay inside
  OutputControl out[kMaxOutputs];
};

//! The neutral state: gain 1, planned windows.
inline ControlState neutral_state(int32_t num_outputs, int32_t frame_w, int32_t frame_h) {
  ControlState s{};
  s.num_outputs = num_outputs;
  s.frame_w = frame_w;
  s.frame_h = frame_h;
  for (auto& o : s.out) o = {1.f, 0, 0};
  return s;
}

//! Left (or top) edge of a window planned at `base`, moved by `d`, kept inside the frame.
FF_HD int32_t moved_edge(int32_t base, int32_t d, int32_t size, int32_t frame) {
  return ops::clampi(base + d, 0, frame - size);
}

//! Applies one output's control `c` to its planned parameters `p` (not to already controlled
//! ones): the crop window moves by (dx, dy), clamped inside the frame_w x frame_h frame, and the
//! gain scales norm.mul.
FF_HD void apply(const OutputControl& c, int32_t frame_w, int32_t frame_h, ops::Chain::Params& p) {
  p.resize.x0 = moved_edge(p.resize.x0, c.dx, p.resize.src_w, frame_w);
  p.resize.y0 = moved_edge(p.resize.y0, c.dy, p.resize.src_h, frame_h);
  for (float& m : p.norm.mul) m *= c.gain;
}

//! apply() of output k's control in `s` (outputs k >= s.num_outputs are left alone).
FF_HD void apply(const ControlState& s, int k, ops::Chain::Params& p) {
  if (k < s.num_outputs) apply(s.out[k], s.frame_w, s.frame_h, p);
}

}  // namespace framefuse::control
