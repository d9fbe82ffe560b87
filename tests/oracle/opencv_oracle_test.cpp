//! Independent oracle for the fused chain on the CPU: OpenCV's cvtColor, cv::resize, ROI crops,
//! copyMakeBorder and convertTo, run unfused on the same seeded random frames. uint8 results must
//! agree within 1 LSB (OpenCV uses fixed-point BT.601 and resize weights and rounds every stage).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

using ops::Interp;
using ops::PixelFormat;
using test::HostImage;

//! Our fused chain on one frame, one output; returns that output's bytes (poison checked by callers).
std::vector<std::byte> run_fused(const HostImage& img, const OutputSpec& spec, OutputPlan& plan) {
  const FrameInfo frame = test::frame_info(img);
  plan = make_output_plan(spec, frame, "oracle output '" + spec.name + "'");
  CpuExecutor exec(2);
  exec.setup(frame, make_color_params(ColorSpec{}, frame), std::span(&plan, 1), 1);
  auto outs = test::poisoned_outputs(std::span(&plan, 1), 1);
  auto ptrs = test::pointers(outs);
  const ops::ImageView view = img.view();
  exec.process(std::span(&view, 1), ptrs);
  return std::move(outs[0]);
}

//! A u8 output spec that leaves pixel values as they are (scale 1, mean 0, std 1, HWC).
OutputSpec pixel_spec(ChannelOrder channels = ChannelOrder::Rgb) {
  OutputSpec s;
  s.name = "oracle";
  s.scale = 1.f;
  s.channels = channels;
  s.layout = ops::Layout::Hwc;
  s.dtype = ops::DType::U8;
  return s;
}

//! The frame as OpenCV lays it out: 4:2:0 as one (h * 3 / 2) x w Mat, Y then chroma, no row padding;
//! 4:2:2 as packed YUY2.
cv::Mat to_cv_yuv(const HostImage& img) {
  if (img.format == PixelFormat::Yuv422p) {   // planar 4:2:2 as OpenCV's packed YUY2: Y0 U Y1 V (even width)
    cv::Mat m(img.height, img.width, CV_8UC2);
    for (int y = 0; y < img.height; ++y) {
      uint8_t* dst = m.ptr<uint8_t>(y);
      for (int x = 0; x < img.width; ++x) {
        dst[2 * x] = img.planes[0][size_t(y) * img.pitch[0] + x];
        dst[2 * x + 1] = img.planes[x % 2 == 0 ? 1 : 2][size_t(y) * img.pitch[1] + x / 2];
      }
    }
    return m;
  }
  cv::Mat m(img.height * 3 / 2, img.width, CV_8UC1);
  uint8_t* dst = m.data;
  for (int i = 0; i < ops::plane_count(img.format); ++i) {
    const auto s = ops::plane_shape(img.format, img.width, img.height, i);
    for (int r = 0; r < s.rows; ++r, dst += s.row_bytes)
      std::memcpy(dst, img.planes[i].data() + size_t(r) * img.pitch[i], s.row_bytes);
  }
  return m;
}

//! A packed RGB24 frame as a Mat over the frame's own (padded) memory.
cv::Mat wrap_rgb(const HostImage& img) {
  return cv::Mat(img.height, img.width, CV_8UC3, const_cast<uint8_t*>(img.planes[0].data()), img.pitch[0]);
}

int cv_interp(Interp i) {
  switch (i) {
    case Interp::Nearest: return cv::INTER_NEAREST;
    case Interp::Linear: return cv::INTER_LINEAR;
    default: return cv::INTER_AREA;
  }
}

const char* interp_name(Interp i) {
  static constexpr const char* kNames[] = {"nearest", "linear", "area", "areabox", "areaup"};
  return kNames[static_cast<int>(i)];
}

struct U8Diff {
  int max_abs = 0;
  size_t differing = 0, count = 0;
  int at = -1;   //!< first element with the largest difference
};

//! Element-wise |ours - theirs| over a continuous u8 Mat of the same element count.
U8Diff diff_u8(std::span<const std::byte> ours, const cv::Mat& theirs) {
  const cv::Mat t = theirs.isContinuous() ? theirs : theirs.clone();
  U8Diff d;
  d.count = t.total() * t.elemSize();
  EXPECT_EQ(ours.size(), d.count) << "output sizes differ";
  for (size_t i = 0; i < std::min(ours.size(), d.count); ++i) {
    const int e = std::abs(int(std::to_integer<uint8_t>(ours[i])) - int(t.data[i]));
    if (e > 0) ++d.differing;
    if (e > d.max_abs) {
      d.max_abs = e;
      d.at = static_cast<int>(i);
    }
  }
  return d;
}

std::string describe(const U8Diff& d, const cv::Mat& theirs) {
  const int cn = theirs.channels(), w = theirs.cols;
  const int px = d.at < 0 ? 0 : d.at / cn;
  return "max |diff| " + std::to_string(d.max_abs) + " at (x=" + std::to_string(px % w) +
         ", y=" + std::to_string(px / w) + ", c=" + std::to_string(d.at < 0 ? 0 : d.at % cn) + "), " +
         std::to_string(d.differing) + " of " + std::to_string(d.count) + " elements differ";
}

// ---------------------------------------------------------------------------------------------
// Colour: cvtColor YUV -> RGB/BGR (BT.601 limited, chroma replicated over 2x2; 4:2:2 as YUY2, over
// 2x1) vs our reader.

struct ColorCase {
  const char* name;
  PixelFormat format;
  int cv_code;
  ChannelOrder channels;
  int width, height;
};

constexpr ColorCase kColorCases[] = {
    {"nv12_rgb_64x48", PixelFormat::Nv12, cv::COLOR_YUV2RGB_NV12, ChannelOrder::Rgb, 64, 48},
    {"nv12_bgr_64x48", PixelFormat::Nv12, cv::COLOR_YUV2BGR_NV12, ChannelOrder::Bgr, 64, 48},
    {"i420_rgb_64x48", PixelFormat::Yuv420p, cv::COLOR_YUV2RGB_I420, ChannelOrder::Rgb, 64, 48},
    {"i420_bgr_34x18", PixelFormat::Yuv420p, cv::COLOR_YUV2BGR_I420, ChannelOrder::Bgr, 34, 18},
    {"nv12_rgb_2x2", PixelFormat::Nv12, cv::COLOR_YUV2RGB_NV12, ChannelOrder::Rgb, 2, 2},
    {"nv12_rgb_1920x1080", PixelFormat::Nv12, cv::COLOR_YUV2RGB_NV12, ChannelOrder::Rgb, 1920, 1080},
    {"i420_rgb_1280x720", PixelFormat::Yuv420p, cv::COLOR_YUV2RGB_I420, ChannelOrder::Rgb, 1280, 720},
    {"yuv422p_rgb_64x48", PixelFormat::Yuv422p, cv::COLOR_YUV2RGB_YUY2, ChannelOrder::Rgb, 64, 48},
    {"yuv422p_bgr_34x17", PixelFormat::Yuv422p, cv::COLOR_YUV2BGR_YUY2, ChannelOrder::Bgr, 34, 17},
};

void PrintTo(const ColorCase& c, std::ostream* os) { *os << c.name; }

class ColorOracle : public testing::TestWithParam<ColorCase> {};

TEST_P(ColorOracle, MatchesCvtColorWithinOneLsb) {
  const ColorCase& c = GetParam();
  const HostImage img = test::random_image(c.format, c.width, c.height, 1000u + c.width * 7u + c.height);
  cv::Mat theirs;
  cv::cvtColor(to_cv_yuv(img), theirs, c.cv_code);

  OutputPlan plan;
  const auto ours = run_fused(img, pixel_spec(c.channels), plan);   // no resize: stretch to same size
  ASSERT_EQ(plan.params.resize.dst_w, c.width);
  const U8Diff d = diff_u8(ours, theirs);
  EXPECT_LE(d.max_abs, 1) << describe(d, theirs);
  // Random YUV spans the whole gamut: most elements must agree exactly, not merely within 1
  // (about 3.5% differ, from OpenCV's 20-bit fixed-point coefficients and round-half-up).
  EXPECT_LT(d.differing, d.count / 10) << describe(d, theirs);
}

INSTANTIATE_TEST_SUITE_P(Cases, ColorOracle, testing::ValuesIn(kColorCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Resize: cv::resize on packed RGB24 vs our read-back resize (colour conversion is the identity).

struct ResizeCase {
  int sw, sh, dw, dh;
  Interp interp;
};

constexpr ResizeCase kResizeCases[] = {
    // Degenerate and tiny.
    {7, 5, 1, 1, Interp::Nearest}, {7, 5, 1, 1, Interp::Linear}, {7, 5, 1, 1, Interp::Area},
    {1, 9, 3, 4, Interp::Nearest}, {1, 9, 3, 4, Interp::Linear}, {1, 9, 3, 4, Interp::Area},
    {9, 1, 4, 1, Interp::Linear}, {9, 1, 4, 1, Interp::Area}, {31, 17, 31, 17, Interp::Linear},
    {31, 17, 31, 17, Interp::Area}, {31, 17, 31, 17, Interp::Nearest},
    // Upscale with odd sizes (area enlarging uses OpenCV's INTER_AREA-up coefficients).
    {33, 17, 64, 31, Interp::Nearest}, {33, 17, 64, 31, Interp::Linear}, {33, 17, 64, 31, Interp::Area},
    {10, 10, 30, 30, Interp::Area}, {20, 10, 50, 35, Interp::Area}, {5, 3, 16, 16, Interp::Linear},
    // Mixed: shrink one axis, enlarge the other (OpenCV then uses the area-up path on both axes).
    {100, 20, 40, 50, Interp::Area}, {100, 20, 40, 50, Interp::Linear}, {37, 29, 19, 41, Interp::Area},
    // Exact 2x and 3x downscale (OpenCV turns 2x linear into its fast area path).
    {64, 48, 32, 24, Interp::Linear}, {64, 48, 32, 24, Interp::Area}, {64, 48, 32, 24, Interp::Nearest},
    {99, 63, 33, 21, Interp::Linear}, {99, 63, 33, 21, Interp::Area}, {99, 63, 33, 21, Interp::Nearest},
    // Non-integer downscale, including the real-world sizes.
    {640, 480, 224, 224, Interp::Area}, {640, 480, 224, 224, Interp::Linear},
    {640, 480, 224, 224, Interp::Nearest}, {1920, 1080, 455, 256, Interp::Linear},
    {1920, 1080, 455, 256, Interp::Area}, {1920, 1080, 455, 256, Interp::Nearest},
    {1920, 1080, 640, 360, Interp::Linear}, {1920, 1080, 320, 180, Interp::Area},
    {37, 29, 19, 11, Interp::Linear}, {37, 29, 19, 11, Interp::Area}, {37, 29, 19, 11, Interp::Nearest},
};

void PrintTo(const ResizeCase& c, std::ostream* os) {
  *os << c.sw << "x" << c.sh << " -> " << c.dw << "x" << c.dh << " " << interp_name(c.interp);
}

//! On RGB24 input the colour step is the identity, so nearest picks the same pixel bit for bit;
//! linear and area differ by OpenCV's fixed-point weights and rounding only.
int max_lsb(Interp i) { return i == Interp::Nearest ? 0 : 1; }

class ResizeOracle : public testing::TestWithParam<ResizeCase> {};

TEST_P(ResizeOracle, MatchesCvResizeWithinOneLsb) {
  const ResizeCase& c = GetParam();
  const HostImage img = test::random_image(PixelFormat::Rgb24, c.sw, c.sh, 31u * c.sw + 7u * c.dh + 3u);
  cv::Mat theirs;
  cv::resize(wrap_rgb(img), theirs, cv::Size(c.dw, c.dh), 0, 0, cv_interp(c.interp));

  OutputSpec spec = pixel_spec();
  spec.resize = {c.dw, c.dh, 0};
  spec.interp = c.interp;
  OutputPlan plan;
  const auto ours = run_fused(img, spec, plan);
  const U8Diff d = diff_u8(ours, theirs);
  EXPECT_LE(d.max_abs, max_lsb(c.interp)) << describe(d, theirs);
}

INSTANTIATE_TEST_SUITE_P(Cases, ResizeOracle, testing::ValuesIn(kResizeCases), [](const auto& info) {
  const ResizeCase& c = info.param;
  return std::to_string(c.sw) + "x" + std::to_string(c.sh) + "_to_" + std::to_string(c.dw) + "x" +
         std::to_string(c.dh) + "_" + interp_name(c.interp);
});

//! Every source/target size pair up to 40 on x, the transposed pair on y (so one axis shrinks while
//! the other grows), for each interpolation: catches edge-tap and rounding disagreements that a
//! handful of sizes would miss (this found the double-precision floor of INTER_NEAREST / area-up;
//! it was run once up to 130, 40 keeps it quick).
TEST(ResizeSweep, AllSmallSizePairsMatchCvResizeWithinOneLsb) {
  for (const Interp interp : {Interp::Nearest, Interp::Linear, Interp::Area}) {
    int failures = 0;
    for (int s = 1; s <= 40 && failures < 5; ++s) {
      for (int d = 1; d <= 40 && failures < 5; ++d) {
        const HostImage img = test::random_image(PixelFormat::Rgb24, s, d, 9000u + 64u * s + d);
        cv::Mat theirs;
        cv::resize(wrap_rgb(img), theirs, cv::Size(d, s), 0, 0, cv_interp(interp));
        OutputSpec spec = pixel_spec();
        spec.resize = {d, s, 0};
        spec.interp = interp;
        OutputPlan plan;
        const U8Diff diff = diff_u8(run_fused(img, spec, plan), theirs);
        if (diff.max_abs > max_lsb(interp)) {
          ++failures;
          ADD_FAILURE() << interp_name(interp) << " " << s << "x" << d << " -> " << d << "x" << s << ": "
                        << describe(diff, theirs);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Composition: cvtColor -> ROI crop -> resize (-> gray) vs the fused chain from the YUV frame.

struct ComposeCase {
  const char* name;
  PixelFormat format;   //!< Nv12 or Yuv420p
  int fw, fh;
  cv::Rect crop;
  int dw, dh;
  Interp interp;
  ChannelOrder channels;
};

const ComposeCase kComposeCases[] = {
    {"odd_crop_up_linear", PixelFormat::Nv12, 64, 48, {3, 1, 33, 17}, 64, 31, Interp::Linear, ChannelOrder::Rgb},
    {"odd_crop_up_area", PixelFormat::Nv12, 64, 48, {3, 1, 33, 17}, 64, 31, Interp::Area, ChannelOrder::Bgr},
    {"odd_crop_nearest", PixelFormat::Yuv420p, 64, 48, {5, 3, 31, 23}, 17, 9, Interp::Nearest, ChannelOrder::Rgb},
    {"one_pixel_crop_linear", PixelFormat::Nv12, 32, 16, {5, 7, 1, 1}, 3, 3, Interp::Linear, ChannelOrder::Rgb},
    {"one_pixel_crop_area", PixelFormat::Nv12, 32, 16, {5, 7, 1, 1}, 3, 3, Interp::Area, ChannelOrder::Rgb},
    {"one_pixel_crop_nearest", PixelFormat::Yuv420p, 32, 16, {6, 0, 1, 1}, 2, 5, Interp::Nearest,
     ChannelOrder::Bgr},
    {"column_crop", PixelFormat::Nv12, 32, 16, {31, 0, 1, 16}, 4, 7, Interp::Linear, ChannelOrder::Rgb},
    {"to_1x1_area", PixelFormat::Nv12, 32, 16, {9, 5, 7, 5}, 1, 1, Interp::Area, ChannelOrder::Rgb},
    {"to_1x1_linear", PixelFormat::Yuv420p, 32, 16, {9, 5, 7, 5}, 1, 1, Interp::Linear, ChannelOrder::Rgb},
    {"exact_2x_linear", PixelFormat::Nv12, 128, 96, {1, 3, 64, 48}, 32, 24, Interp::Linear, ChannelOrder::Rgb},
    {"exact_3x_area", PixelFormat::Nv12, 128, 96, {7, 1, 99, 63}, 33, 21, Interp::Area, ChannelOrder::Rgb},
    {"vga_to_224_area", PixelFormat::Nv12, 640, 480, {0, 0, 640, 480}, 224, 224, Interp::Area,
     ChannelOrder::Rgb},
    {"fullhd_crop_to_224_linear", PixelFormat::Nv12, 1920, 1080, {101, 51, 1001, 777}, 224, 224,
     Interp::Linear, ChannelOrder::Rgb},
    {"fullhd_to_455x256_area", PixelFormat::Nv12, 1920, 1080, {0, 0, 1920, 1080}, 455, 256, Interp::Area,
     ChannelOrder::Bgr},
    {"gray_linear", PixelFormat::Nv12, 64, 48, {2, 2, 50, 40}, 25, 30, Interp::Linear, ChannelOrder::Gray},
    {"gray_area", PixelFormat::Yuv420p, 64, 48, {1, 1, 63, 47}, 21, 16, Interp::Area, ChannelOrder::Gray},
};

void PrintTo(const ComposeCase& c, std::ostream* os) { *os << c.name; }

class ComposeOracle : public testing::TestWithParam<ComposeCase> {};

TEST_P(ComposeOracle, MatchesUnfusedOpenCvWithinOneLsb) {
  const ComposeCase& c = GetParam();
  const HostImage img = test::random_image(c.format, c.fw, c.fh, 77u + c.fw + 13u * c.crop.x);
  const bool nv12 = c.format == PixelFormat::Nv12;
  const bool bgr = c.channels == ChannelOrder::Bgr;
  const int code = nv12 ? (bgr ? cv::COLOR_YUV2BGR_NV12 : cv::COLOR_YUV2RGB_NV12)
                        : (bgr ? cv::COLOR_YUV2BGR_I420 : cv::COLOR_YUV2RGB_I420);
  cv::Mat rgb, theirs;
  cv::cvtColor(to_cv_yuv(img), rgb, code);
  cv::resize(rgb(c.crop), theirs, cv::Size(c.dw, c.dh), 0, 0, cv_interp(c.interp));
  if (c.channels == ChannelOrder::Gray) cv::cvtColor(theirs, theirs, cv::COLOR_RGB2GRAY);

  OutputSpec spec = pixel_spec(c.channels);
  spec.crop = {double(c.crop.x), double(c.crop.y), double(c.crop.width), double(c.crop.height), false};
  spec.resize = {c.dw, c.dh, 0};
  spec.interp = c.interp;
  OutputPlan plan;
  const auto ours = run_fused(img, spec, plan);
  const U8Diff d = diff_u8(ours, theirs);
  EXPECT_LE(d.max_abs, 1) << describe(d, theirs);
}

INSTANTIATE_TEST_SUITE_P(Cases, ComposeOracle, testing::ValuesIn(kComposeCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Whole model-input chains as users write them with OpenCV, vs one fused output each.

//! torchvision Resize(256) + CenterCrop(224) + ToTensor + Normalize(ImageNet), CHW f32, from NV12.
//! OpenCV's cvtColor rounds to u8 (<= 0.5) with fixed-point BT.601 coefficients (<= 0.2); the
//! resize runs in float so no second rounding enters: the two agree within 1 in pixel units.
TEST(ChainOracle, ClassifyImageNetF32MatchesOpenCv) {
  const HostImage img = test::random_image(PixelFormat::Nv12, 1920, 1080, 4242u);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  cv::Mat rgb, rgbf, resized;
  cv::cvtColor(to_cv_yuv(img), rgb, cv::COLOR_YUV2RGB_NV12);
  rgb.convertTo(rgbf, CV_32F);
  cv::resize(rgbf, resized, cv::Size(455, 256), 0, 0, cv::INTER_LINEAR);
  std::vector<cv::Mat> planes;
  cv::split(resized(cv::Rect(116, 16, 224, 224)), planes);
  std::vector<float> theirs(3 * 224 * 224);
  for (int c = 0; c < 3; ++c) {
    cv::Mat out(224, 224, CV_32F, theirs.data() + c * 224 * 224);
    planes[c].convertTo(out, CV_32F, 1.0 / (255.0 * stdv[c]), -mean[c] / stdv[c]);
  }

  OutputSpec spec;
  spec.name = "cls";
  spec.resize.shorter_side = 256;
  spec.center_crop = std::array<int32_t, 2>{224, 224};
  spec.mean = {mean[0], mean[1], mean[2]};
  spec.std = {stdv[0], stdv[1], stdv[2]};
  OutputPlan plan;
  const auto bytes = run_fused(img, spec, plan);
  ASSERT_EQ(plan.shape, (std::vector<int64_t>{3, 224, 224}));
  const auto ours = test::to_double(bytes, ops::DType::F32);
  double max_px = 0;
  size_t non_finite = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    if (!std::isfinite(ours[i])) ++non_finite;
    const int c = static_cast<int>(i / (224 * 224));
    max_px = std::max(max_px, std::abs(ours[i] - theirs[i]) * stdv[c] * 255.0);
  }
  EXPECT_EQ(non_finite, 0u);
  EXPECT_LE(max_px, 1.0) << "max difference in 0..255 pixel units";
}

//! YOLO-style letterbox 1920x1080 -> 640x640 (640x360 + 140 rows of 114 above and below), BGR u8.
TEST(ChainOracle, LetterboxBgrU8MatchesOpenCv) {
  const HostImage img = test::random_image(PixelFormat::Nv12, 1920, 1080, 99u);
  cv::Mat bgr, resized, theirs;
  cv::cvtColor(to_cv_yuv(img), bgr, cv::COLOR_YUV2BGR_NV12);
  cv::resize(bgr, resized, cv::Size(640, 360), 0, 0, cv::INTER_LINEAR);
  cv::copyMakeBorder(resized, theirs, 140, 140, 0, 0, cv::BORDER_CONSTANT, cv::Scalar(114, 114, 114));

  OutputSpec spec = pixel_spec(ChannelOrder::Bgr);
  spec.resize = {640, 640, 0};
  spec.aspect = AspectMode::Letterbox;
  OutputPlan plan;
  const auto ours = run_fused(img, spec, plan);
  const U8Diff d = diff_u8(ours, theirs);
  EXPECT_LE(d.max_abs, 1) << describe(d, theirs);
  // The pad is exact, not merely close.
  const size_t row = 640 * 3;
  for (size_t i = 0; i < 140 * row; ++i) ASSERT_EQ(std::to_integer<int>(ours[i]), 114) << "top pad " << i;
  for (size_t i = 500 * row; i < 640 * row; ++i) ASSERT_EQ(std::to_integer<int>(ours[i]), 114) << "bottom pad " << i;
}

//! Resize-to-fill then centre crop (aspect: fill) from I420 with an odd-sized pixel crop first.
TEST(ChainOracle, CropThenFillAreaU8MatchesOpenCv) {
  const HostImage img = test::random_image(PixelFormat::Yuv420p, 640, 480, 555u);
  const cv::Rect crop(37, 21, 401, 299);   // 401x299 -> fill 128x128: scale max(128/401, 128/299)
  cv::Mat rgb, resized;
  cv::cvtColor(to_cv_yuv(img), rgb, cv::COLOR_YUV2RGB_I420);
  const double k = std::max(128.0 / 401, 128.0 / 299);
  const int rw = int(std::lround(401 * k)), rh = int(std::lround(299 * k));   // 172 x 128
  cv::resize(rgb(crop), resized, cv::Size(rw, rh), 0, 0, cv::INTER_AREA);
  const cv::Mat theirs = resized(cv::Rect((rw - 128) / 2, (rh - 128) / 2, 128, 128)).clone();

  OutputSpec spec = pixel_spec();
  spec.crop = {37, 21, 401, 299, false};
  spec.resize = {128, 128, 0};
  spec.aspect = AspectMode::CenterCropFill;
  spec.interp = Interp::Area;
  OutputPlan plan;
  const auto ours = run_fused(img, spec, plan);
  ASSERT_EQ(plan.params.resize.dst_w, rw);
  ASSERT_EQ(plan.params.resize.dst_h, rh);
  const U8Diff d = diff_u8(ours, theirs);
  EXPECT_LE(d.max_abs, 1) << describe(d, theirs);
}

}  // namespace
}  // namespace framefuse
