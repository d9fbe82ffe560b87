//! OutputSpec -> Chain::Params: validation (one-line errors naming pipeline and output) and the
//! geometry of the torchvision / ultralytics conventions the specs promise.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "pipeline/error.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

FrameInfo frame(int32_t w, int32_t h, ops::PixelFormat f = ops::PixelFormat::Nv12) {
  FrameInfo fi;
  fi.width = w;
  fi.height = h;
  fi.format = f;
  return fi;
}

OutputSpec output(const char* name) {
  OutputSpec s;
  s.name = name;
  return s;
}

RectSpec pixels(double x, double y, double w, double h) { return {x, y, w, h, false}; }
RectSpec fraction(double x, double y, double w, double h) { return {x, y, w, h, true}; }

// ---------------------------------------------------------------------------------------------
// Validation

struct BadCase {
  const char* name;
  std::function<void(OutputSpec&)> edit;
  const char* message;   //!< must appear in the error, after the context
};

const BadCase kBadCases[] = {
    {"crop_outside_frame", [](OutputSpec& s) { s.crop = pixels(1900, 0, 100, 100); },
     "crop x=1900 y=0 w=100 h=100 does not lie inside the 1920x1080 frame"},
    {"crop_negative", [](OutputSpec& s) { s.crop = pixels(-1, 0, 10, 10); }, "does not lie inside the 1920x1080"},
    {"crop_below_frame", [](OutputSpec& s) { s.crop = pixels(0, 1000, 10, 81); }, "does not lie inside"},
    {"crop_zero_width", [](OutputSpec& s) { s.crop = pixels(0, 0, 0, 10); }, "crop x=0 y=0 w=0 h=10 is empty"},
    {"crop_fraction_rounds_to_nothing", [](OutputSpec& s) { s.crop = fraction(0.5, 0, 0.0001, 1); }, "is empty"},
    {"crop_fraction_past_edge", [](OutputSpec& s) { s.crop = fraction(0.5, 0, 0.6, 1); }, "does not lie inside"},
    {"crop_fraction_negative", [](OutputSpec& s) { s.crop = fraction(-0.1, 0, 0.5, 1); }, "must lie in [0, 1]"},
    {"crop_fraction_above_one", [](OutputSpec& s) { s.crop = fraction(0, 0, 1.5, 1); }, "must lie in [0, 1]"},
    {"crop_not_whole_pixels", [](OutputSpec& s) { s.crop = pixels(10.5, 0, 100, 100); }, "must be a whole number"},
    {"crop_huge_pixels", [](OutputSpec& s) { s.crop = pixels(0, 0, 1e12, 100); }, "must be a whole number"},
    {"crop_nan", [](OutputSpec& s) { s.crop = pixels(0, NAN, 10, 10); }, "is not finite"},
    {"center_crop_zero", [](OutputSpec& s) { s.center_crop = std::array<int32_t, 2>{0, 224}; },
     "center_crop must be positive, got 0x224"},
    {"center_crop_negative", [](OutputSpec& s) { s.center_crop = std::array<int32_t, 2>{224, -1}; },
     "center_crop must be positive"},
    {"resize_one_side", [](OutputSpec& s) { s.resize = {224, 0, 0}; },
     "resize 224x0 needs a positive width and height"},
    {"resize_negative", [](OutputSpec& s) { s.resize = {-5, 10, 0}; }, "resize -5x10 needs a positive"},
    {"resize_shorter_side_negative", [](OutputSpec& s) { s.resize = {0, 0, -256}; },
     "shorter_side -256 must be positive"},
    {"resize_both_kinds", [](OutputSpec& s) { s.resize = {224, 224, 256}; }, "give one"},
    {"letterbox_without_size", [](OutputSpec& s) { s.aspect = AspectMode::Letterbox; },
     "aspect letterbox needs a resize width and height"},
    {"fill_with_shorter_side",
     [](OutputSpec& s) {
       s.aspect = AspectMode::CenterCropFill;
       s.resize.shorter_side = 256;
     },
     "aspect fill needs a resize width and height"},
    {"std_zero", [](OutputSpec& s) { s.std = {1.f, 0.f, 1.f}; }, "std[1] = 0 (must be finite and non-zero)"},
    {"std_negative_zero", [](OutputSpec& s) { s.std = {-0.f, 1.f, 1.f}; }, "std[0] = -0"},
    {"std_nan", [](OutputSpec& s) { s.std = {1.f, 1.f, NAN}; }, "std[2] = nan"},
    {"std_inf", [](OutputSpec& s) { s.std = {INFINITY, 1.f, 1.f}; }, "std[0] = inf"},
    {"mean_nan", [](OutputSpec& s) { s.mean = {0.f, 0.f, NAN}; }, "mean[2] = nan (must be finite)"},
    {"scale_inf", [](OutputSpec& s) { s.scale = INFINITY; }, "scale = inf (must be finite)"},
    {"pad_nan", [](OutputSpec& s) { s.pad_value = {NAN, 0.f, 0.f}; }, "pad_value[0] = nan"},
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class PlanRejects : public testing::TestWithParam<BadCase> {};

TEST_P(PlanRejects, WithOneLineMessageNamingPipelineAndOutput) {
  PipelineSpec spec;
  spec.name = "lobby";
  spec.outputs = {output("thumb"), output("cls")};
  GetParam().edit(spec.outputs[1]);
  try {
    make_output_plans(spec, frame(1920, 1080));
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("pipeline 'lobby' output 'cls': ", 0), 0u) << msg;
    EXPECT_NE(msg.find(GetParam().message), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PlanRejects, testing::ValuesIn(kBadCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Geometry

struct Geometry {
  int32_t src_x, src_y, src_w, src_h, resized_w, resized_h, off_x, off_y, out_w, out_h;
  bool operator==(const Geometry&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Geometry& g) {
  return os << "crop (" << g.src_x << ", " << g.src_y << ") " << g.src_w << "x" << g.src_h << " -> resized "
            << g.resized_w << "x" << g.resized_h << " window (" << g.off_x << ", " << g.off_y << ") " << g.out_w
            << "x" << g.out_h;
}

Geometry geometry(const OutputPlan& p) {
  const auto& r = p.params.resize;
  return {r.x0, r.y0, r.src_w, r.src_h, r.dst_w, r.dst_h, p.params.off_x, p.params.off_y, p.width(), p.height()};
}

struct GeometryCase {
  const char* name;
  int32_t fw, fh;
  std::function<void(OutputSpec&)> edit;
  Geometry want;
};

const GeometryCase kGeometryCases[] = {
    // torchvision Resize(256) + CenterCrop(224): int(256 * 1920 / 1080) = 455, round(231 / 2) = 116.
    {"resize256_centercrop224_landscape", 1920, 1080,
     [](OutputSpec& s) {
       s.resize.shorter_side = 256;
       s.center_crop = std::array<int32_t, 2>{224, 224};
     },
     {0, 0, 1920, 1080, 455, 256, 116, 16, 224, 224}},
    {"resize256_centercrop224_portrait", 1080, 1920,
     [](OutputSpec& s) {
       s.resize.shorter_side = 256;
       s.center_crop = std::array<int32_t, 2>{224, 224};
     },
     {0, 0, 1080, 1920, 256, 455, 16, 116, 224, 224}},
    {"resize256_square", 500, 500, [](OutputSpec& s) { s.resize.shorter_side = 256; },
     {0, 0, 500, 500, 256, 256, 0, 0, 256, 256}},
    // Python round(2.5) == 2: offsets tie to even.
    {"centercrop_tie_to_even", 10, 12, [](OutputSpec& s) { s.center_crop = std::array<int32_t, 2>{5, 7}; },
     {0, 0, 10, 12, 10, 12, 2, 2, 5, 7}},
    // Crop larger than the image: torchvision pads (crop - size) // 2 before, the rest after.
    {"centercrop_larger_than_image", 5, 3, [](OutputSpec& s) { s.center_crop = std::array<int32_t, 2>{8, 6}; },
     {0, 0, 5, 3, 5, 3, -1, -1, 8, 6}},
    // ultralytics letterbox: 1920x1080 -> 640x360, 140 pad rows above and below.
    {"letterbox_640", 1920, 1080,
     [](OutputSpec& s) {
       s.resize = {640, 640, 0};
       s.aspect = AspectMode::Letterbox;
     },
     {0, 0, 1920, 1080, 640, 360, 0, -140, 640, 640}},
    {"letterbox_odd_pad_goes_below", 1920, 1080,
     [](OutputSpec& s) {
       s.resize = {640, 641, 0};
       s.aspect = AspectMode::Letterbox;
     },
     {0, 0, 1920, 1080, 640, 360, 0, -140, 640, 641}},
    {"letterbox_portrait", 1080, 1920,
     [](OutputSpec& s) {
       s.resize = {640, 640, 0};
       s.aspect = AspectMode::Letterbox;
     },
     {0, 0, 1080, 1920, 360, 640, -140, 0, 640, 640}},
    // round(5 * 0.5) = round(2.5) = 2 in Python.
    {"letterbox_size_ties_to_even", 5, 2,
     [](OutputSpec& s) {
       s.resize = {10, 1, 0};
       s.aspect = AspectMode::Letterbox;
     },
     {0, 0, 5, 2, 2, 1, -4, 0, 10, 1}},
    // Fill: scale to cover (1920 * 640 / 1080 = 1137.8 -> 1138), centre crop round(498 / 2) = 249.
    {"fill_640", 1920, 1080,
     [](OutputSpec& s) {
       s.resize = {640, 640, 0};
       s.aspect = AspectMode::CenterCropFill;
     },
     {0, 0, 1920, 1080, 1138, 640, 249, 0, 640, 640}},
    {"fill_offset_ties_to_even", 1920, 1080,
     [](OutputSpec& s) {
       s.resize = {641, 640, 0};
       s.aspect = AspectMode::CenterCropFill;
     },
     {0, 0, 1920, 1080, 1138, 640, 248, 0, 641, 640}},
    {"stretch", 1920, 1080, [](OutputSpec& s) { s.resize = {300, 100, 0}; },
     {0, 0, 1920, 1080, 300, 100, 0, 0, 300, 100}},
    {"pixel_crop_no_resize", 1920, 1080, [](OutputSpec& s) { s.crop = pixels(10, 20, 30, 40); },
     {10, 20, 30, 40, 30, 40, 0, 0, 30, 40}},
    // Fractional crops round their edges: the two halves of an odd frame tile it exactly.
    {"fraction_right_half_odd_frame", 1919, 1079, [](OutputSpec& s) { s.crop = fraction(0.5, 0.5, 0.5, 0.5); },
     {960, 540, 959, 539, 959, 539, 0, 0, 959, 539}},
    {"fraction_left_half_odd_frame", 1919, 1079, [](OutputSpec& s) { s.crop = fraction(0, 0, 0.5, 0.5); },
     {0, 0, 960, 540, 960, 540, 0, 0, 960, 540}},
    {"crop_then_letterbox", 1920, 1080,
     [](OutputSpec& s) {
       s.crop = pixels(100, 50, 300, 600);
       s.resize = {320, 320, 0};
       s.aspect = AspectMode::Letterbox;
     },
     {100, 50, 300, 600, 160, 320, -80, 0, 320, 320}},
};

void PrintTo(const GeometryCase& c, std::ostream* os) { *os << c.name; }

class PlanGeometry : public testing::TestWithParam<GeometryCase> {};

TEST_P(PlanGeometry, MatchesConvention) {
  const GeometryCase& c = GetParam();
  OutputSpec spec = output("out");
  c.edit(spec);
  const OutputPlan plan = make_output_plan(spec, frame(c.fw, c.fh), "test");
  EXPECT_EQ(geometry(plan), c.want);
  const auto& r = plan.params.resize;
  EXPECT_EQ(r.inv_scale_x, double(r.dst_w) / r.src_w);
  EXPECT_EQ(r.scale_x, 1.0 / r.inv_scale_x);   // as cv::resize derives it
  EXPECT_EQ(r.inv_scale_y, double(r.dst_h) / r.src_h);
  EXPECT_EQ(r.scale_y, 1.0 / r.inv_scale_y);
}

INSTANTIATE_TEST_SUITE_P(Cases, PlanGeometry, testing::ValuesIn(kGeometryCases),
                         [](const auto& info) { return std::string(info.param.name); });

//! The letterbox pad rows really are pad once the plan runs, and the rows next to them are not.
TEST(PlanGeometry, LetterboxPadRowsAreExactlyPad) {
  const test::HostImage img = test::random_image(ops::PixelFormat::Nv12, 1920, 1080, 17u);
  OutputSpec spec = output("det");
  spec.resize = {640, 640, 0};
  spec.aspect = AspectMode::Letterbox;
  spec.pad_value = {114.f, 20.f, 230.f};
  spec.scale = 1.f;
  spec.layout = ops::Layout::Hwc;
  spec.dtype = ops::DType::U8;
  const FrameInfo fi = test::frame_info(img);
  const OutputPlan plan = make_output_plan(spec, fi, "test");
  CpuExecutor exec(1);
  exec.setup(fi, make_color_params({}, fi), std::span(&plan, 1), 1);
  auto outs = test::poisoned_outputs(std::span(&plan, 1), 1);
  const ops::ImageView view = img.view();
  exec.process(std::span(&view, 1), test::pointers(outs));
  const auto at = [&](int x, int y, int c) { return std::to_integer<int>(outs[0][(size_t(y) * 640 + x) * 3 + c]); };
  const auto row_is_pad = [&](int y) {
    for (int x = 0; x < 640; ++x)
      if (at(x, y, 0) != 114 || at(x, y, 1) != 20 || at(x, y, 2) != 230) return false;
    return true;
  };
  for (int y = 0; y < 140; ++y) ASSERT_TRUE(row_is_pad(y)) << "row " << y;
  for (int y = 500; y < 640; ++y) ASSERT_TRUE(row_is_pad(y)) << "row " << y;
  EXPECT_FALSE(row_is_pad(140));
  EXPECT_FALSE(row_is_pad(499));
}

// ---------------------------------------------------------------------------------------------
// Everything else a plan carries

TEST(Plan, AreaResolvesLikeCvResize) {
  const auto interp = [](int32_t w, int32_t h, ops::Interp i) {
    OutputSpec s = output("o");
    s.resize = {w, h, 0};
    s.interp = i;
    return make_output_plan(s, frame(640, 480), "t").params.resize.interp;
  };
  EXPECT_EQ(interp(320, 240, ops::Interp::Area), ops::Interp::AreaBox);   // shrink both
  EXPECT_EQ(interp(640, 480, ops::Interp::Area), ops::Interp::AreaBox);   // same size
  EXPECT_EQ(interp(641, 240, ops::Interp::Area), ops::Interp::AreaUp);    // enlarge one axis
  EXPECT_EQ(interp(1280, 960, ops::Interp::Area), ops::Interp::AreaUp);
  EXPECT_EQ(interp(320, 240, ops::Interp::Linear), ops::Interp::Linear);
  EXPECT_EQ(interp(320, 240, ops::Interp::Nearest), ops::Interp::Nearest);
}

TEST(Plan, NormalizeFoldsIntoMulAdd) {
  OutputSpec s = output("o");
  s.scale = 1.f / 255.f;
  s.mean = {0.485f, 0.456f, 0.406f};
  s.std = {0.229f, 0.224f, 0.225f};
  const OutputPlan p = make_output_plan(s, frame(64, 48), "t");
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(p.params.norm.mul[c], s.scale / s.std[c]);
    EXPECT_FLOAT_EQ(p.params.norm.add[c], -s.mean[c] / s.std[c]);
  }
}

TEST(Plan, ShapesBytesAndChannels) {
  struct Case {
    ChannelOrder ch;
    ops::Layout layout;
    ops::DType dtype;
    std::vector<int64_t> shape;
    size_t bytes;
    ops::Channels channels;
  };
  const Case cases[] = {
      {ChannelOrder::Rgb, ops::Layout::Chw, ops::DType::F32, {3, 30, 40}, 3 * 30 * 40 * 4, ops::Channels::Rgb},
      {ChannelOrder::Bgr, ops::Layout::Hwc, ops::DType::F16, {30, 40, 3}, 3 * 30 * 40 * 2, ops::Channels::Bgr},
      {ChannelOrder::Gray, ops::Layout::Hwc, ops::DType::U8, {30, 40, 1}, 30 * 40, ops::Channels::Gray},
      {ChannelOrder::Gray, ops::Layout::Chw, ops::DType::F16, {1, 30, 40}, 30 * 40 * 2, ops::Channels::Gray},
  };
  for (const Case& c : cases) {
    OutputSpec s = output("o");
    s.resize = {40, 30, 0};
    s.channels = c.ch;
    s.layout = c.layout;
    s.dtype = c.dtype;
    const OutputPlan p = make_output_plan(s, frame(640, 480), "t");
    EXPECT_EQ(p.shape, c.shape);
    EXPECT_EQ(p.bytes_per_frame, c.bytes);
    EXPECT_EQ(p.params.frame_stride, static_cast<int64_t>(c.bytes));
    EXPECT_EQ(p.params.channels, c.channels);
    EXPECT_EQ(p.params.store.channels, c.shape[c.layout == ops::Layout::Chw ? 0 : 2]);
    EXPECT_EQ(p.params.store.data, nullptr);
    EXPECT_EQ(p.name, "o");
  }
}

TEST(Plan, ColorSpecOverridesStreamMetadata) {
  FrameInfo fi = frame(64, 48);
  fi.matrix = ops::ColorMatrix::Bt601;
  fi.range = ops::ColorRange::Limited;
  fi.chroma_location = ops::ChromaLocation::Center;
  ColorSpec spec;
  spec.chroma_upsample = ops::ChromaUpsample::Linear;
  auto same = [](const ops::YuvToRgb::Params& a, const ops::YuvToRgb::Params& b) {
    return a.ky == b.ky && a.y_off == b.y_off && a.rv == b.rv && a.gu == b.gu && a.gv == b.gv && a.bu == b.bu;
  };
  ops::ColorParams c = make_color_params(spec, fi);
  EXPECT_TRUE(same(c.yuv, ops::make_yuv_to_rgb(ops::ColorMatrix::Bt601, ops::ColorRange::Limited)));
  EXPECT_EQ(c.upsample, ops::ChromaUpsample::Linear);
  EXPECT_EQ(c.location, ops::ChromaLocation::Center);
  spec.matrix = ops::ColorMatrix::Bt709;
  c = make_color_params(spec, fi);
  EXPECT_TRUE(same(c.yuv, ops::make_yuv_to_rgb(ops::ColorMatrix::Bt709, ops::ColorRange::Limited)));
  spec.range = ops::ColorRange::Full;
  c = make_color_params(spec, fi);
  EXPECT_TRUE(same(c.yuv, ops::make_yuv_to_rgb(ops::ColorMatrix::Bt709, ops::ColorRange::Full)));
}

TEST(Plan, PlansEveryOutputInOrder) {
  PipelineSpec spec;
  spec.name = "p";
  spec.outputs = {output("a"), output("b"), output("c")};
  spec.outputs[1].resize = {32, 16, 0};
  const auto plans = make_output_plans(spec, frame(64, 48));
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].name, "a");
  EXPECT_EQ(plans[1].name, "b");
  EXPECT_EQ(plans[1].width(), 32);
  EXPECT_EQ(plans[2].name, "c");
}

TEST(Plan, DescribeFrame) {
  FrameInfo fi = frame(1920, 1080);
  fi.matrix = ops::ColorMatrix::Bt709;
  EXPECT_EQ(describe(fi), "1920x1080 nv12 bt709/limited");
  fi = frame(640, 480, ops::PixelFormat::P010);
  fi.range = ops::ColorRange::Full;
  EXPECT_EQ(describe(fi), "640x480 p010 bt601/full");
  fi.format = ops::PixelFormat::Yuv420p10;
  EXPECT_EQ(describe(fi), "640x480 yuv420p10 bt601/full");
}

}  // namespace
}  // namespace framefuse
