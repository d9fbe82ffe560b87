//! Control on the CUDA backend (pipeline/control/control_cuda.hpp) against the CPU, the oracle.
//! On the same frames the device's thumbnails, statistics, health flags and crop windows equal
//! ControlEngine's bit for bit and its gains agree within a few float ulps (the device's logf and
//! expf differ from the host's); the delay ring has the same iteration semantics; the fused kernel
//! applies the control state as the CPU executor does; batches, the CudaExecutor and a replayed
//! CUDA graph run the same iterations. Clips are synthetic and seeded; a clip given as thumbnails
//! is painted into frames whose thumbnail it is exactly (8-bit luma).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "pipeline/control/control_cuda.hpp"
#include "pipeline/control/control_engine.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "tests/support/control_fixtures.hpp"

namespace framefuse::test {
namespace {

using control::ControlRecord;
using control::Health;
using control::kThumbPixels;
using control::kThumbW;

constexpr int kW = kControlW, kH = kControlH;
constexpr double kFps = kControlFps;
//! Gains, relative: the device's logf / expf are within 1-2 ulps of the host's and the loop's
//! feedback keeps the difference from growing; 2e-6 is about 16 float ulps.
constexpr double kGainRel = 2e-6;

//! A thumbnail: kThumbW x kThumbH luma values, row-major.
using Thumbnail = std::vector<float>;

//! An RGB frame of the control stream whose thumbnail is `t` rounded to 8 bits: every pixel of a
//! thumbnail cell is gray round(luma * 255) (thumbnail.hpp: cell tx covers columns
//! [floor(2.5 tx), floor(2.5 (tx + 1))), rows likewise; a gray pixel's luma is its byte).
HostImage painted(const Thumbnail& t) {
  HostImage img = random_image(ops::PixelFormat::Rgb24, kW, kH, 1);
  for (int ty = 0; ty < control::kThumbH; ++ty) {
    for (int tx = 0; tx < kThumbW; ++tx) {
      const float v = std::clamp(t[size_t(ty) * kThumbW + tx], 0.f, 1.f);
      const auto byte = static_cast<uint8_t>(std::lround(v * 255.f));
      for (int y = ty * kH / control::kThumbH; y < (ty + 1) * kH / control::kThumbH; ++y)
        for (int x = tx * kW / kThumbW; x < (tx + 1) * kW / kThumbW; ++x)
          for (int c = 0; c < 3; ++c) img.planes[0][size_t(y) * img.pitch[0] + 3 * size_t(x) + c] = byte;
    }
  }
  return img;
}

// ---------------------------------------------------------------------------------------------
// Specs, clips and comparisons

control::ControlParams plan_control(const PipelineSpec& spec, std::span<const OutputPlan> plans) {
  return control::make_control_params(spec.control, control_frame_info(), plans, kFps, "pipeline 'gpu'");
}

ControlSpec loops(int32_t delay, bool gain, bool roi, bool health) {
  ControlSpec c;
  c.delay_frames = delay;
  c.auto_gain.enabled = gain;
  if (roi) {
    c.roi_follow.enabled = true;
    c.roi_follow.output = "win";
    c.roi_follow.smoothing = 0.4;
    c.roi_follow.dead_band = 0.01;
    c.roi_follow.bounds = {0.1, 0.1, 0.8, 0.8, true};   // x 32..288, y 18..162
  }
  c.health.enabled = health;
  c.health.frozen_after = std::chrono::milliseconds(400);   // 10 frames
  c.health.raise_after = std::chrono::milliseconds(120);    // 3 frames
  c.health.clear_after = std::chrono::milliseconds(200);    // 5 frames
  return c;
}

//! Luma `base` plus uniform noise in [-a, a] from `seed`.
Thumbnail noisy(float base, float a, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-a, a);
  Thumbnail t(kThumbPixels);
  for (float& v : t) v = base + u(rng);
  return t;
}

void add_square(Thumbnail& t, int cx, int cy, int half, float v) {
  for (int y = std::max(0, cy - half); y < std::min(control::kThumbH, cy + half); ++y)
    for (int x = std::max(0, cx - half); x < std::min(kThumbW, cx + half); ++x) t[size_t(y) * kThumbW + x] = v;
}

//! Brightness steps (dark, brighter, black, bright) with fresh noise every frame and two values
//! outside 0..1.
Thumbnail steps_clip(int n) {
  const float base = n < 30 ? 0.1f : n < 60 ? 0.35f : n < 90 ? 0.02f : 0.6f;
  Thumbnail t = noisy(base, 0.03f, 100u + uint32_t(n));
  t[5] = -0.2f;
  t[777] = 1.3f;
  return t;
}

//! A still texture with a bright 8x8 square moving right (wrapping) and bobbing.
Thumbnail square_clip(int n) {
  Thumbnail t = noisy(0.3f, 0.1f, 7);
  add_square(t, 20 + (2 * n) % 90, 36 + static_cast<int>(std::lround(20 * std::sin(n / 8.0))), 4, 0.95f);
  return t;
}

//! Moving noise, frozen (frames 30..69 repeat frame 29), black, overexposed, then a cut to
//! another scene.
Thumbnail health_clip(int n) {
  if (n < 30) return noisy(0.4f, 0.15f, 200u + uint32_t(n));
  if (n < 70) return noisy(0.4f, 0.15f, 229u);
  if (n < 90) return noisy(0.02f, 0.015f, 300u + uint32_t(n));
  if (n < 110) return noisy(1.f, 0.04f, 400u + uint32_t(n));
  return noisy(0.75f, 0.1f, 500u + uint32_t(n));
}

Thumbnail all_clip(int n) {
  Thumbnail t = steps_clip(n);
  add_square(t, 20 + (2 * n) % 90, 36 + static_cast<int>(std::lround(20 * std::sin(n / 8.0))), 4, 0.95f);
  return t;
}

double rel(double a, double b) { return a == b ? 0 : std::abs(a - b) / std::max(std::abs(b), 1e-30); }

//! The device's record against the CPU engine's, both over the same thumbnails: everything
//! exact except the gains (kGainRel) and what scales with them.
void expect_same_record(const ControlRecord& g, const ControlRecord& c) {
  EXPECT_EQ(g.iteration, c.iteration);
  EXPECT_EQ(g.num_outputs, c.num_outputs);
  EXPECT_EQ(g.health_flags, c.health_flags);
  for (int i = 0; i < Health::kConditions; ++i)
    EXPECT_EQ(g.health_events[i], c.health_events[i]) << control::kHealthNames[i] << " events";
  EXPECT_EQ(g.mean_luma, c.mean_luma);
  EXPECT_EQ(g.variance, c.variance);
  EXPECT_EQ(g.motion, c.motion);
  EXPECT_EQ(g.black_fraction, c.black_fraction);
  EXPECT_EQ(g.white_fraction, c.white_fraction);
  EXPECT_EQ(g.scene_distance, c.scene_distance);
  for (int k = 0; k < c.num_outputs; ++k) {
    const auto &a = g.out[k], &b = c.out[k];
    EXPECT_LE(rel(a.gain, b.gain), kGainRel) << "output " << k << " gain " << a.gain << " vs " << b.gain;
    EXPECT_LE(rel(a.mean_luma, b.mean_luma), 2 * kGainRel) << "output " << k << " mean " << a.mean_luma;
    EXPECT_EQ(a.motion, b.motion) << "output " << k;
    EXPECT_EQ((std::array{a.x, a.y, a.w, a.h}), (std::array{b.x, b.y, b.w, b.h})) << "output " << k << " window";
  }
}

//! A fused launch with control on device frames of the control stream, its outputs in device
//! memory.
struct ControlledLaunch {
  control::CudaControl control;
  FusedPreprocess fused;
  DeviceOutputs outs;

  ControlledLaunch(const FrameInfo& info, std::span<const OutputPlan> plans, const control::ControlParams& params,
                   cudaStream_t stream, int max_batch = 1, int rows_per_thread = 0)
      : outs(plans, max_batch) {
    control.setup(params, stream);
    fused.setup(info, plans, max_batch, rows_per_thread);
    control.attach(fused);
  }
  void set_frames(std::span<const FrameSlot> slots) { fused.set_batch(slots, outs.ptrs()); }
  //! The thumbnail of the last frame the device completed, after the stream was synchronised.
  std::vector<uint16_t> thumbnail() const {
    std::vector<uint16_t> t(kThumbPixels);
    cuda::check(cudaMemcpy(t.data(), control.device_thumbnail(), sizeof(uint16_t) * t.size(), cudaMemcpyDeviceToHost),
                "download thumbnail");
    return t;
  }
  ControlRecord record() const {
    const auto r = control.record();
    EXPECT_TRUE(r.has_value());
    return r.value_or(ControlRecord{});
  }
  //! The D slots, as bytes, after the stream was synchronised.
  std::vector<std::byte> slot_bytes() const {
    std::vector<std::byte> s(sizeof(control::Slot) * size_t(control.params().depth));
    cuda::check(cudaMemcpy(s.data(), control.device_slots(), s.size(), cudaMemcpyDeviceToHost), "download slots");
    return s;
  }
};

//! One frame at a time through a ControlledLaunch of the spec's outputs, synchronised; each frame's
//! iteration closed (CudaControl::flush) unless step() is told otherwise.
class GpuRig {
 public:
  GpuRig(const PipelineSpec& spec, const control::ControlParams& p)
      : plans_(make_output_plans(spec, control_frame_info())),
        color_(make_color_params(spec.color, control_frame_info())),
        launch_(control_frame_info(), plans_, p, stream_) {}

  //! The newest record after the frame: its own, or with `flush` = false and d >= 2 the frame
  //! before's (nullopt after the first frame).
  std::optional<ControlRecord> step(const HostImage& img, bool flush) {
    const DeviceImage dev = upload(img);
    const FrameSlot slot{dev.view, color_};
    launch_.set_frames({&slot, 1});
    launch_.control.run(launch_.fused, 1, stream_);
    if (flush) launch_.control.flush(stream_);
    cuda::check(cudaStreamSynchronize(stream_), "control iteration");
    return launch_.control.record();
  }
  ControlRecord step(const HostImage& img) {
    const auto r = step(img, true);
    EXPECT_TRUE(r.has_value());
    return r.value_or(ControlRecord{});
  }
  ControlRecord step(const Thumbnail& t) { return step(painted(t)); }

  control::ControlBlock block() {
    control::ControlBlock b;
    cuda::check(cudaMemcpy(&b, launch_.control.device_block(), sizeof b, cudaMemcpyDeviceToHost), "download block");
    return b;
  }
  std::vector<control::Slot> slots() {
    std::vector<control::Slot> s(size_t(launch_.control.params().depth));
    cuda::check(cudaMemcpy(s.data(), launch_.control.device_slots(), sizeof(control::Slot) * s.size(),
                           cudaMemcpyDeviceToHost),
                "download slots");
    return s;
  }
  std::vector<uint16_t> thumbnail() const { return launch_.thumbnail(); }

 private:
  cuda::Stream stream_ = cuda::make_stream();
  std::vector<OutputPlan> plans_;
  ops::ColorParams color_;
  ControlledLaunch launch_;
};

//! ControlEngine fed the same frame.
ControlRecord cpu_step(control::ControlEngine& engine, const HostImage& img,
                       const ops::ColorParams& color = make_color_params(ColorSpec{}, control_frame_info())) {
  engine.measure(img.view(), color);
  engine.stats_step();
  return engine.record();
}

// ---------------------------------------------------------------------------------------------
// The device engine against ControlEngine, over a table of clips and loops

struct EngineCase {
  std::string name;
  ControlSpec control;
  std::function<Thumbnail(int)> clip;
  uint32_t flags;        //!< health flags the clip must raise at some frame
  bool gain, roi;        //!< the clip must change a gain / move the window
};

std::ostream& operator<<(std::ostream& os, const EngineCase& c) { return os << c.name; }

std::vector<EngineCase> engine_cases() {
  const uint32_t black = 1u << Health::kBlack, all_flags = (1u << Health::kConditions) - 1;
  return {
      {"steps_gain_health_d1", loops(1, true, false, true), steps_clip, black, true, false},
      {"steps_gain_d3", loops(3, true, false, false), steps_clip, 0, true, false},
      {"square_roi_health_d1", loops(1, false, true, true), square_clip, 0, false, true},
      {"square_roi_d2", loops(2, false, true, false), square_clip, 0, false, true},
      {"health_d2", loops(2, false, false, true), health_clip, all_flags, false, false},
      // Fresh noise everywhere pulls the centroid to the middle: the window may stay put here.
      {"all_loops_d4", loops(4, true, true, true), all_clip, black, true, false},
  };
}

class GpuControlEngine : public ::testing::TestWithParam<EngineCase> {};

TEST_P(GpuControlEngine, RecordsEqualTheCpuEngine) {
  const EngineCase& c = GetParam();
  const PipelineSpec spec = control_pipeline("gpu", 
      {gray_output("all"), gray_output("win", pixels(128, 58, 64, 64)), gray_output("right", pixels(160, 45, 160, 90))},
      c.control);
  const auto plans = make_output_plans(spec, control_frame_info());
  const control::ControlParams params = plan_control(spec, plans);
  // `late` runs as the daemon does: with d >= 2 each iteration closes in the next frame's launch,
  // so its newest record is the frame before's, except after the frames where it is flushed.
  GpuRig gpu(spec, params), late(spec, params);
  control::ControlEngine cpu;
  cpu.setup(params);
  std::vector<ControlRecord> cpu_records;
  uint32_t flags = 0;
  bool gained = false, moved = false;
  for (int n = 0; n < 120; ++n) {
    SCOPED_TRACE("frame " + std::to_string(n));
    const HostImage img = painted(c.clip(n));
    const ControlRecord g = gpu.step(img);
    const ControlRecord r = cpu_step(cpu, img);
    cpu_records.push_back(r);
    ASSERT_EQ(g.iteration, uint64_t(n));
    expect_same_record(g, r);
    const bool flush = n % 7 == 3;
    const int lag = flush || c.control.delay_frames == 1 ? 0 : 1;
    const std::optional<ControlRecord> l = late.step(img, flush);
    ASSERT_EQ(l.has_value(), n >= lag);
    if (l) {
      ASSERT_EQ(l->iteration, uint64_t(n - lag)) << "the iteration closed without a flush";
      expect_same_record(*l, cpu_records[size_t(n - lag)]);
    }
    if (HasFailure()) break;   // one frame's report is enough; later frames only repeat it
    flags |= r.health_flags;
    gained |= r.out[0].gain != 1.f;
    moved |= r.out[1].x != 128 || r.out[1].y != 58;
  }
  EXPECT_EQ(flags & c.flags, c.flags) << "the clip did not raise every flag it should";
  EXPECT_TRUE(gained || !c.gain) << "the clip never changed a gain";
  EXPECT_TRUE(moved || !c.roi) << "the clip never moved the window";
}

INSTANTIATE_TEST_SUITE_P(Clips, GpuControlEngine, ::testing::ValuesIn(engine_cases()),
                         [](const ::testing::TestParamInfo<EngineCase>& i) { return i.param.name; });

TEST(GpuControlEngine, SetupAgainAndEveryFlushPatternKeepTheCpuRecords) {
  // With d >= 2 each finisher takes the delay ring's slots from the mailbox the one before it (or a
  // flush) left (fused_control.hpp). One CudaControl, set up again for d = 2, 3 and 5 on the same
  // fused launch, runs each time through flushes before the first frame, after single frames, twice
  // after one frame and after every frame of a stretch; every record equals the CPU engine's.
  const auto spec_for = [](int d) {
    return control_pipeline("gpu", {gray_output("all"), gray_output("win", pixels(128, 58, 64, 64))},
                            loops(d, true, true, true));
  };
  const FrameInfo info = control_frame_info();
  const ops::ColorParams color = make_color_params(spec_for(2).color, info);
  const auto plans = make_output_plans(spec_for(2), info);
  const cuda::Stream stream = cuda::make_stream();
  ControlledLaunch gpu(info, plans, plan_control(spec_for(2), plans), stream);
  for (const int d : {2, 3, 5}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    const control::ControlParams params = plan_control(spec_for(d), plans);
    gpu.control.setup(params, stream);
    gpu.control.attach(gpu.fused);
    control::ControlEngine cpu;
    cpu.setup(params);
    gpu.control.flush(stream);   // nothing to close yet
    cuda::check(cudaStreamSynchronize(stream), "flush after setup");
    EXPECT_FALSE(gpu.control.record().has_value()) << "a record before the first frame";
    std::vector<ControlRecord> cpu_records;
    uint32_t flags = 0;
    for (int n = 0; n < 48; ++n) {
      SCOPED_TRACE("frame " + std::to_string(n));
      const HostImage img = painted(all_clip(3 * n));
      const DeviceImage dev = upload(img);
      const FrameSlot slot{dev.view, color};
      gpu.set_frames({&slot, 1});
      gpu.control.run(gpu.fused, 1, stream);
      const int flushes = n % 11 == 2 ? 1 : n % 11 == 6 ? 2 : n >= 30 && n < 37 ? 1 : 0;
      for (int f = 0; f < flushes; ++f) gpu.control.flush(stream);
      cuda::check(cudaStreamSynchronize(stream), "control iteration");
      cpu_records.push_back(cpu_step(cpu, img, color));
      const int lag = flushes > 0 ? 0 : 1;
      const std::optional<ControlRecord> r = gpu.control.record();
      ASSERT_EQ(r.has_value(), n >= lag);
      if (!r) continue;
      ASSERT_EQ(r->iteration, uint64_t(n - lag));
      expect_same_record(*r, cpu_records[size_t(n - lag)]);
      flags |= r->health_flags;
      if (HasFailure()) return;
    }
    EXPECT_NE(cpu_records.back().out[0].gain, 1.f) << "the clip never changed the gain";
    EXPECT_NE(flags, 0u) << "the clip raised no health flag";
  }
}

// ---------------------------------------------------------------------------------------------
// Delay semantics on the device

//! Brightness of frame n: steps at frames 10 and 23.
float stepped(int n) { return n < 10 ? 0.1f : (n < 23 ? 0.3f : 0.02f); }

TEST(GpuControlDelay, ControlOfFrameNReadsFrameNMinusDOnly) {
  for (const int d : {1, 2, 3, 7}) {
    SCOPED_TRACE("d = " + std::to_string(d));
    const PipelineSpec spec = control_pipeline("gpu", {gray_output("out")}, loops(d, true, false, true));
    const auto plans = make_output_plans(spec, control_frame_info());
    GpuRig rig(spec, plan_control(spec, plans));
    for (int n = 0; n < 40; ++n) {
      // Before frame n: the loops for frame n ran at the end of frame n - 1, on slot n - d.
      ASSERT_EQ(rig.block().header.iteration, uint64_t(n));
      if (n >= d) {
        const auto slots = rig.slots();
        const control::Slot& read = slots[size_t(control::read_slot(uint64_t(n), d, d + 1))];
        EXPECT_EQ(read.iteration, uint64_t(n - d)) << "frame " << n;
        EXPECT_NEAR(read.stats.region[0].mean, stepped(n - d), 2.5e-3) << "frame " << n;   // 8-bit frames
      }
      rig.step(Thumbnail(kThumbPixels, stepped(n)));
      EXPECT_EQ(rig.slots()[size_t(n % (d + 1))].iteration, uint64_t(n)) << "frame " << n;
      EXPECT_EQ(rig.block().header.iteration, uint64_t(n + 1));
    }
  }
}

TEST(GpuControlDelay, ControlNeverDependsOnNewerFrames) {
  // Two clips equal up to frame s - 1 and different from s on: the control of every frame n < s + d
  // is bit-identical, and frame s + d's gain already differs.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> luma(0.01f, 0.2f);
  for (const int d : {1, 2, 4}) {
    for (const int s : {0, 3, 17}) {
      SCOPED_TRACE(::testing::Message() << "d=" << d << " s=" << s);
      ControlSpec c = loops(d, true, true, true);
      c.health.raise_after = std::chrono::milliseconds(0);
      const PipelineSpec spec = control_pipeline("gpu", {gray_output("out"), gray_output("win", pixels(100, 40, 64, 64))}, c);
      const auto plans = make_output_plans(spec, control_frame_info());
      const control::ControlParams params = plan_control(spec, plans);
      GpuRig a(spec, params), b(spec, params);
      const float common = 0.2f, future_a = luma(rng), future_b = 0.9f;
      for (int n = 0; n < s + d + 3; ++n) {
        const auto frame = [n](float base) {   // a patch walks right: roi_follow has motion to chase
          Thumbnail t(kThumbPixels, base);
          for (int y = 21; y < 40; ++y)
            for (int x = 4 * (n % 32); x < 4 * (n % 32) + 4; ++x) t[size_t(y) * kThumbW + x] = 0.9f;
          return t;
        };
        const ControlRecord ra = a.step(frame(n < s ? common : future_a));
        const ControlRecord rb = b.step(frame(n < s ? common : future_b));
        bool same = ra.health_flags == rb.health_flags;
        for (int k = 0; k < 2; ++k)
          same = same && ra.out[k].gain == rb.out[k].gain && ra.out[k].x == rb.out[k].x && ra.out[k].y == rb.out[k].y;
        if (n < s + d) {
          EXPECT_TRUE(same) << "frame " << n;
        } else if (n == s + d) {
          EXPECT_NE(ra.out[0].gain, rb.out[0].gain) << "frame " << n;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The fused pass with control

//! RGB frame: texture with bytes in [lo, hi] from `seed`, plus a 20-pixel square of 250 centred at
//! (cx, cy).
HostImage rgb_frame(uint32_t seed, int lo, int hi, int cx, int cy) {
  HostImage img = random_image(ops::PixelFormat::Rgb24, kW, kH, seed);
  for (auto& v : img.planes[0]) v = static_cast<uint8_t>(lo + v % (hi - lo + 1));
  for (int y = std::max(0, cy - 10); y < std::min(kH, cy + 10); ++y)
    for (int x = std::max(0, cx - 10); x < std::min(kW, cx + 10); ++x)
      for (int ch = 0; ch < 3; ++ch) img.planes[0][size_t(y) * img.pitch[0] + 3 * x + ch] = 250;
  return img;
}

//! Frame n (< 60) of a clip with work for every loop: dark, brighter, dark again (a still texture
//! per stretch) and a bright square moving right and bobbing.
HostImage moving_square(int n) {
  const int stretch = n < 20 ? 0 : n < 40 ? 1 : 2;
  constexpr int lo[] = {10, 40, 5}, hi[] = {50, 120, 30};
  return rgb_frame(7u + uint32_t(stretch), lo[stretch], hi[stretch], 60 + 3 * n,
                   90 + static_cast<int>(std::lround(40 * std::sin(n / 10.0))));
}

TEST(GpuControlFused, OutputsApplyTheStateAndStatisticsMatchTheCpu) {
  // Per frame: the device's thumbnail and record equal the CPU engine's on the same frame, and the
  // outputs equal the CPU executor's given the state the record reports (control::apply on the
  // planned outputs). Gain on 'all' and 'det', window 'win' follows.
  ControlSpec c = loops(2, true, true, true);
  c.auto_gain.outputs = {"all", "det"};
  OutputSpec all = gray_output("all");
  all.resize = {160, 90, 0};
  all.interp = ops::Interp::Area;
  OutputSpec det;
  det.name = "det";
  det.crop = pixels(40, 20, 240, 140);
  det.resize = {96, 96, 0};
  det.aspect = AspectMode::Letterbox;
  det.channels = ChannelOrder::Bgr;
  det.layout = ops::Layout::Hwc;
  det.dtype = ops::DType::F16;
  const PipelineSpec spec = control_pipeline("gpu", {all, window_output("win", pixels(128, 58, 64, 64)), det}, c);
  const FrameInfo info = control_frame_info();
  const ops::ColorParams color = make_color_params(spec.color, info);
  const auto plans = make_output_plans(spec, info);
  const control::ControlParams params = plan_control(spec, plans);

  const cuda::Stream stream = cuda::make_stream();
  ControlledLaunch gpu(info, plans, params, stream);
  control::ControlEngine engine;
  engine.setup(params);
  CpuExecutor cpu(2);
  bool moved = false, gained = false;
  for (int n = 0; n < 60; ++n) {
    SCOPED_TRACE("frame " + std::to_string(n));
    const HostImage img = moving_square(n);
    const DeviceImage dev = upload(img);
    gpu.outs.poison(n % 2 ? 0x00 : 0xFF);
    const FrameSlot slot{dev.view, color};
    gpu.set_frames({&slot, 1});
    gpu.control.run(gpu.fused, 1, stream);
    gpu.control.flush(stream);
    cuda::check(cudaStreamSynchronize(stream), "controlled fused pass");
    const ControlRecord r = gpu.record();
    ASSERT_EQ(r.iteration, uint64_t(n));
    const auto got = gpu.outs.download();
    expect_same_record(r, cpu_step(engine, img, color));
    const auto cpu_thumb = engine.previous_thumbnail();
    EXPECT_EQ(gpu.thumbnail(), std::vector<uint16_t>(cpu_thumb.begin(), cpu_thumb.end())) << "thumbnail";

    control::ControlState state = control::neutral_state(params.num_outputs, kW, kH);
    std::vector<OutputPlan> applied = plans;
    for (size_t k = 0; k < plans.size(); ++k) {
      const auto& planned = plans[k].params.resize;
      state.out[k] = {r.out[k].gain, r.out[k].x - planned.x0, r.out[k].y - planned.y0};
      control::apply(state, static_cast<int>(k), applied[k].params);
    }
    cpu.setup(info, color, applied, 1);
    auto ref = poisoned_outputs(applied, 1);
    const ops::ImageView view = img.view();
    cpu.process({&view, 1}, pointers(ref));
    for (size_t k = 0; k < plans.size(); ++k)
      EXPECT_TRUE(matches_cpu(got[k], ref[k], plans[k].params.store.dtype)) << "output " << plans[k].name;
    EXPECT_EQ(r.out[1].gain, 1.f) << "'win' is not driven by auto_gain";
    moved |= r.out[1].x != 128 || r.out[1].y != 58;
    gained |= r.out[0].gain != 1.f && r.out[2].gain != 1.f;
    if (HasFailure()) break;
  }
  EXPECT_TRUE(moved) << "the window never moved";
  EXPECT_TRUE(gained) << "the gains never changed";
}

TEST(GpuControlFused, ThumbnailAndRecordsEqualTheCpuOnEveryFormat) {
  // Random frames of every pixel format and both ranges, three frames each (so motion is measured):
  // the statistics blocks' thumbnail equals ControlEngine::measure's bit for bit, and the records
  // agree.
  struct Case {
    ops::PixelFormat format;
    int w, h;
    ops::ColorRange range;
  };
  const Case cases[] = {
      {ops::PixelFormat::Nv12, 1920, 1080, ops::ColorRange::Limited}, {ops::PixelFormat::Nv12, 640, 360, ops::ColorRange::Full},
      {ops::PixelFormat::P010, 1280, 720, ops::ColorRange::Limited},  {ops::PixelFormat::Yuv420p, 333, 201, ops::ColorRange::Full},
      {ops::PixelFormat::Yuv420p, 100, 50, ops::ColorRange::Limited}, {ops::PixelFormat::Bgr24, 641, 359, ops::ColorRange::Full},
      {ops::PixelFormat::Yuv420p10, 1280, 720, ops::ColorRange::Limited},
      {ops::PixelFormat::Yuv422p, 640, 480, ops::ColorRange::Full},
  };
  const cuda::Stream stream = cuda::make_stream();
  uint32_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << int(c.format) << " " << c.w << "x" << c.h << " range " << int(c.range));
    FrameInfo info{};
    info.width = c.w;
    info.height = c.h;
    info.format = c.format;
    PipelineSpec spec = control_pipeline("gpu", {gray_output("all"), gray_output("box", pixels(c.w / 4, c.h / 3, c.w / 2, c.h / 2))},
                                         loops(1, true, false, true));
    spec.color.range = c.range;
    const ops::ColorParams color = make_color_params(spec.color, info);
    const auto plans = make_output_plans(spec, info);
    const control::ControlParams params = control::make_control_params(spec.control, info, plans, kFps, "pipeline 'gpu'");
    ControlledLaunch gpu(info, plans, params, stream);
    control::ControlEngine engine;
    engine.setup(params);
    for (int n = 0; n < 3; ++n) {
      const HostImage img = random_image(c.format, c.w, c.h, seed++);
      const DeviceImage dev = upload(img);
      const FrameSlot slot{dev.view, color};
      gpu.set_frames({&slot, 1});
      gpu.control.run(gpu.fused, 1, stream);
      cuda::check(cudaStreamSynchronize(stream), "controlled fused pass");
      const ControlRecord r = cpu_step(engine, img, color);
      const auto cpu_thumb = engine.previous_thumbnail();
      EXPECT_EQ(gpu.thumbnail(), std::vector<uint16_t>(cpu_thumb.begin(), cpu_thumb.end())) << "frame " << n;
      expect_same_record(gpu.record(), r);
      if (n > 0) {
        EXPECT_GT(r.motion, 0.f) << "frame " << n;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// CudaExecutor

TEST(GpuControlBatch, BatchEqualsFramesOneAtATime) {
  // A batch runs one iteration per frame (one fused launch each; with d = 2 each launch's finisher
  // closes the iteration before it): two batches of 6 equal 12 single frames byte for byte
  // (outputs, the delay ring's slots, the thumbnail, the record), and CudaExecutor (host frames,
  // same launch configuration) equals the batched launch.
  constexpr int kBatch = 6;
  const PipelineSpec spec =
      control_pipeline("gpu", {gray_output("all"), window_output("win", pixels(128, 58, 64, 64))}, loops(2, true, true, true));
  const FrameInfo info = control_frame_info();
  const ops::ColorParams color = make_color_params(spec.color, info);
  const auto plans = make_output_plans(spec, info);
  const control::ControlParams params = plan_control(spec, plans);
  const cuda::Stream stream = cuda::make_stream();
  ControlledLaunch batched(info, plans, params, stream, kBatch);
  // Same rows per thread: the same kernel instantiation computes every pixel the same way.
  ControlledLaunch single(info, plans, params, stream, 1, batched.fused.rows_per_thread());
  CudaExecutor executor(0);
  executor.setup(info, color, plans, kBatch);
  executor.setup_control(params);
  auto out_executor = poisoned_outputs(plans, kBatch);
  for (int first = 0; first < 2 * kBatch; first += kBatch) {
    SCOPED_TRACE("batch from frame " + std::to_string(first));
    std::vector<HostImage> imgs;
    std::vector<DeviceImage> dev;
    std::vector<FrameSlot> slots;
    std::vector<ops::ImageView> views;
    for (int b = 0; b < kBatch; ++b) {
      imgs.push_back(moving_square(first + b));
      dev.push_back(upload(imgs.back()));
    }
    for (int b = 0; b < kBatch; ++b) {
      slots.push_back({dev[size_t(b)].view, color});
      views.push_back(imgs[size_t(b)].view());
    }
    batched.outs.poison(0xFF);
    batched.set_frames(slots);
    batched.control.run(batched.fused, kBatch, stream);
    cuda::check(cudaStreamSynchronize(stream), "batch");
    const auto got = batched.outs.download();
    const ControlRecord from_batch = batched.record();
    EXPECT_EQ(from_batch.iteration, uint64_t(first + kBatch - 1 - batched.control.record_lag()));

    for (int b = 0; b < kBatch; ++b) {
      single.outs.poison(0x00);
      single.set_frames({&slots[size_t(b)], 1});
      single.control.run(single.fused, 1, stream);
      cuda::check(cudaStreamSynchronize(stream), "single frame");
      const auto one = single.outs.download();
      for (size_t k = 0; k < plans.size(); ++k) {
        const size_t bytes = plans[k].bytes_per_frame;
        EXPECT_TRUE(same_bytes(std::span(got[k]).subspan(size_t(b) * bytes, bytes), one[k]))
            << "frame " << first + b << " output " << plans[k].name;
      }
    }
    const ControlRecord from_single = single.record();
    EXPECT_EQ(std::memcmp(&from_batch, &from_single, sizeof from_batch), 0) << "records";
    EXPECT_TRUE(same_bytes(batched.slot_bytes(), single.slot_bytes())) << "delay ring slots";
    EXPECT_EQ(batched.thumbnail(), single.thumbnail()) << "thumbnail";

    executor.process(views, pointers(out_executor));
    for (size_t k = 0; k < plans.size(); ++k)
      EXPECT_TRUE(same_bytes(out_executor[k], got[k])) << "executor output " << plans[k].name;
    const auto from_executor = executor.control_record();
    ASSERT_TRUE(from_executor.has_value());
    EXPECT_EQ(std::memcmp(&*from_executor, &from_batch, sizeof from_batch), 0) << "executor record";
  }
}

TEST(GpuControlExecutor, MatchesTheCpuExecutor) {
  // CudaExecutor against CpuExecutor, both with control: the same thumbnails (integer), so the
  // records agree as the engines' do (exact but for the gains' last bits), and every output agrees
  // within the GPU test tolerances.
  // Frames: moving dark noise, frozen (20..34), black (35..49), a cut to bright (50..64), a cut back.
  const auto frame = [](int n) {
    if (n < 20) return rgb_frame(300u + uint32_t(n), 15, 45, -100, -100);
    if (n < 35) return rgb_frame(319u, 15, 45, -100, -100);
    if (n < 50) return rgb_frame(400u + uint32_t(n), 0, 8, -100, -100);
    if (n < 65) return rgb_frame(500u + uint32_t(n), 100, 200, -100, -100);
    return rgb_frame(600u + uint32_t(n), 20, 60, -100, -100);
  };
  OutputSpec all = gray_output("all");
  all.resize = {224, 224, 0};
  OutputSpec det;
  det.name = "det";
  det.crop = pixels(40, 20, 240, 140);
  det.resize = {128, 128, 0};
  det.aspect = AspectMode::Letterbox;
  det.dtype = ops::DType::F16;
  const PipelineSpec spec = control_pipeline("gpu", {all, det}, loops(2, true, false, true));
  const FrameInfo info = control_frame_info();
  const ops::ColorParams color = make_color_params(spec.color, info);
  const auto plans = make_output_plans(spec, info);
  const control::ControlParams params = plan_control(spec, plans);
  CudaExecutor gpu(0);
  CpuExecutor cpu(2);
  gpu.setup(info, color, plans, 1);
  cpu.setup(info, color, plans, 1);
  EXPECT_FALSE(gpu.control_record().has_value());
  gpu.setup_control(params);
  cpu.setup_control(params);
  EXPECT_FALSE(gpu.control_record().has_value()) << "a record before the first frame";
  auto out_gpu = poisoned_outputs(plans, 1), out_cpu = poisoned_outputs(plans, 1);
  std::vector<ControlRecord> cpu_records;
  uint32_t flags = 0;
  for (int n = 0; n < 80; ++n) {
    SCOPED_TRACE("frame " + std::to_string(n));
    const HostImage img = frame(n);
    const ops::ImageView view = img.view();
    gpu.process({&view, 1}, pointers(out_gpu));
    cpu.process({&view, 1}, pointers(out_cpu));
    const auto g = gpu.control_record(), c = cpu.control_record();
    ASSERT_TRUE(c.has_value());
    cpu_records.push_back(*c);
    // d = 2: the frame's iteration closes in the next frame's launch, so the newest record is the
    // frame before's once process() returned.
    ASSERT_EQ(g.has_value(), n >= 1);
    if (!g) continue;
    ASSERT_EQ(g->iteration, uint64_t(n - 1));
    expect_same_record(*g, cpu_records[size_t(n - 1)]);
    for (size_t k = 0; k < plans.size(); ++k)
      EXPECT_TRUE(matches_cpu(out_gpu[k], out_cpu[k], plans[k].params.store.dtype)) << plans[k].name;
    flags |= c->health_flags;
    if (HasFailure()) break;
  }
  const uint32_t expected = (1u << Health::kFrozen) | (1u << Health::kBlack) | (1u << Health::kSceneChange);
  EXPECT_EQ(flags & expected, expected) << "the clip did not raise frozen, black and scene_change";

  gpu.setup(info, color, plans, 1);   // setup() turns control off
  EXPECT_FALSE(gpu.control_record().has_value());
  const PipelineSpec other = control_pipeline("gpu", {all}, ControlSpec{});
  const auto other_plans = make_output_plans(other, info);
  EXPECT_THROW(gpu.setup_control(plan_control(other, other_plans)), ConfigError);
}

// ---------------------------------------------------------------------------------------------
// A captured graph

TEST(GpuControlGraph, ReplayedIterationEqualsStreamLaunches) {
  // One iteration (parameter upload, fused kernel with its finisher and statistics blocks) captured
  // once and replayed per frame, against the same iteration launched on the stream. The graph
  // holds no frame number: the device's iteration counters advance by themselves, also over a
  // burst of replays with no host work in between (wrapping the record ring). d = 3: each
  // iteration closes in the next launch, and flush() closes the last.
  const PipelineSpec spec =
      control_pipeline("gpu", {gray_output("all"), window_output("win", pixels(128, 58, 64, 64))}, loops(3, true, true, true));
  const FrameInfo info = control_frame_info();
  const ops::ColorParams color = make_color_params(spec.color, info);
  const auto plans = make_output_plans(spec, info);
  const control::ControlParams params = plan_control(spec, plans);
  const cuda::Stream stream = cuda::make_stream();
  ControlledLaunch launched(info, plans, params, stream), replayed(info, plans, params, stream);
  EXPECT_FALSE(replayed.control.record().has_value());

  constexpr int kFrames = 24, kBurst = 20;
  std::vector<HostImage> imgs;
  std::vector<DeviceImage> dev;
  for (int n = 0; n < kFrames; ++n) {
    imgs.push_back(moving_square(n));
    dev.push_back(upload(imgs.back()));
  }
  const FrameSlot first{dev[0].view, color};
  replayed.set_frames({&first, 1});
  const cuda::CapturedGraph captured =
      cuda::capture_graph(stream, [&](cudaStream_t s) { replayed.control.run(replayed.fused, 1, s); });
  EXPECT_EQ(captured.nodes, 2u) << "expected the parameter upload and the fused kernel";
  const cuda::GraphExec& exec = captured.exec;

  const auto compare = [&](uint64_t iteration) {
    const ControlRecord a = launched.record(), b = replayed.record();
    EXPECT_EQ(a.iteration, iteration);
    EXPECT_EQ(b.iteration, iteration);
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "records of iteration " << iteration;
  };
  ASSERT_EQ(replayed.control.record_lag(), 1);
  for (int n = 0; n < kFrames; ++n) {
    SCOPED_TRACE("frame " + std::to_string(n));
    launched.outs.poison(0xFF);
    replayed.outs.poison(0x00);
    const FrameSlot slot{dev[size_t(n)].view, color};
    launched.set_frames({&slot, 1});
    replayed.set_frames({&slot, 1});
    launched.control.run(launched.fused, 1, stream);
    cuda::check(cudaGraphLaunch(exec, stream), "graph launch");
    cuda::check(cudaStreamSynchronize(stream), "iteration");
    if (n == 0) {
      EXPECT_FALSE(replayed.control.record().has_value()) << "frame 0 closes in the next launch";
    } else {
      compare(uint64_t(n - 1));
    }
    const auto a = launched.outs.download(), b = replayed.outs.download();
    for (size_t k = 0; k < plans.size(); ++k) EXPECT_TRUE(same_bytes(a[k], b[k])) << "output " << plans[k].name;
    EXPECT_EQ(launched.thumbnail(), replayed.thumbnail());
  }
  for (int i = 0; i < kBurst; ++i) {
    launched.control.run(launched.fused, 1, stream);
    cuda::check(cudaGraphLaunch(exec, stream), "graph launch");
  }
  cuda::check(cudaStreamSynchronize(stream), "burst");
  compare(uint64_t(kFrames + kBurst - 2));
  launched.control.flush(stream);
  replayed.control.flush(stream);
  cuda::check(cudaStreamSynchronize(stream), "flush");
  compare(uint64_t(kFrames + kBurst - 1));
  EXPECT_TRUE(same_bytes(launched.slot_bytes(), replayed.slot_bytes())) << "delay ring slots";
}

}  // namespace
}  // namespace framefuse::test
