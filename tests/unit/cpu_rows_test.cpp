//! The CpuExecutor evaluates outputs row by row (tap tables, a row cache, separable passes); every
//! element it writes must be bit-identical, f32 included, to ops::Chain::pixel run pixel by pixel
//! over the same frame. Covered: every format, chroma mode and interpolation, integer ratios (zero
//! weights dropped), strong and mild down- and upscales, windows that pad, outputs taller than one
//! band, batches, several threads, and control (auto_gain, roi_follow) moving windows and gains;
//! the shuffle gathers and the integer-factor box path with both chroma parities, their scalar
//! fallbacks (rows ending inside a window) and single weight-1 taps; the box path's fused rows and
//! the HWC u8 store.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "pipeline/control/control_engine.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/ops/dispatch.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

using ops::PixelFormat;

//! The ctest entries cpu_rows_test_<level> cap the executor's SIMD paths at FRAMEFUSE_CPU_SIMD;
//! the cap only lowers the level, so on a CPU without the requested one they would test a lower
//! path under its name: every test skips there instead.
class RequestedSimdLevel : public ::testing::Environment {
 public:
  void SetUp() override {
#if defined(__x86_64__) && defined(__GNUC__)
    const char* env = std::getenv("FRAMEFUSE_CPU_SIMD");
    const std::string level = env ? env : "";
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if ((level == "avx2" && !avx2) || (level == "avx512" && !avx512))
      GTEST_SKIP() << "FRAMEFUSE_CPU_SIMD=" << level << ": this CPU lacks it";
#endif
  }
};
const auto* const kRequestedSimdLevel = ::testing::AddGlobalTestEnvironment(new RequestedSimdLevel);

struct Case {
  PixelFormat format;
  int fw, fh;
  ops::ChromaUpsample upsample;
  ops::ChromaLocation location;
  std::vector<OutputSpec> outputs;
  int batch, threads;
  uint32_t seed;
};

std::string describe(const Case& c) {
  std::string s = std::to_string(c.fw) + "x" + std::to_string(c.fh) + " format " + std::to_string(int(c.format)) +
                  " upsample " + std::to_string(int(c.upsample)) + " location " + std::to_string(int(c.location)) +
                  " batch " + std::to_string(c.batch) + " threads " + std::to_string(c.threads) + " seed " +
                  std::to_string(c.seed);
  for (const auto& o : c.outputs) {
    s += "; " + o.name + ": crop " + std::to_string(o.crop.x) + "," + std::to_string(o.crop.y) + "," +
         std::to_string(o.crop.w) + "," + std::to_string(o.crop.h) + (o.crop.fractional ? "f" : "") + " resize " +
         std::to_string(o.resize.width) + "x" + std::to_string(o.resize.height) + "/" +
         std::to_string(o.resize.shorter_side) + " aspect " + std::to_string(int(o.aspect)) + " interp " +
         std::to_string(int(o.interp)) + " channels " + std::to_string(int(o.channels)) + " layout " +
         std::to_string(int(o.layout)) + " dtype " + std::to_string(int(o.dtype));
  }
  return s;
}

//! Chain::pixel over every element of output `p` of frame b, into `out` (all frames' tensors).
void reference(const test::HostImage& img, const ops::ColorParams& color, ops::Chain::Params p, int b,
               std::vector<std::byte>& out) {
  p.store.data = out.data();
  ops::dispatch_format(img.format, [&](auto tag) {
    const ops::FrameReader<decltype(tag)::value> src{img.view(), color};
    for (int y = 0; y < p.store.height; ++y)
      for (int x = 0; x < p.store.width; ++x) ops::Chain::pixel(src, p, b, x, y);
  });
}

//! Runs the executor into poisoned outputs and compares each byte with Chain::pixel's.
void expect_rows_equal_pixels(const Case& c) {
  SCOPED_TRACE(describe(c));
  std::vector<test::HostImage> frames;
  std::vector<ops::ImageView> views;
  for (int b = 0; b < c.batch; ++b)
    frames.push_back(
        test::random_image(c.format, c.fw, c.fh, c.seed * 131u + b, ops::sample_bytes(c.format) == 2 ? 4 : 3));
  for (const auto& f : frames) views.push_back(f.view());
  FrameInfo fi = test::frame_info(frames[0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  fi.chroma_location = c.location;
  ColorSpec cs;
  cs.chroma_upsample = c.upsample;
  const ops::ColorParams color = make_color_params(cs, fi);
  std::vector<OutputPlan> plans;
  for (const auto& o : c.outputs) plans.push_back(make_output_plan(o, fi, "output '" + o.name + "'"));

  CpuExecutor exec(c.threads);
  exec.setup(fi, color, plans, c.batch);
  auto got = test::poisoned_outputs(plans, c.batch);
  exec.process(views, test::pointers(got));

  for (size_t k = 0; k < plans.size(); ++k) {
    std::vector<std::byte> want(plans[k].bytes_per_frame * c.batch, std::byte{0x5A});
    for (int b = 0; b < c.batch; ++b) {
      reference(frames[b], color, plans[k].params, b, want);
    }
    const auto mismatch = std::mismatch(got[k].begin(), got[k].end(), want.begin());
    EXPECT_TRUE(mismatch.first == got[k].end())
        << "output '" << plans[k].name << "': first difference at byte " << (mismatch.first - got[k].begin())
        << " of " << got[k].size();
  }
}

OutputSpec output(const char* name, int w, int h, ops::Interp interp, ops::DType dtype, ops::Layout layout,
                  ChannelOrder channels = ChannelOrder::Rgb, AspectMode aspect = AspectMode::Stretch) {
  OutputSpec s;
  s.name = name;
  s.resize = {w, h, 0};
  s.interp = interp;
  s.dtype = dtype;
  s.layout = layout;
  s.channels = channels;
  s.aspect = aspect;
  s.mean = {0.485f, 0.456f, 0.406f};
  s.std = {0.229f, 0.224f, 0.225f};
  return s;
}

using ops::ChromaLocation;
using ops::ChromaUpsample;
using ops::DType;
using ops::Interp;
using ops::Layout;

TEST(CpuRows, TableOfRatiosAndStores) {
  const std::vector<Case> cases = {
      // integer ratios: every other linear tap has weight 0; area boxes of exactly 3x3
      {PixelFormat::Nv12, 192, 108, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("lin3", 64, 36, Interp::Linear, DType::F32, Layout::Chw),
        output("box3", 64, 36, Interp::Area, DType::U8, Layout::Hwc),
        output("near3", 64, 36, Interp::Nearest, DType::F16, Layout::Chw, ChannelOrder::Bgr)},
       2, 2, 1u},
      // non-integer down- and upscales, letterbox and fill windows, taller than one band
      {PixelFormat::Yuv420p, 161, 97, ChromaUpsample::Linear, ChromaLocation::Center,
       {output("down", 70, 45, Interp::Linear, DType::F16, Layout::Hwc, ChannelOrder::Gray, AspectMode::Letterbox),
        output("up", 250, 130, Interp::Linear, DType::F32, Layout::Hwc, ChannelOrder::Rgb, AspectMode::CenterCropFill),
        output("areaup", 300, 41, Interp::Area, DType::F32, Layout::Chw),
        output("box", 37, 29, Interp::Area, DType::F32, Layout::Chw, ChannelOrder::Bgr, AspectMode::Letterbox)},
       1, 3, 2u},
      {PixelFormat::P010, 130, 74, ChromaUpsample::Linear, ChromaLocation::TopLeft,
       {output("lin", 91, 67, Interp::Linear, DType::U8, Layout::Chw, ChannelOrder::Gray),
        output("near", 333, 20, Interp::Nearest, DType::F32, Layout::Hwc, ChannelOrder::Rgb, AspectMode::Letterbox)},
       2, 1, 3u},
      {PixelFormat::Rgb24, 120, 90, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("box7", 17, 13, Interp::Area, DType::F32, Layout::Hwc),
        output("lin", 120, 90, Interp::Linear, DType::F32, Layout::Chw)},
       1, 2, 4u},
      {PixelFormat::Bgr24, 59, 201, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("tall", 40, 150, Interp::Linear, DType::F16, Layout::Chw, ChannelOrder::Bgr, AspectMode::Letterbox)},
       3, 2, 5u},
      {PixelFormat::Yuv420p10, 97, 61, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("box", 31, 20, Interp::Area, DType::F32, Layout::Chw),
        output("lin", 150, 90, Interp::Linear, DType::U8, Layout::Hwc, ChannelOrder::Bgr, AspectMode::Letterbox)},
       2, 2, 6u},
      // 4:2:2 (MJPEG cameras): the picked and box paths with a chroma row per luma row, and linear chroma
      {PixelFormat::Yuv422p, 192, 108, ChromaUpsample::Nearest, ChromaLocation::Center,
       {output("box3", 64, 36, Interp::Area, DType::U8, Layout::Hwc),
        output("lin", 100, 57, Interp::Linear, DType::F32, Layout::Chw, ChannelOrder::Bgr, AspectMode::Letterbox),
        output("near", 31, 77, Interp::Nearest, DType::F16, Layout::Hwc)},
       2, 2, 7u},
      {PixelFormat::Yuv422p, 101, 67, ChromaUpsample::Linear, ChromaLocation::Center,
       {output("down", 45, 30, Interp::Linear, DType::F32, Layout::Chw, ChannelOrder::Gray),
        output("areaup", 203, 70, Interp::Area, DType::U8, Layout::Hwc, ChannelOrder::Rgb, AspectMode::CenterCropFill)},
       1, 2, 8u},
  };
  for (const Case& c : cases) expect_rows_equal_pixels(c);
}

TEST(CpuRows, SeededRandomPipelines) {
  std::mt19937 rng(77);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  for (uint32_t i = 0; i < 60; ++i) {
    Case c{};
    c.format = static_cast<PixelFormat>(pick(ops::kPixelFormats));
    c.fw = 8 + pick(150);
    c.fh = 8 + pick(120);
    c.upsample = static_cast<ChromaUpsample>(pick(2));
    c.location = static_cast<ChromaLocation>(pick(3));
    c.batch = 1 + pick(2);
    c.threads = 1 + pick(3);
    c.seed = 100u + i;
    for (int k = 0, n = 1 + pick(3); k < n; ++k) {
      OutputSpec s = output(("o" + std::to_string(k)).c_str(), 1 + pick(3 * c.fw / 2), 1 + pick(3 * c.fh / 2),
                            static_cast<Interp>(pick(3)), static_cast<DType>(pick(3)), static_cast<Layout>(pick(2)),
                            static_cast<ChannelOrder>(pick(3)), static_cast<AspectMode>(pick(3)));
      if (pick(2)) {
        const int x = pick(c.fw / 2), y = pick(c.fh / 2);
        s.crop = {double(x), double(y), double(1 + pick(c.fw - x)), double(1 + pick(c.fh - y)), false};
      }
      if (pick(4) == 0) s.center_crop = std::array<int32_t, 2>{1 + pick(60), 1 + pick(60)};
      s.pad_value = {float(pick(256)), float(pick(256)), float(pick(256))};
      c.outputs.push_back(s);
    }
    expect_rows_equal_pixels(c);
    if (HasFailure()) break;   // the first failing case says enough
  }
}

// 8-bit YUV with nearest chroma gathers samples by byte shuffles; INTER_AREA at an integer factor
// (2x .. 8x) takes the box path (conversion and box sums in one pass, chroma terms shared by the
// taps on one chroma column); single taps of weight 1 skip the resample and blend passes. Windows
// near the right edge fall back to scalar reads; crops at odd x flip the chroma parity.
TEST(CpuRows, ShuffleGathersAndBoxPathsMatchPixels) {
  const auto crop = [](OutputSpec s, int x, int y, int w, int h) {
    s.crop = {double(x), double(y), double(w), double(h), false};
    return s;
  };
  const std::vector<Case> cases = {
      // 6x6 boxes over the whole frame (the thumbnail case), 3x strided linear, 2x nearest
      {PixelFormat::Nv12, 384, 96, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("box6", 64, 16, Interp::Area, DType::U8, Layout::Hwc),
        output("lin3", 128, 32, Interp::Linear, DType::F16, Layout::Chw),
        output("near2", 192, 48, Interp::Nearest, DType::F32, Layout::Chw, ChannelOrder::Gray)},
       1, 2, 11u},
      // odd frame width, odd crop x (chroma parity 1), odd factors 3, 5 and 7, box on x only
      {PixelFormat::Nv12, 451, 67, ChromaUpsample::Nearest, ChromaLocation::Left,
       {crop(output("box5", 41, 13, Interp::Area, DType::F32, Layout::Chw), 37, 2, 205, 65),
        crop(output("box7x", 57, 20, Interp::Area, DType::F32, Layout::Hwc, ChannelOrder::Bgr), 1, 0, 399, 67),
        crop(output("box3", 50, 21, Interp::Area, DType::F16, Layout::Hwc), 3, 1, 150, 63)},
       2, 3, 12u},
      // planar YUV, even factors 2, 4 and 8 at odd and even crops, letterbox and centre-crop windows
      {PixelFormat::Yuv420p, 333, 121, ChromaUpsample::Nearest, ChromaLocation::Left,
       {crop(output("box2", 80, 50, Interp::Area, DType::F32, Layout::Chw, ChannelOrder::Rgb, AspectMode::Letterbox),
             9, 5, 160, 100),
        crop(output("box4", 70, 20, Interp::Area, DType::U8, Layout::Chw, ChannelOrder::Gray,
                    AspectMode::CenterCropFill),
             13, 0, 320, 120),
        crop(output("box8", 41, 15, Interp::Area, DType::F32, Layout::Hwc), 4, 1, 328, 120),
        output("lin4", 83, 30, Interp::Linear, DType::F32, Layout::Chw)},
       1, 2, 13u},
      // 9x boxes (wider than the box path: tap tables), and the same outputs with linear chroma
      {PixelFormat::Nv12, 279, 45, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("box9", 31, 5, Interp::Area, DType::F32, Layout::Chw),
        crop(output("box6", 45, 7, Interp::Area, DType::F32, Layout::Chw), 1, 1, 270, 42)},
       1, 1, 14u},
      {PixelFormat::Nv12, 279, 45, ChromaUpsample::Linear, ChromaLocation::Center,
       {crop(output("box6", 45, 7, Interp::Area, DType::F32, Layout::Chw), 1, 1, 270, 42)}, 1, 1, 15u},
      // rows narrower than a shuffle window: every block reads scalar
      {PixelFormat::Nv12, 30, 14, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("box2", 15, 7, Interp::Area, DType::F32, Layout::Chw),
        crop(output("box3", 9, 4, Interp::Area, DType::F32, Layout::Hwc), 1, 1, 27, 12),
        output("lin3", 10, 5, Interp::Linear, DType::F32, Layout::Chw)},
       1, 1, 16u},
      {PixelFormat::Yuv420p, 23, 9, ChromaUpsample::Nearest, ChromaLocation::Left,
       {crop(output("box2", 11, 4, Interp::Area, DType::F32, Layout::Chw), 1, 0, 22, 8),
        output("lin3", 7, 3, Interp::Linear, DType::F16, Layout::Hwc)},
       1, 1, 17u},
  };
  for (const Case& c : cases) expect_rows_equal_pixels(c);
}

// The box path sums an output row's source rows in registers (chroma terms once per chroma row)
// where no source row serves two output rows; else (rows shared, or more than the fused pass holds)
// it keeps the row cache. Planar rows into HWC u8 have a permute store (RGB and BGR, any width);
// bands of all outputs run in order of the source rows they read.
TEST(CpuRows, FusedBoxRowsAndStoresMatchPixels) {
  const auto crop = [](OutputSpec s, int x, int y, int w, int h) {
    s.crop = {double(x), double(y), double(w), double(h), false};
    return s;
  };
  const std::vector<Case> cases = {
      // 6x across with 10/3 rows down (rows shared by neighbours), 4x across with 20 rows down, a
      // thumbnail-like 6x6 box in BGR HWC u8 of odd width, letterboxed, and 2x nearest into HWC u8
      {PixelFormat::Nv12, 384, 120, ChromaUpsample::Nearest, ChromaLocation::Left,
       {output("box6x3.3", 64, 36, Interp::Area, DType::F32, Layout::Chw),
        output("box4x20", 96, 6, Interp::Area, DType::F16, Layout::Hwc),
        crop(output("thumb37", 37, 20, Interp::Area, DType::U8, Layout::Hwc, ChannelOrder::Bgr, AspectMode::Letterbox),
             3, 1, 222, 60),
        output("near2", 192, 60, Interp::Nearest, DType::U8, Layout::Hwc)},
       1, 1, 21u},
      // odd crop rows (a box's first row on the second luma row of a chroma row), 5x5 and 3x3 boxes,
      // three blocks of 8 outputs (the last one summed row by row), planar YUV, two threads
      {PixelFormat::Yuv420p, 250, 91, ChromaUpsample::Nearest, ChromaLocation::Left,
       {crop(output("box5", 20, 17, Interp::Area, DType::F32, Layout::Chw, ChannelOrder::Bgr), 5, 3, 100, 85),
        crop(output("box3", 77, 29, Interp::Area, DType::U8, Layout::Hwc), 1, 1, 231, 87),
        output("lin", 100, 40, Interp::Linear, DType::F16, Layout::Chw, ChannelOrder::Rgb, AspectMode::Letterbox)},
       2, 2, 22u},
  };
  for (const Case& c : cases) expect_rows_equal_pixels(c);
}

TEST(CpuRows, SeededIntegerRatios) {
  std::mt19937 rng(91);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  for (uint32_t i = 0; i < 40; ++i) {
    Case c{};
    c.format = std::array{PixelFormat::Nv12, PixelFormat::Yuv420p, PixelFormat::Yuv422p}[size_t(pick(3))];
    c.fw = 40 + pick(400);
    c.fh = 16 + pick(60);
    c.upsample = ChromaUpsample::Nearest;
    c.location = ChromaLocation::Left;
    c.batch = 1;
    c.threads = 1 + pick(2);
    c.seed = 300u + i;
    for (int k = 0, n = 1 + pick(2); k < n; ++k) {
      const int fx = 1 + pick(9), fy = 1 + pick(5);   // 1x .. 9x across, 1x .. 5x down
      const int x = pick(c.fw / 4), y = pick(c.fh / 4);
      const int ow = std::max(1, (c.fw - x) / fx - pick(3)), oh = std::max(1, (c.fh - y) / fy);
      OutputSpec s = output(("o" + std::to_string(k)).c_str(), ow, oh, static_cast<Interp>(pick(3)),
                            static_cast<DType>(pick(3)), static_cast<Layout>(pick(2)),
                            static_cast<ChannelOrder>(pick(3)), static_cast<AspectMode>(pick(3)));
      s.crop = {double(x), double(y), double(std::min(c.fw - x, ow * fx)), double(std::min(c.fh - y, oh * fy)), false};
      c.outputs.push_back(s);
    }
    expect_rows_equal_pixels(c);
    if (HasFailure()) break;   // the first failing case says enough
  }
}

//! Runs `spec` (control on) over 12 frames of a bright square moving across a textured NV12 frame:
//! roi_follow moves output "win", auto_gain scales every output. Each frame's outputs must equal
//! Chain::pixel on the planned parameters with the record's window and gain applied (the row tables
//! are crop-relative, built once at setup).
void expect_controlled_rows_equal_pixels(const PipelineSpec& spec, bool odd_x_required) {
  constexpr int kW = 320, kH = 180;
  const test::HostImage background = test::random_image(PixelFormat::Nv12, kW, kH, 41u);
  const FrameInfo fi = test::frame_info(background);
  const ops::ColorParams color = make_color_params(spec.color, fi);
  const std::vector<OutputPlan> plans = make_output_plans(spec, fi);
  CpuExecutor exec(2);
  exec.setup(fi, color, plans, 1);
  exec.setup_control(control::make_control_params(spec.control, fi, plans, 25.0, "pipeline 'rows'"));
  auto got = test::poisoned_outputs(plans, 1);
  const auto ptrs = test::pointers(got);
  bool moved = false, gained = false, odd = false;
  for (int n = 0; n < 12; ++n) {
    test::HostImage img = background;
    const int cx = 150 + 8 * n, cy = 90 + static_cast<int>(std::lround(30 * std::sin(n / 3.0)));
    for (int y = cy - 10; y < cy + 10; ++y) std::fill_n(img.planes[0].begin() + y * img.pitch[0] + cx - 10, 20, 250);
    const ops::ImageView view = img.view();
    exec.process({&view, 1}, ptrs);
    const auto record = exec.control_record();
    ASSERT_TRUE(record.has_value());
    for (size_t k = 0; k < plans.size(); ++k) {
      ops::Chain::Params p = plans[k].params;
      const auto& o = record->out[k];
      moved = moved || o.x != p.resize.x0 || o.y != p.resize.y0;
      odd = odd || (o.x & 1) != 0;
      gained = gained || o.gain != 1.f;
      p.resize.x0 = o.x;
      p.resize.y0 = o.y;
      for (float& m : p.norm.mul) m *= o.gain;
      std::vector<std::byte> want(plans[k].bytes_per_frame, std::byte{0x5A});
      reference(img, color, p, 0, want);
      EXPECT_TRUE(got[k] == want) << "frame " << n << " output '" << plans[k].name << "' window " << o.x << ","
                                  << o.y << " gain " << o.gain;
    }
  }
  EXPECT_TRUE(moved) << "roi_follow never moved the window: the test checked nothing it was meant to";
  EXPECT_TRUE(odd || !odd_x_required) << "the window never sat at an odd x: the test checked nothing it was meant to";
  EXPECT_TRUE(gained) << "auto_gain never changed a gain: the test checked nothing it was meant to";
}

PipelineSpec controlled_spec(const OutputSpec& win) {
  PipelineSpec spec;
  spec.name = "rows";
  spec.outputs = {win, output("all", 100, 60, Interp::Area, DType::F16, Layout::Hwc, ChannelOrder::Bgr)};
  spec.control.enabled = true;
  spec.control.auto_gain.enabled = true;
  spec.control.auto_gain.target = 0.7;
  spec.control.roi_follow.enabled = true;
  spec.control.roi_follow.output = "win";
  spec.control.roi_follow.smoothing = 0.5;
  spec.control.roi_follow.dead_band = 0.01;
  return spec;
}

TEST(CpuRows, ControlledBoxAndGatherWindowsMatchPixels) {
  // A box-path window (6x across, 4x down) and a 3x strided linear one, moved to odd and even x:
  // the shuffle tables hold both chroma parities of the crop x.
  OutputSpec box = output("win", 16, 16, Interp::Area, DType::F32, Layout::Chw);
  box.crop = {128, 58, 96, 64, false};
  expect_controlled_rows_equal_pixels(controlled_spec(box), true);
  OutputSpec lin = output("win", 32, 20, Interp::Linear, DType::F32, Layout::Hwc);
  lin.crop = {128, 58, 96, 60, false};
  expect_controlled_rows_equal_pixels(controlled_spec(lin), true);
}

TEST(CpuRows, ControlledWindowsAndGainsMatchPixels) {
  OutputSpec win = output("win", 40, 30, Interp::Linear, DType::F32, Layout::Chw);
  win.crop = {128, 58, 64, 64, false};
  expect_controlled_rows_equal_pixels(controlled_spec(win), false);
}

}  // namespace
}  // namespace framefuse
