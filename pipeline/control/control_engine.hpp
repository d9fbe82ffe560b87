#pragma once
//! Host side of a pipeline's control: planning (spec -> POD ControlParams, validated) and the
//! engine that runs the iteration of control_step.hpp on the CPU backend.
#include <span>
#include <string>
#include <vector>

#include "pipeline/control/control_step.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/spec.hpp"

namespace framefuse::control {

//! The hidden output the fused pass computes for the statistics: the whole frame, area-averaged
//! to kThumbW x kThumbH, gray (cv::COLOR_RGB2GRAY weights), f32 luma on the 0..1 scale.
OutputSpec thumbnail_spec();

//! Plans `spec` for frames like `frame` whose visible outputs are `plans`: names resolved to output
//! indices, durations converted to frames at `frame_rate` (frames per second, > 0), fractions of
//! the frame to pixels, the thumbnail planned. Throws ConfigError naming `context` (e.g. "pipeline
//! 'lobby'") and the bad value: too many outputs to add the thumbnail, unknown output names, bounds
//! outside the frame or smaller than the window, parameters outside their ranges (spec.hpp).
ControlParams make_control_params(const ControlSpec& spec, const FrameInfo& frame, std::span<const OutputPlan> plans,
                                  double frame_rate, const std::string& context);

//! One pipeline's control on the host. setup() allocates; the per-frame calls never allocate.
//! Per frame, in this order: control_step(); the fused pass applies state() to each visible output
//! (control::apply) and writes the thumbnail into thumbnail(); stats_step().
class ControlEngine {
 public:
  //! Allocates the D slots and the two thumbnails; iteration 0, neutral state.
  void setup(const ControlParams& params);

  //! Runs the loops on the statistics of frame i - d (nothing while i < d).
  void control_step();
  //! The control the current frame's outputs get.
  const ControlState& state() const { return block_.state; }
  //! Where the current frame's thumbnail goes: kThumbW x kThumbH floats, row-major.
  float* thumbnail() { return current_.data(); }
  //! Statistics of the thumbnail (against the previous one) into slot i mod D; record() updated;
  //! the iteration advances.
  void stats_step();

  //! The iteration stats_step() completed last (undefined before the first).
  const ControlRecord& record() const { return record_; }
  const ControlParams& params() const { return params_; }
  const ControlBlock& block() const { return block_; }
  std::span<const Slot> slots() const { return slots_; }
  //! The previous frame's thumbnail (after stats_step(): the frame just completed).
  std::span<const float> previous_thumbnail() const { return previous_; }

 private:
  ControlParams params_{};
  ControlBlock block_{};
  std::vector<Slot> slots_;
  std::vector<float> current_, previous_;
  ControlRecord record_{};
};

}  // namespace framefuse::control
