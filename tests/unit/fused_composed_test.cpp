//! Fusion changes nothing: the CpuExecutor's fused result equals the ops applied one at a time with
//! every intermediate materialised (whole frame -> float RGB image -> crop -> separable resize with
//! Resize's own per-axis taps -> window/pad -> channel order -> normalize -> store), bit for bit for
//! u8/f16 and within 1e-6 for f32, over every format, chroma mode, interpolation, aspect, channel
//! order, layout and dtype, several outputs at once and batches of frames.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/ops/dispatch.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

using ops::PixelFormat;
using ops::Vec3;

// ---------------------------------------------------------------------------------------------
// The composed reference

struct FloatImage {
  int w = 0, h = 0;
  std::vector<Vec3> px;
  const Vec3& at(int x, int y) const { return px[size_t(y) * w + x]; }
};

//! Step 1: the whole frame to float RGB, through the colour op alone.
FloatImage to_float_rgb(const test::HostImage& img, const ops::ColorParams& color) {
  FloatImage out{img.width, img.height, {}};
  out.px.reserve(size_t(img.width) * img.height);
  ops::dispatch_format(img.format, [&](auto tag) {
    const ops::FrameReader<decltype(tag)::value> reader{img.view(), color};
    for (int y = 0; y < img.height; ++y)
      for (int x = 0; x < img.width; ++x) out.px.push_back(reader.rgb(x, y));
  });
  return out;
}

//! Step 2: the crop, copied out.
FloatImage crop(const FloatImage& in, int x0, int y0, int w, int h) {
  FloatImage out{w, h, {}};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) out.px.push_back(in.at(x0 + x, y0 + y));
  return out;
}

//! (source index, weight) pairs of one output index on one axis, in accumulation order.
using Taps = std::vector<std::pair<int, float>>;

Taps axis_taps(ops::Interp interp, int d, double scale, double inv_scale, int n) {
  using R = ops::Resize;
  switch (interp) {
    case ops::Interp::Nearest: return {{R::nearest_tap(d, scale, n), 1.f}};
    case ops::Interp::AreaBox: {
      const R::Box b = R::area_box(d, scale, n);
      Taps t;
      for (int i = b.first; i <= b.last; ++i) t.emplace_back(i, R::box_weight(b, i));
      return t;
    }
    case ops::Interp::AreaUp: {
      const R::Taps2 t = R::area_up_taps(d, scale, inv_scale, n);
      return {{t.i0, 1.f - t.a}, {t.i1, t.a}};
    }
    default: {
      const R::Taps2 t = R::linear_taps(d, scale, n);
      return {{t.i0, 1.f - t.a}, {t.i1, t.a}};
    }
  }
}

//! Step 3: resize in two materialised passes, rows first (the fused op sums each row of taps,
//! then the rows, so the float operations are the same ones in the same order).
FloatImage resize(const FloatImage& in, const ops::Resize::Params& p) {
  FloatImage rows{p.dst_w, in.h, std::vector<Vec3>(size_t(p.dst_w) * in.h)};
  for (int dx = 0; dx < p.dst_w; ++dx) {
    const Taps taps = axis_taps(p.interp, dx, p.scale_x, p.inv_scale_x, in.w);
    for (int y = 0; y < in.h; ++y) {
      Vec3 acc{0.f, 0.f, 0.f};
      for (const auto& [i, wt] : taps) acc = acc + in.at(i, y) * wt;
      rows.px[size_t(y) * rows.w + dx] = acc;
    }
  }
  FloatImage out{p.dst_w, p.dst_h, std::vector<Vec3>(size_t(p.dst_w) * p.dst_h)};
  for (int dy = 0; dy < p.dst_h; ++dy) {
    const Taps taps = axis_taps(p.interp, dy, p.scale_y, p.inv_scale_y, in.h);
    for (int x = 0; x < p.dst_w; ++x) {
      Vec3 acc{0.f, 0.f, 0.f};
      for (const auto& [i, wt] : taps) acc = acc + rows.at(x, i) * wt;
      out.px[size_t(dy) * out.w + x] = acc;
    }
  }
  return out;
}

//! Step 4: the aspect window over the resized image; outside it, the pad colour.
FloatImage window(const FloatImage& in, const ops::Chain::Params& p) {
  FloatImage out{p.store.width, p.store.height, {}};
  for (int y = 0; y < out.h; ++y) {
    for (int x = 0; x < out.w; ++x) {
      const int rx = x + p.off_x, ry = y + p.off_y;
      const bool inside = rx >= 0 && ry >= 0 && rx < in.w && ry < in.h;
      out.px.push_back(inside ? in.at(rx, ry) : Vec3{p.pad[0], p.pad[1], p.pad[2]});
    }
  }
  return out;
}

//! Steps 5-7: channel order, normalize, store into a tensor of the plan's layout and dtype.
std::vector<std::byte> store(const FloatImage& in, const ops::Chain::Params& p) {
  const int nc = p.store.channels, w = in.w, h = in.h;
  std::vector<std::byte> out(size_t(nc) * w * h * ops::dtype_size(p.store.dtype));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      const Vec3 v = in.at(x, y);
      float ch[3] = {v.x, v.y, v.z};
      if (p.channels == ops::Channels::Bgr) std::swap(ch[0], ch[2]);
      if (p.channels == ops::Channels::Gray) ch[0] = 0.299f * v.x + 0.587f * v.y + 0.114f * v.z;
      for (int c = 0; c < nc; ++c) {
        const float n = ch[c] * p.norm.mul[c] + p.norm.add[c];
        const size_t i =
            p.store.layout == ops::Layout::Chw ? (size_t(c) * h + y) * w + x : (size_t(y) * w + x) * nc + c;
        switch (p.store.dtype) {
          case ops::DType::F32: std::memcpy(out.data() + 4 * i, &n, 4); break;
          case ops::DType::F16: {
            const uint16_t hb = ops::to_half_bits(n);
            std::memcpy(out.data() + 2 * i, &hb, 2);
            break;
          }
          case ops::DType::U8: out[i] = std::byte{ops::saturate_u8(n)}; break;
        }
      }
    }
  }
  return out;
}

std::vector<std::byte> composed(const FloatImage& frame_rgb, const OutputPlan& plan) {
  const auto& r = plan.params.resize;
  return store(window(resize(crop(frame_rgb, r.x0, r.y0, r.src_w, r.src_h), r), plan.params), plan.params);
}

// ---------------------------------------------------------------------------------------------
// Running the fused executor and comparing

struct Scenario {
  PixelFormat format;
  int fw, fh;
  ops::ColorMatrix matrix;
  ops::ColorRange range;
  ops::ChromaUpsample upsample;
  ops::ChromaLocation location;
  std::vector<OutputSpec> outputs;
  int batch;
  uint32_t seed;
};

std::string describe(const Scenario& s) {
  return std::to_string(s.fw) + "x" + std::to_string(s.fh) + " format " + std::to_string(int(s.format)) +
         " matrix " + std::to_string(int(s.matrix)) + " range " + std::to_string(int(s.range)) + " upsample " +
         std::to_string(int(s.upsample)) + " location " + std::to_string(int(s.location)) + " batch " +
         std::to_string(s.batch) + " seed " + std::to_string(s.seed);
}

constexpr size_t kGuard = 64;   //!< bytes after each output buffer that must stay untouched

//! Runs the fused executor over `s` twice, into buffers pre-filled with 0xFF (NaN for floats) and
//! with 0x00, each followed by a guard zone: identical results mean every element was written.
void expect_fused_equals_composed(const Scenario& s, int threads) {
  SCOPED_TRACE(describe(s));
  std::vector<test::HostImage> frames;
  std::vector<ops::ImageView> views;
  for (int b = 0; b < s.batch; ++b) {
    // 10-bit rows hold u16 samples: keep pitches even as real frames have them.
    const int pad = ops::sample_bytes(s.format) == 2 ? 4 : 3;
    frames.push_back(test::random_image(s.format, s.fw, s.fh, s.seed * 7919u + b, pad));
  }
  for (const auto& f : frames) views.push_back(f.view());
  FrameInfo fi = test::frame_info(frames[0], s.matrix, s.range);
  fi.chroma_location = s.location;
  ColorSpec color_spec;
  color_spec.chroma_upsample = s.upsample;
  const ops::ColorParams color = make_color_params(color_spec, fi);
  std::vector<OutputPlan> plans;
  for (const auto& o : s.outputs) plans.push_back(make_output_plan(o, fi, "output '" + o.name + "'"));

  CpuExecutor exec(threads);
  exec.setup(fi, color, plans, s.batch);
  std::vector<std::vector<std::byte>> runs[2];
  for (int run = 0; run < 2; ++run) {
    const std::byte fill{static_cast<unsigned char>(run ? 0x00 : 0xFF)};
    for (const auto& p : plans) runs[run].emplace_back(p.bytes_per_frame * s.batch + kGuard, fill);
    std::vector<std::byte*> ptrs;
    for (auto& b : runs[run]) ptrs.push_back(b.data());
    exec.process(views, ptrs);
  }

  for (int b = 0; b < s.batch; ++b) {
    const FloatImage rgb = to_float_rgb(frames[b], color);
    for (size_t k = 0; k < plans.size(); ++k) {
      const OutputPlan& plan = plans[k];
      const size_t bytes = plan.bytes_per_frame;
      const std::span<const std::byte> got(runs[0][k].data() + b * bytes, bytes);
      const std::span<const std::byte> got_zero(runs[1][k].data() + b * bytes, bytes);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), got_zero.begin()))
          << "output '" << plan.name << "' frame " << b << ": unwritten elements (poison differs)";
      const std::vector<std::byte> want = composed(rgb, plan);
      if (plan.params.store.dtype == ops::DType::F32) {
        const auto g = test::to_double(got, ops::DType::F32), w = test::to_double(want, ops::DType::F32);
        const test::Diff d = test::compare(g, w, 1.0);
        EXPECT_EQ(d.non_finite, 0u) << "output '" << plan.name << "' frame " << b;
        EXPECT_LE(d.max_rel, 1e-6) << "output '" << plan.name << "' frame " << b;
      } else {
        const auto mismatch = std::mismatch(got.begin(), got.end(), want.begin());
        EXPECT_TRUE(mismatch.first == got.end())
            << "output '" << plan.name << "' frame " << b << ": first difference at byte "
            << (mismatch.first - got.begin()) << " of " << bytes;
      }
    }
  }
  for (size_t k = 0; k < plans.size(); ++k) {
    for (int run = 0; run < 2; ++run) {
      const auto& buf = runs[run][k];
      const std::byte fill{static_cast<unsigned char>(run ? 0x00 : 0xFF)};
      EXPECT_TRUE(std::all_of(buf.end() - kGuard, buf.end(), [&](std::byte v) { return v == fill; }))
          << "output '" << plans[k].name << "' wrote past its last frame";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// A table of op combinations, each run next to a companion output (horizontal fusion), 3 frames.

OutputSpec out(const char* name, std::function<void(OutputSpec&)> edit) {
  OutputSpec s;
  s.name = name;
  edit(s);
  return s;
}

struct Combo {
  const char* name;
  PixelFormat format;
  int fw, fh;
  ops::ChromaUpsample upsample;
  ops::ChromaLocation location;
  std::function<void(OutputSpec&)> edit;
};

using ops::ChromaLocation;
using ops::ChromaUpsample;
using ops::DType;
using ops::Interp;
using ops::Layout;

const Combo kCombos[] = {
    {"nv12_classify_f32_chw", PixelFormat::Nv12, 1920, 1080, ChromaUpsample::Nearest, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.resize.shorter_side = 256;
       s.center_crop = std::array<int32_t, 2>{224, 224};
       s.mean = {0.485f, 0.456f, 0.406f};
       s.std = {0.229f, 0.224f, 0.225f};
     }},
    {"nv12_letterbox_f16_chw", PixelFormat::Nv12, 640, 360, ChromaUpsample::Linear, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.resize = {320, 320, 0};
       s.aspect = AspectMode::Letterbox;
       s.dtype = DType::F16;
     }},
    {"p010_linear_chroma_area_box_u8_hwc", PixelFormat::P010, 97, 61, ChromaUpsample::Linear, ChromaLocation::Center,
     [](OutputSpec& s) {
       s.resize = {40, 25, 0};
       s.interp = Interp::Area;
       s.scale = 1.f;
       s.layout = Layout::Hwc;
       s.dtype = DType::U8;
     }},
    {"p010_nearest_fill_bgr_f16", PixelFormat::P010, 64, 48, ChromaUpsample::Nearest, ChromaLocation::TopLeft,
     [](OutputSpec& s) {
       s.resize = {30, 50, 0};
       s.aspect = AspectMode::CenterCropFill;
       s.interp = Interp::Nearest;
       s.channels = ChannelOrder::Bgr;
       s.dtype = DType::F16;
     }},
    {"yuv420p10_linear_letterbox_f16", PixelFormat::Yuv420p10, 75, 43, ChromaUpsample::Linear, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.crop = {3, 2, 61, 39, false};
       s.resize = {48, 48, 0};
       s.aspect = AspectMode::Letterbox;
       s.dtype = DType::F16;
     }},
    {"yuv422p_linear_crop_area_u8", PixelFormat::Yuv422p, 77, 45, ChromaUpsample::Linear, ChromaLocation::Center,
     [](OutputSpec& s) {
       s.crop = {5, 3, 60, 40, false};
       s.resize = {20, 13, 0};
       s.interp = Interp::Area;
       s.layout = Layout::Hwc;
       s.dtype = DType::U8;
     }},
    {"yuv420p_area_up_gray_f32", PixelFormat::Yuv420p, 33, 17, ChromaUpsample::Linear, ChromaLocation::TopLeft,
     [](OutputSpec& s) {
       s.resize = {64, 31, 0};
       s.interp = Interp::Area;
       s.channels = ChannelOrder::Gray;
     }},
    {"yuv420p_crop_letterbox_nearest_u8", PixelFormat::Yuv420p, 71, 45, ChromaUpsample::Nearest, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.crop = {5, 3, 31, 40, false};
       s.resize = {24, 24, 0};
       s.aspect = AspectMode::Letterbox;
       s.interp = Interp::Nearest;
       s.pad_value = {0.f, 128.f, 255.f};
       s.scale = 1.f;
       s.dtype = DType::U8;
     }},
    {"rgb24_mixed_area_up_bgr_hwc_f32", PixelFormat::Rgb24, 100, 20, ChromaUpsample::Nearest, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.resize = {40, 50, 0};
       s.interp = Interp::Area;
       s.channels = ChannelOrder::Bgr;
       s.layout = Layout::Hwc;
     }},
    {"bgr24_fill_linear_gray_u8", PixelFormat::Bgr24, 50, 30, ChromaUpsample::Nearest, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.resize = {20, 20, 0};
       s.aspect = AspectMode::CenterCropFill;
       s.channels = ChannelOrder::Gray;
       s.scale = 1.f;
       s.dtype = DType::U8;
       s.layout = Layout::Hwc;
     }},
    {"nv12_one_pixel_crop_upscale_f16_hwc", PixelFormat::Nv12, 16, 10, ChromaUpsample::Linear, ChromaLocation::Center,
     [](OutputSpec& s) {
       s.crop = {7, 3, 1, 1, false};
       s.resize = {5, 4, 0};
       s.dtype = DType::F16;
       s.layout = Layout::Hwc;
     }},
    {"nv12_odd_frame_fraction_crop_area_box", PixelFormat::Nv12, 45, 31, ChromaUpsample::Linear, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.crop = {0.5, 0.25, 0.5, 0.75, true};
       s.resize = {7, 9, 0};
       s.interp = Interp::Area;
       s.mean = {0.5f, 0.5f, 0.5f};
       s.std = {0.5f, 0.5f, 0.5f};
     }},
    {"nv12_center_crop_larger_pads", PixelFormat::Nv12, 12, 8, ChromaUpsample::Nearest, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.center_crop = std::array<int32_t, 2>{15, 11};
       s.pad_value = {1.f, 2.f, 3.f};
       s.dtype = DType::F16;
     }},
    {"yuv420p_to_1x1", PixelFormat::Yuv420p, 7, 5, ChromaUpsample::Linear, ChromaLocation::Center,
     [](OutputSpec& s) {
       s.resize = {1, 1, 0};
       s.interp = Interp::Area;
       s.dtype = DType::U8;
       s.scale = 1.f;
     }},
    {"rgb24_u8_saturating_normalize", PixelFormat::Rgb24, 20, 14, ChromaUpsample::Nearest, ChromaLocation::Left,
     [](OutputSpec& s) {
       s.resize = {13, 9, 0};
       s.scale = 1.7f;
       s.mean = {30.f, -40.f, 0.f};
       s.std = {0.9f, 1.f, 1.1f};
       s.dtype = DType::U8;
     }},
};

void PrintTo(const Combo& c, std::ostream* os) { *os << c.name; }

class FusedComposed : public testing::TestWithParam<Combo> {};

TEST_P(FusedComposed, MatchesMaterialisedOpsAlongsideACompanionOutput) {
  const Combo& c = GetParam();
  Scenario s{c.format, c.fw, c.fh, ops::ColorMatrix::Bt709, ops::ColorRange::Limited, c.upsample, c.location,
             {out("combo", c.edit), out("thumb", [](OutputSpec& o) {
                o.resize = {9, 5, 0};
                o.interp = Interp::Nearest;
                o.layout = Layout::Hwc;
                o.dtype = DType::U8;
                o.scale = 1.f;
              })},
             3, 11u};
  expect_fused_equals_composed(s, 3);
}

INSTANTIATE_TEST_SUITE_P(Cases, FusedComposed, testing::ValuesIn(kCombos),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Seeded random pipelines: 1-4 outputs, 1-3 frames, every setting drawn at random.

OutputSpec random_output(std::mt19937& rng, int fw, int fh, int index) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const auto uniform = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  OutputSpec s;
  s.name = "o" + std::to_string(index);
  switch (pick(fw >= 4 && fh >= 4 ? 3 : 2)) {   // fractional crops (>= 0.3 of a side) need 4 pixels
    case 0: break;   // whole frame
    case 1: {
      const int x = pick(fw), y = pick(fh);
      s.crop = {double(x), double(y), double(1 + pick(fw - x)), double(1 + pick(fh - y)), false};
      break;
    }
    default: {
      const double x = pick(50) / 100.0, y = pick(50) / 100.0;
      s.crop = {x, y, 0.3 + pick(20) / 100.0, 0.3 + pick(20) / 100.0, true};
      break;
    }
  }
  switch (pick(5)) {
    case 0: break;   // no resize
    case 1: s.resize.shorter_side = 1 + pick(40); break;
    default:
      s.resize = {1 + pick(40), 1 + pick(40), 0};
      s.aspect = static_cast<AspectMode>(pick(3));
      break;
  }
  if (pick(4) == 0) s.center_crop = std::array<int32_t, 2>{1 + pick(30), 1 + pick(30)};
  s.interp = static_cast<Interp>(pick(3));   // Nearest, Linear, Area
  s.channels = static_cast<ChannelOrder>(pick(3));
  s.layout = static_cast<Layout>(pick(2));
  s.dtype = static_cast<DType>(pick(3));
  s.pad_value = {float(pick(256)), float(pick(256)), float(pick(256))};
  s.scale = std::array{1.f, 1.f / 255.f, 0.5f, 2.3f}[pick(4)];
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = uniform(-1.f, 1.f) * (s.scale == 1.f ? 100.f : 1.f);
    s.std[c] = uniform(0.1f, 2.f) * (pick(4) ? 1.f : -1.f);
  }
  return s;
}

TEST(FusedComposedRandom, SeededPipelinesWithSeveralOutputsAndBatches) {
  std::mt19937 rng(20240607);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  for (uint32_t i = 0; i < 120; ++i) {
    Scenario s{};
    s.format = static_cast<PixelFormat>(pick(5));
    s.fw = 1 + pick(48);
    s.fh = 1 + pick(40);
    s.matrix = static_cast<ops::ColorMatrix>(pick(2));
    s.range = static_cast<ops::ColorRange>(pick(2));
    s.upsample = static_cast<ChromaUpsample>(pick(2));
    s.location = static_cast<ChromaLocation>(pick(3));
    const int n = 1 + pick(4);
    for (int k = 0; k < n; ++k) s.outputs.push_back(random_output(rng, s.fw, s.fh, k));
    s.batch = 1 + pick(3);
    s.seed = i;
    expect_fused_equals_composed(s, 1 + pick(3));
    if (HasFailure()) break;   // the first failing scenario says enough
  }
}

}  // namespace
}  // namespace framefuse
