//! The GPU half of the fuzz suite: seeded random configurations, every option of a frame and of its
//! outputs drawn at once (format, odd sizes, colour interpretation, batch, 1-4 outputs with crop,
//! resize, interpolation, aspect, centre crop, pad value, normalization, channels, layout, dtype),
//! through CudaExecutor and FusedPreprocess (a random rows-per-thread) against the CPU executor.
//! The table in fused_vs_cpu_test.cpp names the cases a reader should see; this finds the ones
//! nobody listed. FRAMEFUSE_GPU_RANDOM_CASES sets how many (default 300; the memcheck lane runs
//! fewer); a failure prints the case's seed and configuration, and the same seed replays it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pipeline/error.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "pipeline/fused/fused_preprocess.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace framefuse::test {
namespace {

//! One drawn configuration and the text that describes it.
struct RandomCase {
  ops::PixelFormat format{};
  int32_t width = 0, height = 0;
  ops::ColorMatrix matrix{};
  ops::ColorRange range{};
  ColorSpec color;
  ops::ChromaLocation location{};
  int batch = 1;
  int rows_per_thread = 0;
  std::vector<OutputSpec> outputs;
  std::string text;
};

class Draw {
 public:
  explicit Draw(uint32_t seed) : rng_(seed) {}
  int32_t in(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }
  float real(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T>
  T pick(std::initializer_list<T> options) {
    return options.begin()[in(0, static_cast<int32_t>(options.size()) - 1)];
  }

 private:
  std::mt19937 rng_;
};

RectSpec draw_crop(Draw& d, int32_t width, int32_t height, std::ostream& text) {
  RectSpec r;
  if (d.chance(0.4)) return r;   // the whole frame
  r.fractional = d.chance(0.5);
  if (r.fractional) {
    r.x = d.real(0.f, 0.8f);
    r.y = d.real(0.f, 0.8f);
    r.w = d.real(0.05f, 1.f - float(r.x));
    r.h = d.real(0.05f, 1.f - float(r.y));
  } else {
    r.x = d.in(0, width - 2);
    r.y = d.in(0, height - 2);
    r.w = d.in(1, width - int32_t(r.x));
    r.h = d.in(1, height - int32_t(r.y));
  }
  text << " crop " << (r.fractional ? "frac " : "px ") << r.x << "," << r.y << " " << r.w << "x" << r.h;
  return r;
}

OutputSpec draw_output(Draw& d, int k, int32_t width, int32_t height, std::ostream& text) {
  OutputSpec s;
  s.name = "o" + std::to_string(k);
  text << "\n  " << s.name << ":";
  s.crop = draw_crop(d, width, height, text);
  const int resize = d.in(0, 9);
  if (resize == 0) {
    text << " no resize";
  } else if (resize <= 2) {
    s.resize.shorter_side = d.in(4, 320);
    text << " shorter side " << s.resize.shorter_side;
    if (d.chance(0.6)) {
      s.center_crop = std::array<int32_t, 2>{d.in(1, s.resize.shorter_side), d.in(1, s.resize.shorter_side)};
      text << " center crop " << (*s.center_crop)[0] << "x" << (*s.center_crop)[1];
    }
  } else {
    s.resize.width = d.chance(0.1) ? d.in(1, 4) : d.in(1, 640);
    s.resize.height = d.chance(0.1) ? d.in(1, 4) : d.in(1, 480);
    s.aspect = d.pick({AspectMode::Stretch, AspectMode::Letterbox, AspectMode::CenterCropFill});
    text << " resize " << s.resize.width << "x" << s.resize.height << " aspect " << int(s.aspect);
  }
  s.interp = d.pick({ops::Interp::Nearest, ops::Interp::Linear, ops::Interp::Area});
  s.pad_value = {float(d.in(0, 255)), float(d.in(0, 255)), float(d.in(0, 255))};
  s.channels = d.pick({ChannelOrder::Rgb, ChannelOrder::Bgr, ChannelOrder::Gray});
  s.layout = d.pick({ops::Layout::Chw, ops::Layout::Hwc});
  s.dtype = d.pick({ops::DType::F32, ops::DType::F16, ops::DType::U8});
  if (s.dtype == ops::DType::U8) {
    // About pixel units (u8 of 0..1 would be all 0 or 1), but not exactly 1: there an even blend of
    // integer samples (area upscales, 1:1 taps) lands on .5 exactly, and the GPU's contracted
    // multiply-adds round it to the other side about as often as not; fused_vs_cpu_test covers
    // scale 1 within matches_cpu's allowance.
    s.scale = d.real(0.8f, 1.2f);
  } else if (d.chance(0.7)) {
    s.mean = {d.real(0.f, 1.f), d.real(0.f, 1.f), d.real(0.f, 1.f)};
    s.std = {d.real(0.1f, 2.f), d.real(0.1f, 2.f), d.real(0.1f, 2.f)};
  }
  text << " scale " << s.scale << " mean " << s.mean[0] << "," << s.mean[1] << "," << s.mean[2] << " std " << s.std[0]
       << "," << s.std[1] << "," << s.std[2] << " interp " << int(s.interp) << " channels " << int(s.channels) << " layout " << int(s.layout) << " dtype "
       << int(s.dtype) << " pad " << s.pad_value[0] << "," << s.pad_value[1] << "," << s.pad_value[2];
  return s;
}

RandomCase draw_case(uint32_t seed) {
  Draw d(seed);
  RandomCase c;
  std::ostringstream text;
  c.format = d.pick({ops::PixelFormat::Nv12, ops::PixelFormat::P010, ops::PixelFormat::Yuv420p,
                     ops::PixelFormat::Rgb24, ops::PixelFormat::Bgr24, ops::PixelFormat::Yuv420p10,
                     ops::PixelFormat::Yuv422p});
  c.width = d.chance(0.1) ? d.in(2, 8) : d.in(2, 720);
  c.height = d.chance(0.1) ? d.in(2, 8) : d.in(2, 540);
  c.matrix = d.pick({ops::ColorMatrix::Bt601, ops::ColorMatrix::Bt709});
  c.range = d.pick({ops::ColorRange::Limited, ops::ColorRange::Full});
  c.color.chroma_upsample = d.pick({ops::ChromaUpsample::Nearest, ops::ChromaUpsample::Linear});
  c.location = d.pick({ops::ChromaLocation::Left, ops::ChromaLocation::Center, ops::ChromaLocation::TopLeft});
  c.batch = d.pick({1, 1, 2, 3, 5});
  c.rows_per_thread = d.pick({0, 1, 2, 4});
  text << "seed " << seed << ": format " << int(c.format) << " " << c.width << "x" << c.height << " matrix "
       << int(c.matrix) << " range " << int(c.range) << " upsample " << int(c.color.chroma_upsample) << " location "
       << int(c.location) << " batch " << c.batch << " rows/thread " << c.rows_per_thread;
  const int outputs = d.in(1, 4);
  for (int k = 0; k < outputs; ++k) c.outputs.push_back(draw_output(d, k, c.width, c.height, text));
  c.text = text.str();
  return c;
}

int random_cases() {
  const char* env = std::getenv("FRAMEFUSE_GPU_RANDOM_CASES");
  return env ? std::atoi(env) : 300;
}

//! Runs one case; false (and no failure) when the planner rejects it, as a config load would.
bool check_case(const RandomCase& c, uint32_t seed) {
  SCOPED_TRACE(c.text);
  std::vector<HostImage> images;
  std::vector<ops::ImageView> views;
  for (int b = 0; b < c.batch; ++b) {
    images.push_back(random_image(c.format, c.width, c.height, seed * 31u + uint32_t(b), 1 + b % 4));
    views.push_back(images.back().view());
  }
  FrameInfo info = frame_info(images[0], c.matrix, c.range);
  info.chroma_location = c.location;
  const ops::ColorParams color = make_color_params(c.color, info);
  std::vector<OutputPlan> plans;
  try {
    for (const auto& o : c.outputs) plans.push_back(make_output_plan(o, info, o.name));
  } catch (const ConfigError&) {
    return false;
  }
  auto ref = poisoned_outputs(plans, c.batch);
  CpuExecutor cpu(0);
  cpu.setup(info, color, plans, c.batch);
  cpu.process(views, pointers(ref));

  auto got = poisoned_outputs(plans, c.batch);
  CudaExecutor gpu(0);
  gpu.setup(info, color, plans, c.batch);
  gpu.process(views, pointers(got));
  for (size_t k = 0; k < plans.size(); ++k)
    EXPECT_TRUE(matches_cpu(got[k], ref[k], c.outputs[k].dtype)) << "executor, output " << plans[k].name;

  const DeviceBatch dev = upload_batch(images, color);
  DeviceOutputs outs(plans, c.batch);
  outs.poison(0xFF);
  const cuda::Stream stream = cuda::make_stream();
  FusedPreprocess fused;
  fused.setup(info, plans, c.batch, c.rows_per_thread);
  fused.set_batch(dev.slots, outs.ptrs());
  fused.run(stream);
  cuda::check(cudaStreamSynchronize(stream), "fused run");
  const auto direct = outs.download();
  for (size_t k = 0; k < plans.size(); ++k)
    EXPECT_TRUE(matches_cpu(direct[k], ref[k], c.outputs[k].dtype))
        << "fused, " << fused.rows_per_thread() << " rows/thread, output " << plans[k].name;
  return true;
}

TEST(FusedVsCpuRandom, SeededConfigurationsMatchTheCpuExecutor) {
  const int n = random_cases();
  ASSERT_GT(n, 0) << "FRAMEFUSE_GPU_RANDOM_CASES";
  int planned = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t seed = 20261201u + uint32_t(i);
    planned += check_case(draw_case(seed), seed) ? 1 : 0;
    if (::testing::Test::HasFailure()) return;   // the first failing case, not a wall of them
  }
  std::printf("  %d of %d random configurations planned and matched (the rest rejected by the planner)\n",
              planned, n);
  // Most draws are valid configurations; a planner that rejected them all would test nothing.
  EXPECT_GE(planned, n * 3 / 4);
}

}  // namespace
}  // namespace framefuse::test
