//! Control (pipeline/control/): statistics on the luma thumbnail, the delay ring, auto_gain,
//! roi_follow, health, and their run inside the CPU executor. Clips are synthetic and seeded;
//! expected values come from direct computation on the frames, the thumbnails or by hand, never
//! from the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "pipeline/control/control_engine.hpp"
#include "pipeline/control/fused_control.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/runtime/pipeline_stats.hpp"
#include "tests/support/control_fixtures.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

using control::ControlEngine;
using control::ControlRecord;
using control::Health;

constexpr int kW = test::kControlW, kH = test::kControlH;
constexpr double kFps = test::kControlFps;
using test::gray_output;
using test::pixels;
using test::window_output;
const std::string kContext = "pipeline 'test'";

// ---------------------------------------------------------------------------------------------
// Clips and specs

//! An RGB frame whose bytes are uniform in [lo, hi], from `seed`.
test::HostImage textured(uint32_t seed, int lo, int hi) {
  test::HostImage img = test::random_image(ops::PixelFormat::Rgb24, kW, kH, seed);
  for (auto& b : img.planes[0]) b = static_cast<uint8_t>(lo + b % (hi - lo + 1));
  return img;
}

void fill_square(test::HostImage& img, int cx, int cy, int size, uint8_t v) {
  for (int y = std::max(0, cy - size / 2); y < std::min(kH, cy - size / 2 + size); ++y)
    for (int x = std::max(0, cx - size / 2); x < std::min(kW, cx - size / 2 + size); ++x)
      for (int c = 0; c < 3; ++c) img.planes[0][size_t(y) * img.pitch[0] + 3 * x + c] = v;
}

//! Mean of 0.299 R + 0.587 G + 0.114 B over a rectangle of the frame, 0..1.
double mean_luma(const test::HostImage& img, int x0, int y0, int w, int h) {
  double sum = 0;
  for (int y = y0; y < y0 + h; ++y) {
    const uint8_t* row = img.planes[0].data() + size_t(y) * img.pitch[0];
    for (int x = x0; x < x0 + w; ++x) sum += 0.299 * row[3 * x] + 0.587 * row[3 * x + 1] + 0.114 * row[3 * x + 2];
  }
  return sum / (255.0 * w * h);
}

//! A CpuExecutor with the spec's outputs and control, fed one frame at a time.
class Harness {
 public:
  explicit Harness(const PipelineSpec& spec, const FrameInfo& frame = test::control_frame_info()) : exec_(2) {
    plans_ = make_output_plans(spec, frame);
    exec_.setup(frame, make_color_params(spec.color, frame), plans_, 1);
    exec_.setup_control(control::make_control_params(spec.control, frame, plans_, kFps, kContext));
    bufs_ = test::poisoned_outputs(plans_, 1);
    ptrs_ = test::pointers(bufs_);
  }

  ControlRecord step(const test::HostImage& img) {
    const ops::ImageView v = img.view();
    exec_.process({&v, 1}, ptrs_);
    const auto r = exec_.control_record();
    EXPECT_TRUE(r.has_value());
    return r.value_or(ControlRecord{});
  }

  std::vector<double> output(size_t k) const { return test::to_double(bufs_[k], plans_[k].params.store.dtype); }
  double output_mean(size_t k) const {
    const auto v = output(k);
    double s = 0;
    for (const double x : v) s += x;
    return s / double(v.size());
  }
  const std::vector<std::byte>& bytes(size_t k) const { return bufs_[k]; }

 private:
  CpuExecutor exec_;
  std::vector<OutputPlan> plans_;
  std::vector<std::vector<std::byte>> bufs_;
  std::vector<std::byte*> ptrs_;
};

//! A ControlEngine planned for kW x kH frames, driven with thumbnails written by the test.
struct Rig {
  std::vector<OutputPlan> plans;
  ControlEngine engine;

  explicit Rig(const ControlSpec& spec, std::vector<OutputSpec> outputs = {gray_output("out")}) {
    const PipelineSpec p = test::control_pipeline("test", std::move(outputs), spec);
    plans = make_output_plans(p, test::control_frame_info());
    engine.setup(control::make_control_params(p.control, test::control_frame_info(), plans, kFps, kContext));
  }

  //! One iteration whose thumbnail is `fill`(x, y) (luma, quantised); returns the state the
  //! frame's outputs got.
  control::ControlState step(const std::function<float(int, int)>& fill) {
    const control::ControlState applied = engine.state();
    uint16_t* t = engine.thumbnail();
    for (int y = 0; y < control::kThumbH; ++y)
      for (int x = 0; x < control::kThumbW; ++x) t[y * control::kThumbW + x] = test::to_q(fill(x, y));
    engine.stats_step();
    return applied;
  }
  control::ControlState step_flat(float luma) {
    return step([luma](int, int) { return luma; });
  }
};

ControlSpec with_auto_gain(int32_t delay = 1) {
  ControlSpec c;
  c.delay_frames = delay;
  c.auto_gain.enabled = true;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Statistics

struct RegionCase {
  int32_t x, y, w, h;
  control::Region expected;   //!< by hand: edges * 128/320 and * 72/180 (= 0.4), rounded
};
constexpr RegionCase kRegions[] = {
    {0, 0, 320, 180, {0, 0, 128, 72}},      {160, 45, 160, 90, {64, 18, 128, 54}},
    {33, 10, 100, 50, {13, 4, 53, 24}},     {1, 1, 1, 1, {0, 0, 1, 1}},   // tiny: one pixel
    {319, 179, 1, 1, {127, 71, 128, 72}},   {3, 0, 4, 180, {1, 0, 3, 72}},
};

TEST(Stats, ThumbRegionRoundsEdgesAndIsNeverEmpty) {
  for (const auto& c : kRegions) {
    const control::Region r = control::thumb_region(c.x, c.y, c.w, c.h, kW, kH);
    EXPECT_EQ((std::array{r.x0, r.y0, r.x1, r.y1}),
              (std::array{c.expected.x0, c.expected.y0, c.expected.x1, c.expected.y1}))
        << c.x << "," << c.y << " " << c.w << "x" << c.h;
  }
}

//! Direct statistics of a region of two thumbnails, in double, from the documented definitions.
struct Direct {
  double mean = 0, var = 0, black = 0, white = 0, motion = 0, moving = 0, cx = 0, cy = 0;
  std::array<uint32_t, control::kHistBins> hist{};
};
Direct direct_stats(const std::vector<float>& cur, const std::vector<float>& prev, int x0, int y0, int x1, int y1) {
  Direct d;
  double n = 0, sum = 0, sq = 0, w = 0, wx = 0, wy = 0;
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) {
      const double v = std::clamp(double(cur[y * control::kThumbW + x]), 0.0, 1.0);
      const double p = std::clamp(double(prev[y * control::kThumbW + x]), 0.0, 1.0);
      n += 1;
      sum += v;
      sq += v * v;
      ++d.hist[std::min(63, int(std::floor(v * 64)))];
      d.black += v < 1.0 / 16;
      d.white += v >= 15.0 / 16;
      const double diff = std::abs(v - p);
      d.motion += diff;
      if (diff >= 2.0 / 255 - 1e-9) {
        d.moving += 1;
        w += diff;
        wx += diff * (x + 0.5) / control::kThumbW;
        wy += diff * (y + 0.5) / control::kThumbH;
      }
    }
  }
  d.mean = sum / n;
  d.var = sq / n - d.mean * d.mean;
  d.black /= n;
  d.white /= n;
  d.motion /= n;
  d.moving /= n;
  d.cx = w > 0 ? wx / w : 0.5 * (x0 + x1) / control::kThumbW;
  d.cy = w > 0 ? wy / w : 0.5 * (y0 + y1) / control::kThumbH;
  return d;
}

void expect_matches(const control::RegionStats& s, const Direct& d, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_NEAR(s.mean, d.mean, 1e-6);
  EXPECT_NEAR(s.variance, d.var, 1e-6);
  EXPECT_NEAR(s.black_fraction, d.black, 1e-7);
  EXPECT_NEAR(s.white_fraction, d.white, 1e-7);
  EXPECT_NEAR(s.motion, d.motion, 1e-6);
  EXPECT_NEAR(s.moving_fraction, d.moving, 1e-7);
  EXPECT_NEAR(s.centroid_x, d.cx, 1e-5);
  EXPECT_NEAR(s.centroid_y, d.cy, 1e-5);
  for (int b = 0; b < control::kHistBins; ++b) EXPECT_EQ(s.hist[b], d.hist[b]) << "bin " << b;
}

TEST(Stats, MatchDirectComputationOnTheThumbnail) {
  // Two outputs: the whole frame and the window x 160..320, y 45..135 (thumbnail 64..128, 18..54).
  Rig rig(ControlSpec{}, {gray_output("all"), gray_output("right", pixels(160, 45, 160, 90))});
  // Thumbnails on the fixed-point grid (k / 65535), so bins are unambiguous; some values outside
  // 0..1 (clamped), a dark corner and a bright patch so black/white/moving are all non-trivial.
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> k(0, 65535);
  const auto make = [&](bool moved) {
    std::vector<float> t(control::kThumbPixels);
    for (int y = 0; y < control::kThumbH; ++y) {
      for (int x = 0; x < control::kThumbW; ++x) {
        float v = float(k(rng)) / 65535.f;
        if (x < 20 && y < 20) v *= 0.05f;
        if (x > 100 && y > 40) v = 0.95f + 0.05f * v;
        v = std::round(v * 65535.f) / 65535.f;   // back on the grid
        if (moved && x >= 70 && x < 90 && y >= 30 && y < 40) v = 1.2f;
        if (x == 5 && y == 5) v = -0.3f;
        t[y * control::kThumbW + x] = v;
      }
    }
    return t;
  };
  const std::vector<float> first = make(false), second = make(true);
  for (const auto* t : {&first, &second}) rig.step([&](int x, int y) { return (*t)[y * control::kThumbW + x]; });
  const auto slots = rig.engine.slots();
  const control::FrameStats& s0 = slots[0].stats;
  const control::FrameStats& s1 = slots[1].stats;
  ASSERT_EQ(slots[0].iteration, 0u);
  ASSERT_EQ(slots[1].iteration, 1u);
  ASSERT_EQ(s1.num_regions, 3);
  // Frame 0 has no previous thumbnail: no motion, centroid at the region's centre.
  expect_matches(s0.region[0], direct_stats(first, first, 0, 0, 128, 72), "frame 0 whole");
  expect_matches(s1.region[0], direct_stats(second, first, 0, 0, 128, 72), "frame 1 whole");
  expect_matches(s1.region[1], direct_stats(second, first, 0, 0, 128, 72), "frame 1 output 'all'");
  expect_matches(s1.region[2], direct_stats(second, first, 64, 18, 128, 54), "frame 1 output 'right'");
  EXPECT_GT(s1.region[0].moving_fraction, 0.01f);
  EXPECT_GT(s1.region[0].black_fraction, 0.01f);
  EXPECT_GT(s1.region[2].white_fraction, 0.1f);
}

TEST(Stats, WarpTermSumsInAnyOrderEqualTheSequentialSums) {
  // What a GPU statistics block does: warps of 32 consecutive thumbnail pixels sum each term of
  // their lanes (sample_term, 0 outside the region) in 32 bits, warp totals are added in whatever
  // order they arrive, add_terms() makes the sums. Integer sums: equal to the one-pass CPU sums,
  // and no warp's term sum may exceed 32 bits. Luma spans the whole range (clamped at both ends),
  // and a third of the pixels move, so every term is exercised at its largest.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> luma(-0.1f, 1.1f);
  std::vector<uint16_t> cur(control::kThumbPixels), prev(control::kThumbPixels);
  for (size_t i = 0; i < cur.size(); ++i) {
    cur[i] = test::to_q(luma(rng));
    prev[i] = i % 3 ? cur[i] : test::to_q(luma(rng));
  }
  const control::Region region = control::thumb_region(33, 10, 200, 150, kW, kH);
  control::RegionSums sequential{};
  for (int32_t t = 0; t < control::pixel_count(region); ++t) {
    int32_t x, y;
    control::region_pixel(region, t, x, y);
    const size_t i = size_t(y) * control::kThumbW + x;
    control::add_sample(sequential, control::sample_pixel(cur[i], prev[i], true, x, y));
  }

  constexpr int kLanes = 32, kWarps = control::kThumbPixels / kLanes;
  std::vector<std::array<uint64_t, control::kTerms>> warps(kWarps);
  for (int w = 0; w < kWarps; ++w) {
    for (int k = 0; k < control::kTerms; ++k) {
      uint64_t sum = 0;
      for (int l = 0; l < kLanes; ++l) {
        const int t = w * kLanes + l, x = t % control::kThumbW, y = t / control::kThumbW;
        const control::PixelSample s = control::sample_pixel(cur[size_t(t)], prev[size_t(t)], true, x, y);
        sum += control::sample_term(s, k, control::contains(region, x, y));
      }
      ASSERT_LE(sum, uint64_t{UINT32_MAX}) << "warp " << w << " term " << k;
      warps[size_t(w)][size_t(k)] = sum;
    }
  }
  std::array<uint64_t, control::kTerms> totals{};
  for (int w = kWarps - 1; w >= 0; --w)   // warps arrive in reverse order
    for (int k = 0; k < control::kTerms; ++k) totals[size_t(k)] += warps[size_t(w)][size_t(k)];
  control::RegionSums total{};
  control::add_terms(total, totals.data());
  EXPECT_EQ(std::memcmp(&total, &sequential, sizeof total), 0);
  EXPECT_EQ(total.pixels, uint64_t(control::pixel_count(region)));
  EXPECT_GT(total.moving, 0u);
}

//! The thumbnail of `img` from its definition (thumbnail.hpp), in double: cell edges and sample
//! positions by floor(), luma per sample from the Y plane or 0.299 R + 0.587 G + 0.114 B, the
//! mean range-normalised. kThumbPixels values on the 0..kLumaOne scale, not rounded.
std::vector<double> reference_thumbnail(const test::HostImage& img, bool limited) {
  const auto sample = [](int cell, int cells, int size, int k) {
    const double lo = std::floor(double(cell) * size / cells), hi = std::floor(double(cell + 1) * size / cells);
    return int(lo + std::floor((k + 0.5) * (hi - lo) / 4));
  };
  const auto luma = [&](int x, int y) -> double {   // 8-bit scale
    const uint8_t* row = img.planes[0].data() + size_t(y) * img.pitch[0];
    switch (img.format) {
      case ops::PixelFormat::P010: return (row[2 * x] | row[2 * x + 1] << 8) / 256.0;
      case ops::PixelFormat::Yuv420p10: return (row[2 * x] | row[2 * x + 1] << 8) / 4.0;
      case ops::PixelFormat::Rgb24: return 0.299 * row[3 * x] + 0.587 * row[3 * x + 1] + 0.114 * row[3 * x + 2];
      case ops::PixelFormat::Bgr24: return 0.299 * row[3 * x + 2] + 0.587 * row[3 * x + 1] + 0.114 * row[3 * x];
      default: return row[x];
    }
  };
  std::vector<double> t(control::kThumbPixels);
  for (int ty = 0; ty < control::kThumbH; ++ty) {
    for (int tx = 0; tx < control::kThumbW; ++tx) {
      double sum = 0;
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 4; ++i)
          sum += luma(sample(tx, control::kThumbW, img.width, i), sample(ty, control::kThumbH, img.height, j));
      const double v = limited ? (sum / 16 - 16) / 219 : sum / 16 / 255;
      t[size_t(ty) * control::kThumbW + tx] = std::clamp(v, 0.0, 1.0) * control::kLumaOne;
    }
  }
  return t;
}

TEST(Thumbnail, MatchesItsDefinitionOnEveryFormatAndRange) {
  // Random frames of every format, both ranges, 1080p, odd sizes and frames narrower than the
  // thumbnail. YUV: within rounding of the exact normalised mean; RGB: also within the rounding of
  // each sample's integer gray (half a code).
  struct Case {
    ops::PixelFormat format;
    int w, h;
    ops::ColorRange range;
  };
  const Case cases[] = {
      {ops::PixelFormat::Nv12, 1920, 1080, ops::ColorRange::Limited}, {ops::PixelFormat::Nv12, 1920, 1080, ops::ColorRange::Full},
      {ops::PixelFormat::P010, 1280, 720, ops::ColorRange::Limited},  {ops::PixelFormat::Yuv420p, 333, 201, ops::ColorRange::Full},
      {ops::PixelFormat::Yuv420p, 100, 50, ops::ColorRange::Limited}, {ops::PixelFormat::Rgb24, 320, 180, ops::ColorRange::Full},
      {ops::PixelFormat::Bgr24, 641, 359, ops::ColorRange::Limited},   // RGB is full range whatever the stream says
      {ops::PixelFormat::Yuv420p10, 1920, 1080, ops::ColorRange::Limited},
      {ops::PixelFormat::Yuv422p, 640, 480, ops::ColorRange::Full},
  };
  uint32_t seed = 70;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << int(c.format) << " " << c.w << "x" << c.h << " range " << int(c.range));
    const test::HostImage img = test::random_image(c.format, c.w, c.h, seed++);
    ColorSpec color;
    color.range = c.range;
    FrameInfo frame{};
    frame.width = c.w;
    frame.height = c.h;
    frame.format = c.format;
    const bool rgb = c.format == ops::PixelFormat::Rgb24 || c.format == ops::PixelFormat::Bgr24;
    const std::vector<double> ref = reference_thumbnail(img, !rgb && c.range == ops::ColorRange::Limited);
    ControlEngine engine;
    engine.setup(control::make_control_params(ControlSpec{}, frame,
                                              make_output_plans(test::control_pipeline("t", {gray_output("o")}, ControlSpec{}), frame),
                                              kFps, kContext));
    engine.measure(img.view(), make_color_params(color, frame));
    const double tolerance = rgb ? 0.5001 + 0.5 * 257 : 0.5001;
    double worst = 0, lo = 1e9, hi = -1;
    for (int i = 0; i < control::kThumbPixels; ++i) {
      worst = std::max(worst, std::abs(engine.thumbnail()[i] - ref[size_t(i)]));
      lo = std::min(lo, ref[size_t(i)]);
      hi = std::max(hi, ref[size_t(i)]);
    }
    EXPECT_LE(worst, tolerance);
    EXPECT_GT(hi - lo, 0.2 * control::kLumaOne) << "the frame's thumbnail is too flat to tell anything";
  }
}

TEST(Stats, RecordDescribesTheFramesThumbnail) {
  // Through the executor: the record's means are those of the thumbnail of the frame (computed
  // from its definition) over the whole frame and over each output's window.
  Harness h(test::control_pipeline("test", {gray_output("all"), gray_output("box", pixels(80, 45, 160, 90))}, ControlSpec{}));
  const auto mean = [](const std::vector<double>& t, int x0, int y0, int x1, int y1) {
    double s = 0;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) s += std::round(t[size_t(y) * control::kThumbW + x]) / control::kLumaOne;
    return s / ((x1 - x0) * (y1 - y0));
  };
  for (uint32_t seed : {1u, 2u, 3u}) {
    const test::HostImage img = textured(seed, 0, 255);
    const ControlRecord r = h.step(img);
    const std::vector<double> t = reference_thumbnail(img, false);
    EXPECT_NEAR(r.mean_luma, mean(t, 0, 0, 128, 72), 2e-3);   // RGB: per-sample gray rounding
    EXPECT_NEAR(r.out[0].mean_luma, mean(t, 0, 0, 128, 72), 2e-3);
    EXPECT_NEAR(r.out[1].mean_luma, mean(t, 32, 18, 96, 54), 2e-3);   // 80..240 x 45..135 at 0.4
    EXPECT_NEAR(r.mean_luma, mean_luma(img, 0, 0, kW, kH), 0.02);     // and roughly the frame's mean
    EXPECT_EQ(r.out[1].x, 80);
    EXPECT_EQ(r.out[1].y, 45);
    EXPECT_EQ(r.out[1].w, 160);
    EXPECT_EQ(r.out[1].h, 90);
    EXPECT_FLOAT_EQ(r.out[0].gain, 1.f);
  }
}

// ---------------------------------------------------------------------------------------------
// Delay ring

TEST(DelayRing, SlotIndexing) {
  struct Case {
    uint64_t i;
    int32_t d, depth, write, read;
    bool has;
  };
  constexpr Case kCases[] = {{0, 1, 2, 0, 0, false}, {1, 1, 2, 1, 0, true},  {2, 1, 2, 0, 1, true},
                             {4, 5, 6, 4, 0, false}, {5, 5, 6, 5, 0, true},  {13, 5, 6, 1, 2, true},
                             {1ull << 40, 3, 4, 0, 1, true}};
  for (const auto& c : kCases) {
    EXPECT_EQ(control::write_slot(c.i, c.depth), c.write) << c.i;
    EXPECT_EQ(control::has_input(c.i, c.d), c.has) << c.i;
    if (c.has) EXPECT_EQ(control::read_slot(c.i, c.d, c.depth), c.read) << c.i;
  }
}

//! Brightness of synthetic frame n: steps at frames 10 and 23.
float stepped(int n) { return n < 10 ? 0.1f : (n < 23 ? 0.3f : 0.02f); }

TEST(Delay, ControlOfFrameNReadsFrameNMinusDOnly) {
  for (const int d : {1, 2, 3, 7}) {
    SCOPED_TRACE(d);
    ControlSpec spec = with_auto_gain(d);
    spec.health.enabled = true;
    Rig rig(spec);
    for (int n = 0; n < 40; ++n) {
      // Iteration n - 1 ran the loops for frame n: on slot n - d, nothing newer.
      const auto& header = rig.engine.block().header;
      ASSERT_EQ(header.iteration, uint64_t(n));
      if (n >= d) {
        const control::Slot& read = rig.engine.slots()[size_t(control::read_slot(n, d, d + 1))];
        EXPECT_EQ(read.iteration, uint64_t(n - d));
        EXPECT_NEAR(read.stats.region[0].mean, stepped(n - d), 1e-4);
      }
      std::fill_n(rig.engine.thumbnail(), control::kThumbPixels, test::to_q(stepped(n)));
      rig.engine.stats_step();
      EXPECT_EQ(rig.engine.slots()[size_t(n % (d + 1))].iteration, uint64_t(n));
    }
  }
}

TEST(Delay, ControlNeverDependsOnNewerFrames) {
  // Two clips equal up to frame s - 1 and different from s on (random futures): every control
  // output of frames n < s + d is bit-identical, and frame s + d's already differs.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> luma(0.01f, 0.2f);
  for (const int d : {1, 2, 4}) {
    for (const int s : {0, 3, 17}) {
      SCOPED_TRACE(testing::Message() << "d=" << d << " s=" << s);
      ControlSpec spec = with_auto_gain(d);
      spec.roi_follow.enabled = true;
      spec.roi_follow.output = "win";
      spec.health.enabled = true;
      spec.health.raise_after = std::chrono::milliseconds(0);
      const std::vector<OutputSpec> outs = {gray_output("out"), gray_output("win", pixels(100, 40, 64, 64))};
      Rig a(spec, outs), b(spec, outs);
      // Past: luma 0.2 (the gain is rising). Futures: darker (the gain keeps rising) or bright (it falls).
      const float common = 0.2f, future_a = luma(rng), future_b = 0.9f;
      for (int n = 0; n < s + d + 3; ++n) {
        // The past moves (a patch walks right) so roi_follow has a centroid to chase.
        const auto frame = [&](float base) {
          return [=](int x, int y) { return (x / 4 == n % 32 && y > 20 && y < 40) ? 0.9f : base; };
        };
        const control::ControlState sa = a.step(frame(n < s ? common : future_a));
        const control::ControlState sb = b.step(frame(n < s ? common : future_b));
        // The record of frame n carries the health flags as of frame n - d.
        const bool same = std::memcmp(&sa, &sb, sizeof sa) == 0 &&
                          a.engine.record().health_flags == b.engine.record().health_flags;
        if (n < s + d) EXPECT_TRUE(same) << "frame " << n;
        if (n == s + d) EXPECT_NE(sa.out[0].gain, sb.out[0].gain) << "frame " << n;
      }
    }
  }
}

TEST(Delay, BrightnessStepReachesTheOutputsExactlyDFramesLater) {
  // Through the executor: frames whose brightness steps up at frame 12 and to black at frame 30.
  // The gain follows a constant clip's exactly until frame 12 + d; black is flagged at 30 + d.
  const auto frame = [](int n, bool steps) {
    const int lo = !steps || n < 12 ? 20 : (n < 30 ? 60 : 0), hi = !steps || n < 12 ? 40 : (n < 30 ? 100 : 6);
    return textured(100 + n, lo, hi);
  };
  for (const int d : {1, 4}) {
    SCOPED_TRACE(d);
    ControlSpec spec = with_auto_gain(d);
    spec.health.enabled = true;
    spec.health.raise_after = std::chrono::milliseconds(0);
    Harness stepped_run(test::control_pipeline("test", {gray_output("out")}, spec)), constant_run(test::control_pipeline("test", {gray_output("out")}, spec));
    for (int n = 0; n < 40; ++n) {
      const ControlRecord a = stepped_run.step(frame(n, true));
      const ControlRecord b = constant_run.step(frame(n, false));
      ASSERT_EQ(a.iteration, uint64_t(n));
      if (n < 12 + d) EXPECT_EQ(a.out[0].gain, b.out[0].gain) << "frame " << n;
      if (n == 12 + d) EXPECT_LT(a.out[0].gain, b.out[0].gain) << "frame " << n;   // brighter: less gain
      EXPECT_EQ((a.health_flags >> Health::kBlack) & 1u, n >= 30 + d ? 1u : 0u) << "frame " << n;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// auto_gain

TEST(AutoGain, ConvergesOnADarkClipWithinThirtyFramesWithoutOscillation) {
  // Luma ~0.098 (bytes 15..35, a fresh texture every frame), target 0.45: the gain must rise from 1
  // to ~4.6, limited to 0.25 per frame. Measured on the output tensor itself.
  for (const int d : {1, 2}) {
    SCOPED_TRACE(d);
    ControlSpec spec = with_auto_gain(d);
    spec.auto_gain.target = 0.45;
    const auto& g = spec.auto_gain;
    Harness h(test::control_pipeline("test", {gray_output("out", pixels(40, 20, 240, 140))}, spec));
    float prev_gain = 1.f, peak = 1.f;
    for (int n = 0; n < 80; ++n) {
      const ControlRecord r = h.step(textured(1000 + n, 15, 35));
      const double out = h.output_mean(0);
      EXPECT_NEAR(out, r.out[0].mean_luma, 1e-3) << "frame " << n;   // the record describes the output
      EXPECT_LE(out, g.target * 1.01) << "frame " << n;                 // no overshoot
      if (n >= 30) EXPECT_NEAR(out, g.target, 0.02 * g.target) << "frame " << n;
      // No oscillation: the gain never falls back below its peak by more than the frames' noise.
      EXPECT_GE(r.out[0].gain, peak * 0.995f) << "frame " << n;
      EXPECT_LE(r.out[0].gain - prev_gain, g.max_step + 1e-6) << "frame " << n;
      EXPECT_LE(r.out[0].gain, g.max_gain);
      prev_gain = r.out[0].gain;
      peak = std::max(peak, prev_gain);
    }
  }
}

TEST(AutoGain, RespectsGainAndSlewLimitsAndDoesNotWindUp) {
  ControlSpec spec = with_auto_gain(2);
  spec.auto_gain.max_gain = 4;
  spec.auto_gain.min_gain = 0.5;
  spec.auto_gain.max_step = 0.2;
  Rig rig(spec);
  std::vector<float> gains;
  const auto run = [&](int frames, float luma) {
    for (int i = 0; i < frames; ++i) gains.push_back(rig.step_flat(luma).out[0].gain);
  };
  run(100, 0.02f);    // needs 22.5: pinned at max_gain
  run(60, 0.15f);     // needs 3: reachable again
  run(100, 0.95f);    // needs 0.47: pinned at min_gain
  for (size_t n = 1; n < gains.size(); ++n) {
    EXPECT_LE(std::abs(gains[n] - gains[n - 1]), 0.2f + 1e-6f) << n;
    EXPECT_GE(gains[n], 0.5f) << n;
    EXPECT_LE(gains[n], 4.f) << n;
  }
  EXPECT_EQ(gains[99], 4.f);
  // No wind-up: 100 frames at the limit, yet the gain leaves it as soon as the brighter frame 100
  // is seen (frame 102 with d = 2) and settles on 3 without undershooting far.
  EXPECT_EQ(gains[101], 4.f);
  EXPECT_LT(gains[102], 4.f);
  for (size_t n = 102; n < 160; ++n) EXPECT_GE(gains[n], 3.f * 0.98f) << n;
  EXPECT_NEAR(gains[159], 3.f, 0.03f);
  EXPECT_EQ(gains.back(), 0.5f);
}

TEST(AutoGain, DrivesOnlyItsOutputsAndHoldsOnBlack) {
  ControlSpec spec = with_auto_gain(1);
  spec.auto_gain.outputs = {"driven"};
  Rig rig(spec, {gray_output("fixed"), gray_output("driven")});
  for (int n = 0; n < 10; ++n) rig.step_flat(0.1f);
  const float driven = rig.engine.state().out[1].gain;
  EXPECT_GT(driven, 1.5f);
  EXPECT_EQ(rig.engine.state().out[0].gain, 1.f);
  for (int n = 0; n < 10; ++n) rig.step_flat(0.f);   // nothing measurable: hold
  EXPECT_EQ(rig.engine.state().out[1].gain, rig.engine.slots()[0].applied.out[1].gain);
  EXPECT_EQ(rig.engine.state().out[1].gain, rig.engine.record().out[1].gain);
}

// ---------------------------------------------------------------------------------------------
// roi_follow

TEST(RoiFollow, MovesByHandComputedStepsWithDeadBandAndHold) {
  // Window 64x64 planned at (128, 58): centre (160, 90). Bounds: the whole frame. d = 1.
  ControlSpec spec;
  spec.delay_frames = 1;
  spec.roi_follow.enabled = true;
  spec.roi_follow.output = "win";
  spec.roi_follow.smoothing = 0.5;
  spec.roi_follow.dead_band = 0.02;   // 6.4 x 3.6 pixels
  Rig rig(spec, {gray_output("win", pixels(128, 58, 64, 64))});
  // Frames 0, 1: flat, then a blob brightens thumbnail pixels 74..77 x 52..55: centroid x = 76/128
  // (frame x 190), y = 54/72 (frame y 135). Frame 3 equals frame 2: no motion.
  const auto blob = [](int x, int y) { return (x >= 74 && x < 78 && y >= 52 && y < 56) ? 0.8f : 0.2f; };
  EXPECT_EQ(rig.step_flat(0.2f).out[0].dx, 0);
  EXPECT_EQ(rig.step_flat(0.2f).out[0].dx, 0);
  EXPECT_EQ(rig.step(blob).out[0].dx, 0);   // frame 2 reads frame 1: nothing moved
  const control::ControlState s3 = rig.step(blob);   // reads frame 2: centre 160 + 0.5 * 30 = 175
  EXPECT_EQ(s3.out[0].dx, 15);                       // x0 = round(175 - 32) = 143
  EXPECT_EQ(s3.out[0].dy, 23);                       // 90 + 0.5 * 45 = 112.5 -> y0 = round(80.5) = 81
  const control::ControlState s4 = rig.step_flat(0.2f);   // reads frame 3 (= frame 2): hold
  EXPECT_EQ(s4.out[0].dx, 15);
  EXPECT_EQ(s4.out[0].dy, 23);
  // Frame 4 went flat again: the blob's pixels changed back; same centroid.
  const control::ControlState s5 = rig.step_flat(0.2f);
  EXPECT_EQ(s5.out[0].dx, 23);   // 175 + 0.5 * 15 = 182.5 -> x0 = round(150.5) = 151
  EXPECT_EQ(s5.out[0].dy, 34);   // 112.5 + 0.5 * 22.5 = 123.75 -> y0 = round(91.75) = 92
  // Dead band 0.3 (96 x 54 pixels): the blob's offset (30, 45) is inside it, nothing moves.
  ControlSpec wide = spec;
  wide.roi_follow.dead_band = 0.3;
  Rig held(wide, {gray_output("win", pixels(128, 58, 64, 64))});
  held.step_flat(0.2f);
  held.step_flat(0.2f);
  held.step(blob);
  EXPECT_EQ(held.step_flat(0.2f).out[0].dx, 0);
  EXPECT_EQ(held.engine.state().out[0].dy, 0);
}

TEST(RoiFollow, TracksAMovingSquareWithinBounds) {
  // A bright 20-pixel square moves right 3 px per frame and bobs vertically over a static texture;
  // the 64x64 window (bounds: the middle 80% of the frame) follows it, and the output shows exactly
  // the pixels under the window the record reports.
  ControlSpec spec;
  spec.delay_frames = 1;
  spec.roi_follow.enabled = true;
  spec.roi_follow.output = "win";
  spec.roi_follow.smoothing = 0.4;
  spec.roi_follow.dead_band = 0.01;
  spec.roi_follow.bounds = {0.1, 0.1, 0.8, 0.8, true};   // x 32..288, y 18..162
  Harness h(test::control_pipeline("test", {window_output("win", pixels(128, 58, 64, 64))}, spec));
  const test::HostImage background = textured(7, 40, 90);
  for (int n = 0; n < 110; ++n) {
    const int cx = 60 + 3 * n, cy = 90 + static_cast<int>(std::lround(40 * std::sin(n / 10.0)));
    test::HostImage img = background;
    fill_square(img, cx, cy, 20, 255);
    const ControlRecord r = h.step(img);
    const auto& w = r.out[0];
    ASSERT_GE(w.x, 32) << n;
    ASSERT_LE(w.x + w.w, 288) << n;
    ASSERT_GE(w.y, 18) << n;
    ASSERT_LE(w.y + w.h, 162) << n;
    // The output is the window's pixels.
    const auto& out = h.bytes(0);
    bool same = true;
    for (int y = 0; y < 64 && same; ++y)
      same = std::memcmp(out.data() + size_t(y) * 64 * 3, img.planes[0].data() + size_t(w.y + y) * img.pitch[0] + 3 * w.x,
                         64 * 3) == 0;
    EXPECT_TRUE(same) << "frame " << n << ": output is not the window at " << w.x << "," << w.y;
    // After 15 frames, while the square is within reach, it stays inside the window (that needs
    // centres at most 22 pixels apart; the lag is about 12).
    const int wx = w.x + 32, wy = w.y + 32;
    if (n >= 15 && cx <= 250) {
      EXPECT_LE(std::abs(wx - cx), 18) << "frame " << n;
      EXPECT_LE(std::abs(wy - cy), 18) << "frame " << n;
    }
    // Past the right bound: the window stops there (within the 3.2-pixel dead band).
    if (cx >= 290) EXPECT_GE(w.x, 288 - 64 - 4) << "frame " << n;
  }
}

// ---------------------------------------------------------------------------------------------
// health

ControlSpec health_spec(int32_t delay) {
  ControlSpec c;
  c.delay_frames = delay;
  c.health.enabled = true;
  return c;
}

bool flag(const ControlRecord& r, Health::Condition c) { return (r.health_flags >> c) & 1u; }

TEST(Health, FrozenRaisesAfterTheHoldTimeAndClears) {
  // 25 fps, frozen after 1 s (25 frames), cleared after 200 ms (5 frames), d = 2. Frames 20..69
  // repeat frame 20: motion is 0 from frame 21, the 25th still frame is 45, seen at iteration 47;
  // motion is back at frame 70, the 5th moving frame is 74, seen at 76.
  ControlSpec spec = health_spec(2);
  spec.health.frozen_after = std::chrono::milliseconds(1000);
  spec.health.clear_after = std::chrono::milliseconds(200);
  Harness h(test::control_pipeline("test", {gray_output("out")}, spec));
  const test::HostImage still = textured(20, 30, 200);
  ControlRecord r{};
  for (int n = 0; n < 100; ++n) {
    r = h.step(n >= 20 && n < 70 ? still : textured(uint32_t(n), 30, 200));
    EXPECT_EQ(flag(r, Health::kFrozen), n >= 47 && n < 76) << "frame " << n;
    EXPECT_FALSE(flag(r, Health::kBlack) || flag(r, Health::kOverexposed) || flag(r, Health::kSceneChange)) << n;
  }
  EXPECT_EQ(r.health_events[Health::kFrozen], 1u);
}

TEST(Health, BlackOverexposedAndTheirCutsWithHysteresis) {
  // d = 1, raise after 120 ms (3 frames), clear after 200 ms (5 frames). Black frames 30..49 (raised
  // at 32 + 1, cleared at 54 + 1), white frames 70..89 (73, 95). Each of the four cuts is a scene
  // change (tamper) seen one frame later, cleared 5 frames after.
  ControlSpec spec = health_spec(1);
  spec.health.raise_after = std::chrono::milliseconds(120);
  spec.health.clear_after = std::chrono::milliseconds(200);
  Harness h(test::control_pipeline("test", {gray_output("out")}, spec));
  ControlRecord r{};
  for (int n = 0; n < 110; ++n) {
    const bool black = n >= 30 && n < 50, white = n >= 70 && n < 90;
    r = h.step(black ? textured(uint32_t(n), 0, 10) : white ? textured(uint32_t(n), 245, 255) : textured(uint32_t(n), 30, 200));
    EXPECT_EQ(flag(r, Health::kBlack), n >= 33 && n < 55) << "frame " << n;
    EXPECT_EQ(flag(r, Health::kOverexposed), n >= 73 && n < 95) << "frame " << n;
    bool cut = false;
    for (const int c : {30, 50, 70, 90}) cut |= n >= c + 1 && n < c + 1 + 5;
    EXPECT_EQ(flag(r, Health::kSceneChange), cut) << "frame " << n;
    EXPECT_FALSE(flag(r, Health::kFrozen)) << n;
  }
  EXPECT_EQ(r.health_events[Health::kBlack], 1u);
  EXPECT_EQ(r.health_events[Health::kOverexposed], 1u);
  EXPECT_EQ(r.health_events[Health::kSceneChange], 4u);
}

TEST(Health, SceneChangeOnceAtTheCut) {
  ControlSpec spec = health_spec(3);
  spec.health.clear_after = std::chrono::milliseconds(400);   // 10 frames
  Harness h(test::control_pipeline("test", {gray_output("out")}, spec));
  ControlRecord r{};
  for (int n = 0; n < 80; ++n) {
    r = h.step(n < 40 ? textured(uint32_t(n), 20, 120) : textured(uint32_t(n), 120, 250));
    if (n == 43) EXPECT_TRUE(flag(r, Health::kSceneChange));
    if (n < 43) EXPECT_EQ(r.health_flags, 0u) << "frame " << n;
    if (n == 43) EXPECT_GT(r.scene_distance, 0.9f);
  }
  EXPECT_EQ(r.health_events[Health::kSceneChange], 1u);
  EXPECT_EQ(r.health_flags, 0u);
}

TEST(Health, NoFalseAlarmOnNormalMotion) {
  // A small square moving over a static scene, and sensor-like noise that differs every frame:
  // nothing is frozen, black, overexposed or a scene change (frozen after 1 s, well inside the clip).
  ControlSpec spec = health_spec(1);
  spec.health.frozen_after = std::chrono::milliseconds(1000);
  spec.health.raise_after = std::chrono::milliseconds(0);
  Harness square(test::control_pipeline("test", {gray_output("out")}, spec)), noise(test::control_pipeline("test", {gray_output("out")}, spec));
  const test::HostImage background = textured(3, 40, 160);
  for (int n = 0; n < 120; ++n) {
    test::HostImage img = background;
    fill_square(img, 160 + static_cast<int>(std::lround(120 * std::sin(n / 12.0))),
                90 + static_cast<int>(std::lround(50 * std::sin(n / 17.0))), 30, 230);
    const ControlRecord a = square.step(img);
    const ControlRecord b = noise.step(textured(500 + n, 40, 160));
    EXPECT_EQ(a.health_flags, 0u) << "square, frame " << n << " motion " << a.motion;
    EXPECT_EQ(b.health_flags, 0u) << "noise, frame " << n << " distance " << b.scene_distance;
    if (n == 119) {
      for (int c = 0; c < Health::kConditions; ++c) EXPECT_EQ(a.health_events[c] + b.health_events[c], 0u);
    }
  }
}

TEST(Health, FlickerShorterThanTheRaiseTimeNeverRaises) {
  ControlSpec spec = health_spec(1);
  spec.health.raise_after = std::chrono::milliseconds(120);   // 3 frames
  spec.health.scene_change = 1.0;                             // distance never exceeds 1
  Rig rig(spec);
  for (int n = 0; n < 40; ++n) {
    rig.step_flat(n % 3 == 2 ? 0.5f : 0.01f);   // black two frames, then one normal
    EXPECT_EQ(rig.engine.block().loops.health.flags, 0u) << n;
  }
}

// ---------------------------------------------------------------------------------------------
// The executor

TEST(CpuExecutorControl, StatisticsAloneChangeNoOutput) {
  // Control with no loop: outputs bit-identical to a run without control, for several outputs,
  // resizes, aspect modes and a batch.
  PipelineSpec spec;
  spec.name = "test";
  OutputSpec a = gray_output("a");
  a.resize = {224, 224, 0};
  OutputSpec b = window_output("b", pixels(10, 20, 200, 100));
  b.resize = {96, 64, 0};
  b.aspect = AspectMode::Letterbox;
  spec.outputs = {a, b};
  FrameInfo frame;
  frame.width = kW;
  frame.height = kH;
  frame.format = ops::PixelFormat::Yuv420p;
  const auto plans = make_output_plans(spec, frame);
  const auto color = make_color_params(spec.color, frame);
  std::vector<test::HostImage> imgs;
  std::vector<ops::ImageView> views;
  for (uint32_t s = 0; s < 3; ++s) imgs.push_back(test::random_image(frame.format, kW, kH, 40 + s));
  for (const auto& i : imgs) views.push_back(i.view());

  CpuExecutor plain(2), controlled(2);
  plain.setup(frame, color, plans, 3);
  controlled.setup(frame, color, plans, 3);
  ControlSpec c;
  c.enabled = true;
  controlled.setup_control(control::make_control_params(c, frame, plans, kFps, kContext));
  auto out_plain = test::poisoned_outputs(plans, 3), out_controlled = test::poisoned_outputs(plans, 3);
  plain.process(views, test::pointers(out_plain));
  controlled.process(views, test::pointers(out_controlled));
  EXPECT_EQ(out_plain, out_controlled);
  EXPECT_FALSE(plain.control_record().has_value());
  ASSERT_TRUE(controlled.control_record().has_value());
  EXPECT_EQ(controlled.control_record()->iteration, 2u);   // one iteration per frame of the batch
  controlled.setup(frame, color, plans, 3);                // setup() turns control off
  EXPECT_FALSE(controlled.control_record().has_value());
}

TEST(CpuExecutorControl, BatchEqualsFramesOneAtATime) {
  const PipelineSpec spec = test::control_pipeline("test", {gray_output("out", pixels(0, 0, 200, 100))}, with_auto_gain(2));
  const FrameInfo frame = test::control_frame_info();
  const auto plans = make_output_plans(spec, frame);
  const auto params = control::make_control_params(spec.control, frame, plans, kFps, kContext);
  std::vector<test::HostImage> imgs;
  std::vector<ops::ImageView> views;
  for (int n = 0; n < 6; ++n) imgs.push_back(textured(uint32_t(60 + n), 10, 60));
  for (const auto& i : imgs) views.push_back(i.view());
  CpuExecutor batched(2), single(2);
  for (auto* e : {&batched, &single}) {
    e->setup(frame, make_color_params(spec.color, frame), plans, 6);
    e->setup_control(params);
  }
  auto out_batched = test::poisoned_outputs(plans, 6), out_single = test::poisoned_outputs(plans, 1);
  batched.process(views, test::pointers(out_batched));
  for (int n = 0; n < 6; ++n) {
    single.process({&views[size_t(n)], 1}, test::pointers(out_single));
    const size_t bytes = plans[0].bytes_per_frame;
    EXPECT_EQ(std::memcmp(out_batched[0].data() + n * bytes, out_single[0].data(), bytes), 0) << n;
  }
  const ControlRecord a = *batched.control_record(), b = *single.control_record();
  EXPECT_EQ(a.iteration, 5u);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  EXPECT_GT(a.out[0].gain, 1.f);
}

// ---------------------------------------------------------------------------------------------
// Planning rejects bad parameters

struct BadCase {
  const char* name;
  std::function<void(PipelineSpec&)> edit;
  std::string message;   //!< after "pipeline 'test': "
};

TEST(ControlPlan, RejectsBadParameters) {
  const std::vector<BadCase> cases = {
      {"delay 0", [](PipelineSpec& p) { p.control.delay_frames = 0; },
       "control delay_frames = 0 must be between 1 and 64"},
      {"delay 65", [](PipelineSpec& p) { p.control.delay_frames = 65; },
       "control delay_frames = 65 must be between 1 and 64"},
      {"target above 1", [](PipelineSpec& p) { p.control.auto_gain.target = 1.5; },
       "control auto_gain.target = 1.5 must be between 0.001 and 1"},
      {"target negative", [](PipelineSpec& p) { p.control.auto_gain.target = -0.2; },
       "control auto_gain.target = -0.2 must be between 0.001 and 1"},
      {"negative min gain", [](PipelineSpec& p) { p.control.auto_gain.min_gain = -1; },
       "control auto_gain.min_gain = -1 must be between 0.001 and 1"},
      {"max gain below 1", [](PipelineSpec& p) { p.control.auto_gain.max_gain = 0.5; },
       "control auto_gain.max_gain = 0.5 must be between 1 and 1000"},
      {"negative slew", [](PipelineSpec& p) { p.control.auto_gain.max_step = -0.1; },
       "control auto_gain.max_step = -0.1 must be between 1e-06 and 1000"},
      {"negative kp", [](PipelineSpec& p) { p.control.auto_gain.kp = -0.1; },
       "control auto_gain.kp = -0.1 must be between 0 and 10"},
      {"no gains", [](PipelineSpec& p) { p.control.auto_gain.kp = p.control.auto_gain.ki = 0; },
       "control auto_gain needs kp or ki above 0"},
      {"unknown gain output", [](PipelineSpec& p) { p.control.auto_gain.outputs = {"nope"}; },
       "control auto_gain.outputs names output 'nope', which the pipeline does not have"},
      {"unknown roi output", [](PipelineSpec& p) { p.control.roi_follow.output = "cam"; },
       "control roi_follow.output names output 'cam', which the pipeline does not have"},
      {"bounds too small", [](PipelineSpec& p) { p.control.roi_follow.bounds = {0, 0, 0.1, 1, true}; },
       "control roi_follow.bounds (32x180 pixels) cannot hold the 64x64 crop of output 'win'"},
      {"bounds outside", [](PipelineSpec& p) { p.control.roi_follow.bounds = pixels(300, 0, 100, 100); },
       "control roi_follow.bounds x=300 y=0 w=100 h=100 do not lie inside the 320x180 frame"},
      {"smoothing 0", [](PipelineSpec& p) { p.control.roi_follow.smoothing = 0; },
       "control roi_follow.smoothing = 0 must be between 1e-06 and 1"},
      {"negative frozen motion", [](PipelineSpec& p) { p.control.health.frozen_motion = -0.1; },
       "control health.frozen_motion = -0.1 must be between 0 and 1"},
      {"negative clear time", [](PipelineSpec& p) { p.control.health.clear_after = std::chrono::milliseconds(-5); },
       "control health durations must not be negative (frozen_after > 0)"},
      {"too many outputs",
       [](PipelineSpec& p) {
         while (p.outputs.size() < 9) p.outputs.push_back(gray_output("o" + std::to_string(p.outputs.size())));
       },
       "control measures 1..8 outputs, the pipeline has 9"},
  };
  for (const auto& c : cases) {
    ControlSpec spec = with_auto_gain(1);
    spec.roi_follow.enabled = true;
    spec.roi_follow.output = "win";
    spec.health.enabled = true;
    PipelineSpec p = test::control_pipeline("test", {gray_output("out"), gray_output("win", pixels(100, 40, 64, 64))}, spec);
    c.edit(p);
    const auto plans = make_output_plans(p, test::control_frame_info());
    try {
      control::make_control_params(p.control, test::control_frame_info(), plans, kFps, kContext);
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), kContext + ": " + c.message) << c.name;
    }
  }
  const PipelineSpec ok = test::control_pipeline("test", {gray_output("out")}, ControlSpec{});
  const auto plans = make_output_plans(ok, test::control_frame_info());
  EXPECT_THROW(control::make_control_params(ok.control, test::control_frame_info(), plans, 0, kContext), ConfigError);
  EXPECT_NO_THROW(control::make_control_params(ok.control, test::control_frame_info(), plans, kFps, kContext));
}

TEST(ControlPlan, ConvertsDurationsAndFractions) {
  ControlSpec spec = health_spec(3);
  spec.health.frozen_after = std::chrono::milliseconds(2500);
  spec.health.raise_after = std::chrono::milliseconds(0);
  spec.health.clear_after = std::chrono::milliseconds(1000);
  spec.roi_follow.enabled = true;
  spec.roi_follow.output = "win";
  spec.roi_follow.dead_band = 0.05;
  spec.roi_follow.bounds = {0.25, 0.5, 0.5, 0.5, true};
  const PipelineSpec p = test::control_pipeline("test", {gray_output("win", pixels(100, 20, 64, 64))}, spec);
  const auto plans = make_output_plans(p, test::control_frame_info());
  const control::ControlParams c = control::make_control_params(p.control, test::control_frame_info(), plans, 30, kContext);
  EXPECT_EQ(c.delay, 3);
  EXPECT_EQ(c.depth, 4);
  EXPECT_EQ(c.health.raise_frames[Health::kFrozen], 75);
  EXPECT_EQ(c.health.raise_frames[Health::kBlack], 1);
  EXPECT_EQ(c.health.clear_frames, 30);
  EXPECT_EQ((std::array{c.roi_follow.bx0, c.roi_follow.by0, c.roi_follow.bx1, c.roi_follow.by1}),
            (std::array{80, 90, 240, 180}));
  EXPECT_FLOAT_EQ(c.roi_follow.dead_x, 16.f);
  EXPECT_FLOAT_EQ(c.roi_follow.dead_y, 9.f);
  // The window starts inside the bounds: planned at (100, 20), moved down to y = 90.
  const control::ControlBlock b = control::initial_block(c);
  EXPECT_EQ(b.state.out[0].dx, 0);
  EXPECT_EQ(b.state.out[0].dy, 70);
}

// ---------------------------------------------------------------------------------------------
// What the daemon sees

TEST(PipelineStatsControl, SnapshotNamesOutputsAndKeepsEventTotals) {
  PipelineStats stats;
  EXPECT_FALSE(stats.snapshot().control.has_value());
  stats.set_control_outputs({"cls", "det"});
  ControlRecord r{};
  r.iteration = 41;
  r.num_outputs = 2;
  r.mean_luma = 0.25f;
  r.motion = 0.01f;
  r.health_flags = 1u << Health::kBlack;
  r.health_events[Health::kBlack] = 2;
  r.out[0] = {2.f, 0.5f, 0.02f, 10, 20, 64, 48};
  r.out[1] = {1.f, 0.25f, 0.01f, 0, 0, 320, 180};
  stats.set_control(r);
  const auto c = stats.snapshot().control;
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->frames, 42u);
  EXPECT_FLOAT_EQ(float(c->mean_luma), 0.25f);
  EXPECT_TRUE(c->health[Health::kBlack]);
  EXPECT_FALSE(c->health[Health::kFrozen]);
  EXPECT_EQ(c->health_events[Health::kBlack], 2u);
  ASSERT_EQ(c->outputs.size(), 2u);
  EXPECT_EQ(c->outputs[0].name, "cls");
  EXPECT_FLOAT_EQ(float(c->outputs[0].gain), 2.f);
  EXPECT_EQ((std::array{c->outputs[0].x, c->outputs[0].y, c->outputs[0].w, c->outputs[0].h}),
            (std::array{10, 20, 64, 48}));
  // A re-setup (new frame size) restarts the engine's counters; the totals carry on.
  stats.set_control_outputs({"cls", "det"});
  EXPECT_FALSE(stats.snapshot().control.has_value());
  r.iteration = 0;
  r.health_events[Health::kBlack] = 1;
  stats.set_control(r);
  EXPECT_EQ(stats.snapshot().control->health_events[Health::kBlack], 3u);
}

TEST(PublishedRecordCheck, ChangesWithEveryWordAndTheSequence) {
  // The host accepts a record-ring entry only when its check matches (control_cuda.cpp): a torn or
  // half-written entry, or one of another iteration, must not match.
  std::mt19937 rng(4242);
  constexpr size_t kWords = sizeof(ControlRecord) / 4;
  const auto random_record = [&] {
    std::array<uint32_t, kWords> w{};
    for (auto& v : w) v = static_cast<uint32_t>(rng());
    ControlRecord r{};
    std::memcpy(&r, w.data(), sizeof r);
    return r;
  };
  const ControlRecord r = random_record(), other = random_record();
  constexpr uint64_t kSeq = 1234567;
  const uint64_t base = control::record_check(kSeq, r);
  EXPECT_EQ(control::record_check(kSeq, r), base) << "not deterministic";
  EXPECT_NE(control::record_check(kSeq + 1, r), base) << "the same record of another iteration";
  for (size_t i = 0; i < kWords; ++i) {
    ControlRecord changed = r;
    reinterpret_cast<uint32_t*>(&changed)[i] ^= 1u << (rng() % 32);
    EXPECT_NE(control::record_check(kSeq, changed), base) << "one bit of word " << i;
    ControlRecord torn = r;   // words from i on still the other record's
    std::memcpy(reinterpret_cast<uint32_t*>(&torn) + i, reinterpret_cast<const uint32_t*>(&other) + i,
                4 * (kWords - i));
    EXPECT_NE(control::record_check(kSeq, torn), base) << "torn from word " << i;
  }
  ControlRecord swapped = r;   // two words exchanged: the check depends on where each word is
  std::swap(reinterpret_cast<uint32_t*>(&swapped)[0], reinterpret_cast<uint32_t*>(&swapped)[1]);
  ASSERT_NE(std::memcmp(&swapped, &r, sizeof r), 0) << "seeded words 0 and 1 differ";
  EXPECT_NE(control::record_check(kSeq, swapped), base);
}

}  // namespace
}  // namespace framefuse
