#pragma once
//! Host side of a pipeline's control: planning (spec -> POD ControlParams, validated) and the
//! engine that runs the iteration of control_step.hpp on the CPU backend.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pipeline/control/control_step.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/spec.hpp"

namespace framefuse::control {

//! Plans `spec` for frames like `frame` whose visible outputs are `plans`: names resolved to output
//! indices, durations converted to frames at `frame_rate` (frames per second, > 0), fractions of
//! the frame to pixels. Throws ConfigError naming `context` (e.g. "pipeline 'lobby'") and the bad
//! value: more outputs than regions, unknown output names, bounds
//! outside the frame or smaller than the window, parameters outside their ranges (spec.hpp).
ControlParams make_control_params(const ControlSpec& spec, const FrameInfo& frame, std::span<const OutputPlan> plans,
                                  double frame_rate, const std::string& context);

//! One pipeline's control on the host. setup() allocates; the per-frame calls never allocate.
//! Per frame, in this order: the fused pass applies state() to each output (control::apply);
//! measure() writes the frame's thumbnail into thumbnail(); stats_step().
class ControlEngine {
 public:
  //! Allocates the D slots and the two thumbnails; iteration 0, neutral state.
  void setup(const ControlParams& params);

  //! The control the current frame's outputs get.
  const ControlState& state() const { return block_.state; }
  //! The thumbnail of `frame` (thumbnail.hpp), colour `color`, into thumbnail().
  void measure(const ops::ImageView& frame, const ops::ColorParams& color);
  //! The current frame's thumbnail: kThumbW x kThumbH fixed-point luma values, row-major.
  uint16_t* thumbnail() { return current_.data(); }
  //! The current iteration's step 3 (control_step.hpp): statistics of thumbnail() against the
  //! previous one into slot i mod D, record() updated, the iteration advanced and the loops run
  //! for the next frame's state().
  void stats_step();

  //! The iteration stats_step() completed last (undefined before the first).
  const ControlRecord& record() const { return record_; }
  const ControlParams& params() const { return params_; }
  const ControlBlock& block() const { return block_; }
  std::span<const Slot> slots() const { return slots_; }
  //! The previous frame's thumbnail (after stats_step(): the frame just completed).
  std::span<const uint16_t> previous_thumbnail() const { return previous_; }

 private:
  ControlParams params_{};
  ControlBlock block_{};
  std::vector<Slot> slots_;
  std::vector<uint16_t> current_, previous_;
  ControlRecord record_{};
};

}  // namespace framefuse::control
