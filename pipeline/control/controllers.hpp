#pragma once
//! The control loops, written once for the CPU engine and the GPU's last statistics block (one
//! thread). Each has POD Params (planned and validated on the host, pipeline/control/
//! control_engine.hpp) and POD State, and a step() run once per frame on the statistics of frame
//! i - d. Products that feed a sum go through mul() so the device never contracts them into a
//! fused multiply-add: windows and decisions then match the host's bit for bit.
#include <math.h>

#include <cstdint>

#include "pipeline/control/stats.hpp"
#include "pipeline/ops/op_traits.hpp"

namespace framefuse::control {

//! a * b rounded to float, never contracted with a following add (nvcc's default -fmad=true would).
FF_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

//! PI controller on log luma: e = ln(target) - ln(gain_then * mean_then), where mean_then is the
//! measured (pre-gain) mean luma of frame i - d's window and gain_then the gain that frame used, so
//! the loop sees the output's luma and its plant gain is 1 whatever the scene's brightness.
//! Command exp(kp e + ki I), clamped to [min_gain, max_gain], then slew-limited to max_step per
//! frame; the integral is re-derived from the gain actually applied (back-calculation), so
//! saturation and slew limiting cause no wind-up.
struct AutoGain {
  struct Params {
    uint32_t outputs;   //!< bit k: drives output k
    float target, kp, ki, min_gain, max_gain, max_step;
  };
  //! A window darker than this (1/255) carries no usable measurement: the gain holds.
  static constexpr float kMinMeasurable = 1.f / 255.f;

  //! Returns the gain for the current frame; `integral` is this output's loop state.
  FF_HD static float step(const Params& p, float& integral, float gain_then, float mean_then, float gain_now) {
    if (!(mean_then >= kMinMeasurable)) return gain_now;
    const float e = logf(p.target) - logf(gain_then * mean_then);
    const float u = mul(p.kp, e) + mul(p.ki, integral + e);
    const float cmd = ops::clampf(expf(u), p.min_gain, p.max_gain);
    const float g = gain_now + ops::clampf(cmd - gain_now, -p.max_step, p.max_step);
    integral = p.ki > 0.f ? (logf(g) - mul(p.kp, e)) / p.ki : 0.f;
    return g;
  }
};

//! Digital pan/tilt: the window centre moves `smoothing` of the way toward the whole-frame motion
//! centroid each frame, per axis, unless the centroid is within the dead band; targets are clamped
//! so the window stays inside the bounds. Little or no motion holds the window.
struct RoiFollow {
  struct Params {
    int32_t output;              //!< the output whose window moves
    int32_t frame_w, frame_h;
    int32_t crop_w, crop_h;      //!< window size (the planned crop's)
    int32_t base_x0, base_y0;    //!< planned window
    int32_t bx0, by0, bx1, by1;  //!< bounds, frame pixels, half-open; hold the window
    float smoothing;             //!< (0, 1]
    float dead_x, dead_y;        //!< dead band, pixels
    float min_motion;            //!< whole-frame motion below this holds
  };
  struct State {
    float cx, cy;   //!< window centre, frame pixels
  };

  FF_HD static State initial(const Params& p) {
    return {clamp_x(p, float(p.base_x0) + mul(0.5f, float(p.crop_w))),
            clamp_y(p, float(p.base_y0) + mul(0.5f, float(p.crop_h)))};
  }

  FF_HD static void step(const Params& p, State& s, const RegionStats& whole) {
    if (!(whole.motion >= p.min_motion) || whole.moving_fraction <= 0.f) return;
    const float ex = clamp_x(p, mul(whole.centroid_x, float(p.frame_w))) - s.cx;
    const float ey = clamp_y(p, mul(whole.centroid_y, float(p.frame_h))) - s.cy;
    if (ex > p.dead_x || ex < -p.dead_x) s.cx += mul(p.smoothing, ex);
    if (ey > p.dead_y || ey < -p.dead_y) s.cy += mul(p.smoothing, ey);
  }

  //! The window's offset from the planned one, whole pixels, inside the bounds.
  FF_HD static void offset(const Params& p, const State& s, int32_t& dx, int32_t& dy) {
    dx = ops::clampi(ops::floori(s.cx - mul(0.5f, float(p.crop_w)) + 0.5f), p.bx0, p.bx1 - p.crop_w) - p.base_x0;
    dy = ops::clampi(ops::floori(s.cy - mul(0.5f, float(p.crop_h)) + 0.5f), p.by0, p.by1 - p.crop_h) - p.base_y0;
  }

 private:
  FF_HD static float clamp_x(const Params& p, float c) {
    return ops::clampf(c, float(p.bx0) + mul(0.5f, float(p.crop_w)), float(p.bx1) - mul(0.5f, float(p.crop_w)));
  }
  FF_HD static float clamp_y(const Params& p, float c) {
    return ops::clampf(c, float(p.by0) + mul(0.5f, float(p.crop_h)), float(p.by1) - mul(0.5f, float(p.crop_h)));
  }
};

//! Picture health: frozen (motion below frozen_motion), black (near-black share at least
//! black_fraction), overexposed (near-white share at least overexposed_fraction), scene change or
//! tamper (histogram distance to the previous observed frame above scene_change). A flag rises once
//! its condition held raise_frames[c] frames in a row and falls once it was absent clear_frames in
//! a row; each rise counts one event.
struct Health {
  enum Condition : int { kFrozen, kBlack, kOverexposed, kSceneChange, kConditions };
  struct Params {
    float frozen_motion, black_fraction, overexposed_fraction, scene_change;
    int32_t raise_frames[kConditions];   //!< >= 1
    int32_t clear_frames;                //!< >= 1
  };
  struct State {
    uint32_t flags;                      //!< bit c: condition c raised
    int32_t on[kConditions], off[kConditions];   //!< consecutive frames with / without
    uint32_t events[kConditions];        //!< rises since setup
    float distance;                      //!< last histogram distance
  };

  //! `has_motion`: the frame had a previous thumbnail (its motion is a measurement, not 0 by
  //! default). `distance`: hist_distance() of its whole-frame histogram to the previous observed
  //! frame's, 0 for the first observed frame (the caller has both frames' statistics).
  FF_HD static void step(const Params& p, State& s, const RegionStats& whole, bool has_motion, float distance) {
    s.distance = distance;
    if (has_motion) update(p, s, kFrozen, whole.motion < p.frozen_motion);
    update(p, s, kBlack, whole.black_fraction >= p.black_fraction);
    update(p, s, kOverexposed, whole.white_fraction >= p.overexposed_fraction);
    update(p, s, kSceneChange, s.distance > p.scene_change);
  }

 private:
  FF_HD static void update(const Params& p, State& s, int c, bool present) {
    const uint32_t bit = 1u << c;
    constexpr int32_t kCap = 1 << 30;   // counts saturate instead of wrapping
    s.on[c] = present ? (s.on[c] < kCap ? s.on[c] + 1 : kCap) : 0;
    s.off[c] = present ? 0 : (s.off[c] < kCap ? s.off[c] + 1 : kCap);
    if (!(s.flags & bit) && s.on[c] >= p.raise_frames[c]) {
      s.flags |= bit;
      ++s.events[c];
    } else if ((s.flags & bit) && s.off[c] >= p.clear_frames) {
      s.flags &= ~bit;
    }
  }
};

inline constexpr const char* kHealthNames[Health::kConditions] = {"frozen", "black", "overexposed",
                                                                   "scene_change"};

}  // namespace framefuse::control
