#include "pipeline/control/control_engine.hpp"

#include <algorithm>
#include <cmath>
#include <spdlog/fmt/fmt.h>

#include "pipeline/control/thumbnail.hpp"
#include "pipeline/error.hpp"
#include "pipeline/ops/dispatch.hpp"

namespace framefuse::control {
namespace {

//! `name` must lie in [lo, hi] (and be finite).
void check_range(const std::string& ctx, const char* name, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))
    throw ConfigError(fmt::format("{}: control {} = {} must be between {} and {}", ctx, name, v, lo, hi));
}

int output_index(std::span<const OutputPlan> plans, const std::string& name, const std::string& ctx,
                 const char* key) {
  for (size_t k = 0; k < plans.size(); ++k)
    if (plans[k].name == name) return static_cast<int>(k);
  throw ConfigError(fmt::format("{}: control {} names output '{}', which the pipeline does not have", ctx, key, name));
}

//! A duration as a whole number of frames, at least 1.
int32_t frames(std::chrono::milliseconds d, double frame_rate) {
  const double n = std::round(double(d.count()) * 1e-3 * frame_rate);
  return static_cast<int32_t>(std::clamp(n, 1.0, double(1 << 30)));
}

AutoGain::Params plan_auto_gain(const AutoGainSpec& s, std::span<const OutputPlan> plans, const std::string& ctx) {
  check_range(ctx, "auto_gain.target", s.target, 1e-3, 1);
  check_range(ctx, "auto_gain.kp", s.kp, 0, 10);
  check_range(ctx, "auto_gain.ki", s.ki, 0, 10);
  if (s.kp == 0 && s.ki == 0) throw ConfigError(fmt::format("{}: control auto_gain needs kp or ki above 0", ctx));
  check_range(ctx, "auto_gain.min_gain", s.min_gain, 1e-3, 1);
  check_range(ctx, "auto_gain.max_gain", s.max_gain, 1, 1000);
  check_range(ctx, "auto_gain.max_step", s.max_step, 1e-6, 1000);
  AutoGain::Params p{};
  if (s.outputs.empty()) {
    p.outputs = (1u << plans.size()) - 1;
  } else {
    for (const auto& name : s.outputs) p.outputs |= 1u << output_index(plans, name, ctx, "auto_gain.outputs");
  }
  p.target = static_cast<float>(s.target);
  p.kp = static_cast<float>(s.kp);
  p.ki = static_cast<float>(s.ki);
  p.min_gain = static_cast<float>(s.min_gain);
  p.max_gain = static_cast<float>(s.max_gain);
  p.max_step = static_cast<float>(s.max_step);
  return p;
}

RoiFollow::Params plan_roi_follow(const RoiFollowSpec& s, const FrameInfo& f, std::span<const OutputPlan> plans,
                                  const std::string& ctx) {
  check_range(ctx, "roi_follow.smoothing", s.smoothing, 1e-6, 1);
  check_range(ctx, "roi_follow.dead_band", s.dead_band, 0, 0.5);
  check_range(ctx, "roi_follow.min_motion", s.min_motion, 0, 1);
  RoiFollow::Params p{};
  p.output = output_index(plans, s.output, ctx, "roi_follow.output");
  const auto& r = plans[size_t(p.output)].params.resize;
  p.frame_w = f.width;
  p.frame_h = f.height;
  p.crop_w = r.src_w;
  p.crop_h = r.src_h;
  p.base_x0 = r.x0;
  p.base_y0 = r.y0;
  const RectSpec& b = s.bounds;
  for (const double v : {b.x, b.y, b.w, b.h})
    if (!std::isfinite(v) || (b.fractional && (v < 0 || v > 1)) || (!b.fractional && v != std::floor(v)))
      throw ConfigError(fmt::format("{}: control roi_follow.bounds x={} y={} w={} h={} must be {}", ctx, b.x, b.y,
                                    b.w, b.h, b.fractional ? "fractions in [0, 1]" : "whole pixels"));
  const auto edge = [&](double v, int32_t size) {
    return b.fractional ? static_cast<int32_t>(std::lround(v * size)) : static_cast<int32_t>(v);
  };
  p.bx0 = edge(b.x, f.width);
  p.by0 = edge(b.y, f.height);
  p.bx1 = b.fractional ? edge(b.x + b.w, f.width) : p.bx0 + static_cast<int32_t>(b.w);
  p.by1 = b.fractional ? edge(b.y + b.h, f.height) : p.by0 + static_cast<int32_t>(b.h);
  if (p.bx0 < 0 || p.by0 < 0 || p.bx1 > f.width || p.by1 > f.height)
    throw ConfigError(fmt::format("{}: control roi_follow.bounds x={} y={} w={} h={} do not lie inside the {}x{} frame",
                                  ctx, b.x, b.y, b.w, b.h, f.width, f.height));
  if (p.bx1 - p.bx0 < p.crop_w || p.by1 - p.by0 < p.crop_h)
    throw ConfigError(fmt::format("{}: control roi_follow.bounds ({}x{} pixels) cannot hold the {}x{} crop of output '{}'",
                                  ctx, p.bx1 - p.bx0, p.by1 - p.by0, p.crop_w, p.crop_h, s.output));
  p.smoothing = static_cast<float>(s.smoothing);
  p.dead_x = static_cast<float>(s.dead_band * f.width);
  p.dead_y = static_cast<float>(s.dead_band * f.height);
  p.min_motion = static_cast<float>(s.min_motion);
  return p;
}

Health::Params plan_health(const HealthSpec& s, double frame_rate, const std::string& ctx) {
  check_range(ctx, "health.frozen_motion", s.frozen_motion, 0, 1);
  check_range(ctx, "health.black_fraction", s.black_fraction, 1e-6, 1);
  check_range(ctx, "health.overexposed_fraction", s.overexposed_fraction, 1e-6, 1);
  check_range(ctx, "health.scene_change", s.scene_change, 1e-6, 1);
  if (s.frozen_after.count() <= 0 || s.raise_after.count() < 0 || s.clear_after.count() < 0)
    throw ConfigError(fmt::format("{}: control health durations must not be negative (frozen_after > 0)", ctx));
  Health::Params p{};
  p.frozen_motion = static_cast<float>(s.frozen_motion);
  p.black_fraction = static_cast<float>(s.black_fraction);
  p.overexposed_fraction = static_cast<float>(s.overexposed_fraction);
  p.scene_change = static_cast<float>(s.scene_change);
  p.raise_frames[Health::kFrozen] = frames(s.frozen_after, frame_rate);
  p.raise_frames[Health::kBlack] = frames(s.raise_after, frame_rate);
  p.raise_frames[Health::kOverexposed] = frames(s.raise_after, frame_rate);
  p.raise_frames[Health::kSceneChange] = 1;   // a cut lasts one frame
  p.clear_frames = frames(s.clear_after, frame_rate);
  return p;
}

}  // namespace

ControlParams make_control_params(const ControlSpec& spec, const FrameInfo& frame, std::span<const OutputPlan> plans,
                                  double frame_rate, const std::string& ctx) {
  if (plans.empty() || plans.size() > size_t(kMaxOutputs))
    throw ConfigError(fmt::format("{}: control measures 1..{} outputs, the pipeline has {}", ctx, kMaxOutputs,
                                  plans.size()));
  if (spec.delay_frames < 1 || spec.delay_frames > kMaxDelay)
    throw ConfigError(fmt::format("{}: control delay_frames = {} must be between 1 and {}", ctx, spec.delay_frames,
                                  kMaxDelay));
  if (!(frame_rate > 0) || !std::isfinite(frame_rate))
    throw ConfigError(fmt::format("{}: control needs a positive frame rate, got {}", ctx, frame_rate));
  ControlParams p{};
  p.num_outputs = static_cast<int32_t>(plans.size());
  p.frame_w = frame.width;
  p.frame_h = frame.height;
  p.delay = spec.delay_frames;
  p.depth = spec.delay_frames + 1;
  for (size_t k = 0; k < plans.size(); ++k) {
    const auto& r = plans[k].params.resize;
    p.window[k][0] = r.x0;
    p.window[k][1] = r.y0;
    p.window[k][2] = r.src_w;
    p.window[k][3] = r.src_h;
  }
  if (spec.auto_gain.enabled) {
    p.loops |= kLoopAutoGain;
    p.auto_gain = plan_auto_gain(spec.auto_gain, plans, ctx);
  }
  if (spec.roi_follow.enabled) {
    p.loops |= kLoopRoiFollow;
    p.roi_follow = plan_roi_follow(spec.roi_follow, frame, plans, ctx);
  }
  if (spec.health.enabled) {
    p.loops |= kLoopHealth;
    p.health = plan_health(spec.health, frame_rate, ctx);
  }
  return p;
}

void ControlEngine::setup(const ControlParams& params) {
  params_ = params;
  block_ = initial_block(params);
  slots_.assign(size_t(params.depth), Slot{});
  current_.assign(kThumbPixels, 0);
  previous_.assign(kThumbPixels, 0);
  record_ = {};
}

void ControlEngine::measure(const ops::ImageView& frame, const ops::ColorParams& color) {
  ops::dispatch_format(frame.format, [&](auto tag) {
    constexpr ops::PixelFormat F = decltype(tag)::value;
    const LumaScale scale = luma_scale(F, color);
    for (int y = 0; y < kThumbH; ++y)
      for (int x = 0; x < kThumbW; ++x)
        current_[size_t(y) * kThumbW + x] = static_cast<uint16_t>(thumb_pixel<F>(frame, scale, x, y));
  });
}

void ControlEngine::stats_step() {
  const int n = num_regions(params_);
  Region regions[kMaxRegions];
  RegionAccum acc[kMaxRegions] = {};
  for (int r = 0; r < n; ++r) regions[r] = stats_region(params_, block_.state, r);
  const bool has_previous = block_.header.iteration > 0;
  for (int r = 0; r < n; ++r) {
    for (int32_t t = 0; t < pixel_count(regions[r]); ++t) {
      int32_t x, y;
      region_pixel(regions[r], t, x, y);
      const size_t i = size_t(y) * kThumbW + x;
      const PixelSample s = sample_pixel(current_[i], previous_[i], has_previous, x, y);
      add_sample(acc[r].sums, s);
      ++acc[r].hist[s.bin];
    }
  }
  Slot& slot = current_slot(slots_.data(), block_);
  for (int r = 0; r < n; ++r) slot.stats.region[r] = finalize(acc[r], regions[r]);
  end_iteration(params_, slots_.data(), block_, record_);
  current_.swap(previous_);
}

}  // namespace framefuse::control
