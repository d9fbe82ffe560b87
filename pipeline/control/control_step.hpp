#pragma once
//! One control iteration, written once for the CPU engine and the GPU's fused launch. Iteration i:
//!   1. the fused pass of frame i applies the state (control::apply) that iteration i - 1 left;
//!   2. the statistics: the thumbnail of frame i (thumbnail.hpp); for each region r <
//!      num_regions(), stats_region(); for each of its pixels sample_pixel() against the previous
//!      thumbnail, add_sample() into the region's sums and count the histogram bin (a CPU loop; on
//!      the GPU the statistics blocks of the fused launch, per-thread sums reduced by warp shuffles,
//!      shared and global atomics); the previous thumbnail becomes this one;
//!   3. finalize() of each region into slot i mod D, then end_iteration(): the slot gets the state
//!      frame i used, the record of iteration i is made (a mapped pinned ring on the GPU), the
//!      iteration counter advances and control_step() runs the loops for iteration i + 1 on slot
//!      (i + 1 - d) when i + 1 >= d (health also compares it with slot i - d).
//! So the control of frame n depends on the statistics of frame n - d and nothing newer (d >= 1).
//! On the GPU with d >= 2, step 3 of iteration i runs in the launch of frame i + 1 (its finisher
//! block, fused_control.hpp), beside that frame's pass: the same values, one launch later.
//! Everything here is POD and FF_HD; the host plans ControlParams (control_engine.hpp).
#include <cstdint>

#include "pipeline/control/control_state.hpp"
#include "pipeline/control/controllers.hpp"
#include "pipeline/control/delay_ring.hpp"
#include "pipeline/control/stats.hpp"

namespace framefuse::control {

enum Loop : uint32_t { kLoopAutoGain = 1u << 0, kLoopRoiFollow = 1u << 1, kLoopHealth = 1u << 2 };

struct ControlParams {
  int32_t num_outputs;        //!< outputs, <= kMaxOutputs
  int32_t frame_w, frame_h;
  int32_t delay, depth;       //!< d >= 1, D = d + 1
  uint32_t loops;             //!< Loop bits
  int32_t window[kMaxOutputs][4];   //!< planned crop window of each output: x0, y0, w, h
  AutoGain::Params auto_gain;
  RoiFollow::Params roi_follow;
  Health::Params health;
};

//! Loop memory carried from one iteration to the next.
struct LoopState {
  float integral[kMaxOutputs];   //!< auto_gain, per output
  RoiFollow::State roi;
  Health::State health;
};

//! Everything one pipeline's control keeps between frames, apart from the slots and thumbnails.
struct ControlBlock {
  RingHeader header;
  ControlState state;
  LoopState loops;
};

//! The block right after setup: iteration 0, neutral state, loops at rest.
inline ControlBlock initial_block(const ControlParams& p) {
  ControlBlock b{};
  b.header = {0, p.delay, p.depth};
  b.state = neutral_state(p.num_outputs, p.frame_w, p.frame_h);
  if (p.loops & kLoopRoiFollow) {
    b.loops.roi = RoiFollow::initial(p.roi_follow);
    RoiFollow::offset(p.roi_follow, b.loops.roi, b.state.out[p.roi_follow.output].dx,
                      b.state.out[p.roi_follow.output].dy);
  }
  return b;
}

//! The slot the loops of iteration i = h.iteration read: frame i - d's, or null while i < d.
FF_HD const Slot* observed_slot(const Slot* slots, const RingHeader& h) {
  return has_input(h.iteration, h.delay) ? &slots[read_slot(h.iteration, h.delay, h.depth)] : nullptr;
}

//! The slot of the frame observed before that one, i - d - 1, or null while i < d + 1. With D = d + 1
//! it is slot i mod D, which iteration i only rewrites at its end, after its loops ran.
FF_HD const Slot* before_slot(const Slot* slots, const RingHeader& h) {
  return has_input(h.iteration, h.delay + 1) ? &slots[write_slot(h.iteration, h.depth)] : nullptr;
}

//! Health's scene distance: hist_distance() of the whole-frame histograms of the two slots, 0
//! without both.
FF_HD float scene_distance(const Slot* observed, const Slot* before) {
  return observed && before ? hist_distance(observed->stats.region[0], before->stats.region[0]) : 0.f;
}

//! The parts of control_step() on the observed slot `s`, each updating its own words of `b`, so
//! they may run in any order or at once: auto_gain of output k (< p.num_outputs), roi_follow, and
//! health with the scene distance `distance`.
FF_HD void step_auto_gain(const ControlParams& p, const Slot& s, int k, ControlBlock& b) {
  if (!(p.loops & kLoopAutoGain) || !(p.auto_gain.outputs & (1u << k))) return;
  b.state.out[k].gain = AutoGain::step(p.auto_gain, b.loops.integral[k], s.applied.out[k].gain,
                                       s.stats.region[k + 1].mean, b.state.out[k].gain);
}
FF_HD void step_roi_follow(const ControlParams& p, const Slot& s, ControlBlock& b) {
  if (!(p.loops & kLoopRoiFollow)) return;
  OutputControl& o = b.state.out[p.roi_follow.output];
  RoiFollow::step(p.roi_follow, b.loops.roi, s.stats.region[0]);
  RoiFollow::offset(p.roi_follow, b.loops.roi, o.dx, o.dy);
}
FF_HD void step_health(const ControlParams& p, const Slot& s, float distance, ControlBlock& b) {
  if (p.loops & kLoopHealth) Health::step(p.health, b.loops.health, s.stats.region[0], s.iteration > 0, distance);
}

//! The loops of iteration b.header.iteration on `observed` (observed_slot(); nothing when null),
//! `distance` its scene_distance(): updates b.state, the control that iteration's outputs get.
FF_HD void control_step(const ControlParams& p, const Slot* observed, float distance, ControlBlock& b) {
  if (!observed) return;
  for (int k = 0; k < p.num_outputs; ++k) step_auto_gain(p, *observed, k, b);
  step_roi_follow(p, *observed, b);
  step_health(p, *observed, distance, b);
}

//! Thumbnail region r of the current frame: 0 the whole frame, k + 1 output k's window as the
//! state moved it.
FF_HD Region stats_region(const ControlParams& p, const ControlState& st, int r) {
  if (r == 0) return {0, 0, kThumbW, kThumbH};
  const int k = r - 1;
  const int32_t w = p.window[k][2], h = p.window[k][3];
  return thumb_region(moved_edge(p.window[k][0], st.out[k].dx, w, p.frame_w),
                      moved_edge(p.window[k][1], st.out[k].dy, h, p.frame_h), w, h, p.frame_w, p.frame_h);
}

//! Statistics regions of a control with `num_outputs` outputs: the whole frame, then one per output.
FF_HD int num_regions(int num_outputs) { return 1 + num_outputs; }
FF_HD int num_regions(const ControlParams& p) { return num_regions(p.num_outputs); }

//! Where iteration b.header.iteration's statistics go: slot i mod D. The statistics step fills
//! stats.region[r] = finalize() of each region r < num_regions(p) before end_iteration().
FF_HD Slot& current_slot(Slot* slots, const ControlBlock& b) {
  return slots[write_slot(b.header.iteration, b.header.depth)];
}

//! What the host sees of one iteration: frame `iteration`'s statistics, the control its outputs
//! got, and the health flags as of frame iteration - d.
struct ControlRecord {
  uint64_t iteration;        //!< 0-based frame count since setup
  int32_t num_outputs;
  uint32_t health_flags;     //!< bit c: Health condition c raised
  uint32_t health_events[Health::kConditions];
  float mean_luma, variance, motion, black_fraction, white_fraction;   //!< whole frame
  float scene_distance;      //!< health's last histogram distance
  struct Output {
    float gain;
    float mean_luma;         //!< gain x measured window mean: the output's luma before saturation
    float motion;
    int32_t x, y, w, h;      //!< crop window, frame pixels
  } out[kMaxOutputs];
};

//! Part `part` of make_record(): 0 the frame's fields, 1 + k output k's. Parts write disjoint
//! fields, so they may run at once.
inline constexpr int kRecordParts = 1 + kMaxOutputs;
FF_HD void make_record_part(const ControlParams& p, const Slot& s, const Health::State& health, int part,
                            ControlRecord& r) {
  if (part > 0) {
    const int k = part - 1;
    ControlRecord::Output& o = r.out[k];
    if (k >= p.num_outputs) {
      o = {};
      return;
    }
    const int32_t w = p.window[k][2], h = p.window[k][3];
    o.gain = s.applied.out[k].gain;
    o.mean_luma = o.gain * s.stats.region[k + 1].mean;
    o.motion = s.stats.region[k + 1].motion;
    o.x = moved_edge(p.window[k][0], s.applied.out[k].dx, w, p.frame_w);
    o.y = moved_edge(p.window[k][1], s.applied.out[k].dy, h, p.frame_h);
    o.w = w;
    o.h = h;
    return;
  }
  const RegionStats& f = s.stats.region[0];
  r.iteration = s.iteration;
  r.num_outputs = p.num_outputs;
  r.health_flags = health.flags;
  for (int c = 0; c < Health::kConditions; ++c) r.health_events[c] = health.events[c];
  r.mean_luma = f.mean;
  r.variance = f.variance;
  r.motion = f.motion;
  r.black_fraction = f.black_fraction;
  r.white_fraction = f.white_fraction;
  r.scene_distance = health.distance;
}

//! The record of the iteration whose statistics slot `s` holds, `health` as the loops of that
//! iteration left it.
FF_HD void make_record(const ControlParams& p, const Slot& s, const Health::State& health, ControlRecord& r) {
  for (int part = 0; part < kRecordParts; ++part) make_record_part(p, s, health, part, r);
}

//! close_slot() but the applied state: the slot gets iteration i = h.iteration and its region
//! count; the counter advances to i + 1.
FF_HD void close_slot_header(const ControlParams& p, Slot& current, RingHeader& h) {
  current.iteration = h.iteration;
  current.stats.num_regions = num_regions(p);
  ++h.iteration;
}

//! Closes iteration i = h.iteration once `current` (its slot) holds its regions' statistics: the
//! slot gets i and `used`, the state frame i's outputs got; the counter advances to i + 1.
FF_HD void close_slot(const ControlParams& p, Slot& current, const ControlState& used, RingHeader& h) {
  current.applied = used;
  close_slot_header(p, current, h);
}

//! The first half of step 3 of iteration i = b.header.iteration, once `current` (current_slot())
//! holds its regions' statistics: close_slot() with the state frame i used, then `record` is made.
FF_HD void close_iteration(const ControlParams& p, Slot& current, ControlBlock& b, ControlRecord& record) {
  close_slot(p, current, b.state, b.header);
  make_record(p, current, b.loops.health, record);
}

//! All of step 3 in one thread (the CPU engine): close_iteration(), then control_step() for
//! iteration i + 1. The GPU's last statistics block runs the same pieces, the scene distance's
//! terms in parallel.
FF_HD void end_iteration(const ControlParams& p, Slot* slots, ControlBlock& b, ControlRecord& record) {
  close_iteration(p, current_slot(slots, b), b, record);
  const Slot* observed = observed_slot(slots, b.header);
  control_step(p, observed, scene_distance(observed, before_slot(slots, b.header)), b);
}

}  // namespace framefuse::control
