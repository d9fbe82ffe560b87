//! The ops against plain double-precision references written from the standards: binary16
//! rounding, u8 saturation, Y'CbCr matrices and chroma siting, and normalize/channel order/
//! layout/dtype of whole outputs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/ops/dispatch.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

using ops::DType;
using ops::Layout;
using ops::ChromaLocation;
using ops::PixelFormat;

// ---------------------------------------------------------------------------------------------
// binary16: reference rounding in double (exact: a float divided by a power of two).

//! |v| rounded to the nearest binary16 value, ties to even; +inf when it rounds past 65504.
double ref_half_magnitude(double a) {
  if (a >= 65520.0) return INFINITY;
  if (a == 0.0) return 0.0;
  const int e = std::max(std::ilogb(a), -14);   // subnormals share the 2^-14 binade's quantum
  const double quantum = std::ldexp(1.0, e - 10);
  return std::nearbyint(a / quantum) * quantum;   // default rounding mode: ties to even
}

//! binary16 bits of a value that is exactly representable (or inf), built field by field.
uint16_t ref_half_encode(double r, bool negative) {
  const uint16_t sign = negative ? 0x8000u : 0u;
  if (std::isinf(r)) return sign | 0x7c00u;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  const int e = std::ilogb(r);
  const auto mant = static_cast<uint16_t>(r / std::ldexp(1.0, e - 10) - 1024.0);
  return sign | static_cast<uint16_t>((e + 15) << 10) | mant;
}

uint16_t ref_half_bits(double v) { return ref_half_encode(ref_half_magnitude(std::abs(v)), std::signbit(v)); }

void expect_half(float v) {
  const uint16_t got = ops::to_half_bits(v);
  ASSERT_EQ(got, ref_half_bits(v)) << "v = " << v << " (float bits 0x" << std::hex << std::bit_cast<uint32_t>(v)
                                   << ")";
#if defined(__FLT16_MAX__)
  // The compiler's own float -> _Float16 conversion (libgcc, correctly rounded) as a second oracle.
  ASSERT_EQ(got, std::bit_cast<uint16_t>(static_cast<_Float16>(v))) << "v = " << v;
#endif
}

TEST(ToHalfBits, EdgeValues) {
  struct Case {
    float v;
    uint16_t bits;
  };
  const float min_sub = std::ldexp(1.f, -24), min_normal = std::ldexp(1.f, -14);
  const Case cases[] = {
      {0.f, 0x0000}, {-0.f, 0x8000}, {1.f, 0x3c00}, {-2.f, 0xc000}, {65504.f, 0x7bff},
      {65519.99f, 0x7bff},                         // just below the overflow tie
      {65520.f, 0x7c00},                           // tie between 65504 and 2^16: even is inf
      {1e10f, 0x7c00}, {-1e10f, 0xfc00}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00},
      {min_sub, 0x0001}, {min_sub * 0.5f, 0x0000},   // tie between 0 and 2^-24: even is 0
      {std::nextafter(min_sub * 0.5f, 1.f), 0x0001}, {min_sub * 1.5f, 0x0002},   // tie to even 2
      {min_sub * 2.5f, 0x0002}, {min_sub * 3.5f, 0x0004}, {min_normal, 0x0400},
      {min_normal - min_sub, 0x03ff},              // largest subnormal
      {min_normal - min_sub * 0.5f, 0x0400},       // tie: rounds up into the normal range
      {1.f + std::ldexp(1.f, -11), 0x3c00},        // tie between 1 and 1 + 2^-10: even is 1
      {1.f + 3 * std::ldexp(1.f, -11), 0x3c02},    // tie between 0x3c01 and 0x3c02: even
      {2049.f, 0x6800}, {2051.f, 0x6802},          // ties at quantum 2
      {std::ldexp(1.f, -30), 0x0000},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ops::to_half_bits(c.v), c.bits) << "v = " << c.v;
    expect_half(c.v);
  }
  const uint16_t nan = ops::to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00u, 0x7c00u);
  EXPECT_NE(nan & 0x03ffu, 0u) << "NaN must stay NaN";
}

//! Every binary16 value, the midpoints to its neighbours (ties) and the floats just around them.
TEST(ToHalfBits, AllHalfValuesTiesAndNeighbours) {
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const double v = test::half_to_float(static_cast<uint16_t>(h));
    const double next = h + 1 < 0x7c00u ? test::half_to_float(static_cast<uint16_t>(h + 1)) : 65536.0;
    const auto mid = static_cast<float>((v + next) / 2);   // exact: 12 significant bits
    for (const float f : {float(v), mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY),
                          std::nextafter(float(v), INFINITY)}) {
      expect_half(f);
      expect_half(-f);
    }
    // Round trip of the value itself.
    ASSERT_EQ(ops::to_half_bits(float(v)), h);
  }
}

TEST(ToHalfBits, RandomFloatsAcrossTheRange) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> exponent(-30.f, 17.f), mantissa(1.f, 2.f);
  for (int i = 0; i < 200000; ++i) {
    const float v = std::ldexp(mantissa(rng), static_cast<int>(exponent(rng))) * (i % 2 ? -1.f : 1.f);
    expect_half(v);
  }
}

// ---------------------------------------------------------------------------------------------
// u8 store: saturate, then round half to even (cv::saturate_cast<uchar>(float) semantics).

int ref_u8(double v) {
  if (std::isnan(v)) return 0;
  return static_cast<int>(std::nearbyint(std::clamp(v, 0.0, 255.0)));
}

TEST(SaturateU8, TiesToEvenAndSaturation) {
  struct Case {
    float v;
    int expected;
  };
  const Case cases[] = {
      {0.5f, 0},       {1.5f, 2},         {2.5f, 2},     {3.5f, 4},          {127.5f, 128},
      {128.5f, 128},   {253.5f, 254},     {254.5f, 254}, {254.51f, 255},     {255.5f, 255},
      {256.f, 255},    {1e9f, 255},       {3e38f, 255},  {INFINITY, 255},    {-0.5f, 0},
      {-0.51f, 0},     {-1.f, 0},         {-1e9f, 0},    {-3e38f, 0},        {-INFINITY, 0},
      {0.49999997f, 0}, {127.49999f, 127}, {42.f, 42},    {std::nanf(""), 0},
  };
  for (const Case& c : cases) EXPECT_EQ(int(ops::saturate_u8(c.v)), c.expected) << "v = " << c.v;
  for (int q = -40; q <= 1100; ++q) {   // every quarter step from -10 to 275
    const float v = q * 0.25f;
    ASSERT_EQ(int(ops::saturate_u8(v)), ref_u8(v)) << "v = " << v;
  }
}

// ---------------------------------------------------------------------------------------------
// Y'CbCr -> R'G'B' coefficients vs the published matrices (ITU-R BT.601 / BT.709, 8-bit).

TEST(YuvToRgb, CoefficientsMatchPublishedMatrices) {
  struct Case {
    ops::ColorMatrix m;
    ops::ColorRange r;
    double ky, rv, gu, gv, bu;
  };
  const Case cases[] = {
      {ops::ColorMatrix::Bt601, ops::ColorRange::Limited, 1.164383, 1.596027, -0.391762, -0.812968, 2.017232},
      {ops::ColorMatrix::Bt709, ops::ColorRange::Limited, 1.164383, 1.792741, -0.213249, -0.532909, 2.112402},
      {ops::ColorMatrix::Bt601, ops::ColorRange::Full, 1.0, 1.402, -0.344136, -0.714136, 1.772},
      {ops::ColorMatrix::Bt709, ops::ColorRange::Full, 1.0, 1.5748, -0.187324, -0.468124, 1.8556},
  };
  for (const Case& c : cases) {
    const auto p = ops::make_yuv_to_rgb(c.m, c.r);
    EXPECT_NEAR(p.ky, c.ky, 1e-5);
    EXPECT_NEAR(p.rv, c.rv, 1e-5);
    EXPECT_NEAR(p.gu, c.gu, 1e-5);
    EXPECT_NEAR(p.gv, c.gv, 1e-5);
    EXPECT_NEAR(p.bu, c.bu, 1e-5);
    EXPECT_EQ(p.y_off, c.r == ops::ColorRange::Limited ? 16.f : 0.f);
  }
}

// ---------------------------------------------------------------------------------------------
// FrameReader vs a double reference written from the plane layouts and chroma siting.

struct RefColor {
  double kr, kb;
  bool limited;
};

//! R'G'B' of 8-bit-scale Y'CbCr, clamped to 0..255 (limited range clamps Y below 16 first).
std::array<double, 3> ref_rgb(double y, double u, double v, const RefColor& c) {
  const double yy = c.limited ? std::max(0.0, y - 16.0) * 255.0 / 219.0 : y;
  const double s = c.limited ? 255.0 / 224.0 : 1.0;
  const double cb = (u - 128.0) * s, cr = (v - 128.0) * s, kg = 1.0 - c.kr - c.kb;
  const double r = yy + 2.0 * (1.0 - c.kr) * cr;
  const double g = yy - 2.0 * c.kb * (1.0 - c.kb) / kg * cb - 2.0 * c.kr * (1.0 - c.kr) / kg * cr;
  const double b = yy + 2.0 * (1.0 - c.kb) * cb;
  return {std::clamp(r, 0.0, 255.0), std::clamp(g, 0.0, 255.0), std::clamp(b, 0.0, 255.0)};
}

//! Sample k of a row of a plane, on the 8-bit scale (P010: u16 with the value in the high 10 bits;
//! Yuv420p10: in the low 10 bits).
double ref_sample(const test::HostImage& img, int plane, int x, int y, int k, int step) {
  const uint8_t* row = img.planes[plane].data() + size_t(y) * img.pitch[plane];
  if (ops::sample_bytes(img.format) == 2) {
    uint16_t s;
    std::memcpy(&s, row + 2 * (step * x + k), 2);
    return (img.format == PixelFormat::P010 ? s >> 6 : s) / 4.0;
  }
  return row[step * x + k];
}

//! Cb, Cr of chroma sample (i, j).
std::array<double, 2> ref_chroma(const test::HostImage& img, int i, int j) {
  if (ops::plane_count(img.format) == 3) return {ref_sample(img, 1, i, j, 0, 1), ref_sample(img, 2, i, j, 0, 1)};
  return {ref_sample(img, 1, i, j, 0, 2), ref_sample(img, 1, i, j, 1, 2)};
}

//! Chroma at luma pixel (x, y): nearest = the 2x2 block's sample (2x1 in 4:2:2); linear = bilinear
//! between sample positions (in luma units: x = 2i (+0.5 when centred), y = 2j + 0.5 (top-left: 2j;
//! 4:2:2: j, every row)), edges held.
std::array<double, 2> ref_chroma_at(const test::HostImage& img, int x, int y, ops::ChromaUpsample up,
                                    ops::ChromaLocation loc) {
  const bool rows_full = img.format == PixelFormat::Yuv422p;   // a chroma row per luma row
  if (up == ops::ChromaUpsample::Nearest) return ref_chroma(img, x / 2, rows_full ? y : y / 2);
  const int cw = (img.width + 1) / 2, ch = rows_full ? img.height : (img.height + 1) / 2;
  const double x0 = loc == ops::ChromaLocation::Center ? 0.5 : 0.0;
  const double y0 = loc == ops::ChromaLocation::TopLeft ? 0.0 : 0.5;
  const double tx = (x - x0) / 2.0, ty = rows_full ? y : (y - y0) / 2.0;
  const int i = static_cast<int>(std::floor(tx)), j = static_cast<int>(std::floor(ty));
  const double ax = tx - i, ay = ty - j;
  std::array<double, 2> out{};
  for (int dj = 0; dj < 2; ++dj) {
    for (int di = 0; di < 2; ++di) {
      const double w = (di ? ax : 1 - ax) * (dj ? ay : 1 - ay);
      const auto c = ref_chroma(img, std::clamp(i + di, 0, cw - 1), std::clamp(j + dj, 0, ch - 1));
      out[0] += w * c[0];
      out[1] += w * c[1];
    }
  }
  return out;
}

std::array<double, 3> ref_pixel(const test::HostImage& img, int x, int y, const RefColor& c,
                                ops::ChromaUpsample up, ops::ChromaLocation loc) {
  if (img.format == PixelFormat::Rgb24 || img.format == PixelFormat::Bgr24) {
    const auto s = [&](int k) { return ref_sample(img, 0, x, y, k, 3); };
    return img.format == PixelFormat::Rgb24 ? std::array{s(0), s(1), s(2)} : std::array{s(2), s(1), s(0)};
  }
  const auto uv = ref_chroma_at(img, x, y, up, loc);
  return ref_rgb(ref_sample(img, 0, x, y, 0, 1), uv[0], uv[1], c);
}

template <class Tag>
class ReaderTest : public testing::Test {};
using AllFormats = testing::Types<ops::FormatTag<PixelFormat::Nv12>, ops::FormatTag<PixelFormat::P010>,
                                  ops::FormatTag<PixelFormat::Yuv420p>, ops::FormatTag<PixelFormat::Rgb24>,
                                  ops::FormatTag<PixelFormat::Bgr24>, ops::FormatTag<PixelFormat::Yuv420p10>,
                                  ops::FormatTag<PixelFormat::Yuv422p>>;
TYPED_TEST_SUITE(ReaderTest, AllFormats);

TYPED_TEST(ReaderTest, MatchesDoubleReferenceForEveryColourSetting) {
  constexpr PixelFormat F = TypeParam::value;
  for (const auto [w, h] : {std::pair{13, 9}, std::pair{16, 8}, std::pair{1, 1}}) {
    // Even row padding: 10-bit rows hold u16 samples, so real pitches are even.
    const test::HostImage img = test::random_image(F, w, h, 500u + 37u * w + static_cast<uint32_t>(F), 4);
    for (const auto m : {ops::ColorMatrix::Bt601, ops::ColorMatrix::Bt709}) {
      for (const auto r : {ops::ColorRange::Limited, ops::ColorRange::Full}) {
        for (const auto up : {ops::ChromaUpsample::Nearest, ops::ChromaUpsample::Linear}) {
          for (const auto loc : {ChromaLocation::Left, ChromaLocation::Center, ChromaLocation::TopLeft}) {
            const RefColor rc{m == ops::ColorMatrix::Bt709 ? 0.2126 : 0.299,
                              m == ops::ColorMatrix::Bt709 ? 0.0722 : 0.114, r == ops::ColorRange::Limited};
            const ops::FrameReader<F> reader{img.view(), {ops::make_yuv_to_rgb(m, r), up, loc}};
            double max_err = 0;
            for (int y = 0; y < h; ++y) {
              for (int x = 0; x < w; ++x) {
                const ops::Vec3 got = reader.rgb(x, y);
                const auto want = ref_pixel(img, x, y, rc, up, loc);
                max_err = std::max({max_err, std::abs(got.x - want[0]), std::abs(got.y - want[1]),
                                    std::abs(got.z - want[2])});
              }
            }
            EXPECT_LE(max_err, 2e-3) << w << "x" << h << " matrix " << int(m) << " range " << int(r)
                                     << " upsample " << int(up) << " location " << int(loc);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Normalize, channel order, pad, layout and dtype of a whole output vs a double reference.
// Input is RGB24 (the reader is exact) at 16x6, letterboxed into 16x10: rows 0-1 and 8-9 are pad.

struct NormCase {
  const char* name;
  ChannelOrder channels;
  Layout layout;
  DType dtype;
  float scale;
  std::array<float, 3> mean, std;
  //! 0: the float chain is exact here, so the result must be the exact rounding of the double
  //! value; otherwise a relative window around it inside which float rounding may land either way.
  double window;
};

const NormCase kNormCases[] = {
    {"identity_u8_hwc_rgb", ChannelOrder::Rgb, Layout::Hwc, DType::U8, 1.f, {0, 0, 0}, {1, 1, 1}, 0},
    {"ties_u8_chw_bgr", ChannelOrder::Bgr, Layout::Chw, DType::U8, 0.5f, {0, 0, 0}, {1, 1, 1}, 0},
    {"saturate_high_u8_hwc", ChannelOrder::Rgb, Layout::Hwc, DType::U8, 2.f, {10, -20, 0}, {1, 1, 0.5}, 0},
    {"saturate_low_u8_chw", ChannelOrder::Bgr, Layout::Chw, DType::U8, 1.f, {100, 50, 200}, {0.5, 0.25, 1}, 0},
    {"imagenet_f32_chw_rgb", ChannelOrder::Rgb, Layout::Chw, DType::F32, 1 / 255.f, {0.485f, 0.456f, 0.406f},
     {0.229f, 0.224f, 0.225f}, 1e-5},
    {"imagenet_f32_hwc_bgr", ChannelOrder::Bgr, Layout::Hwc, DType::F32, 1 / 255.f, {0.406f, 0.456f, 0.485f},
     {0.225f, 0.224f, 0.229f}, 1e-5},
    {"imagenet_f16_chw_rgb", ChannelOrder::Rgb, Layout::Chw, DType::F16, 1 / 255.f, {0.485f, 0.456f, 0.406f},
     {0.229f, 0.224f, 0.225f}, 1e-6},
    {"dyadic_f16_hwc_bgr", ChannelOrder::Bgr, Layout::Hwc, DType::F16, 1 / 256.f, {0.5f, 0.25f, 0.75f},
     {0.25f, 0.5f, 2.f}, 0},
    {"overflow_f16_chw", ChannelOrder::Rgb, Layout::Chw, DType::F16, 300.f, {0, 0, 0}, {1, 1, 1}, 0},
    {"unit_f32_chw", ChannelOrder::Rgb, Layout::Chw, DType::F32, 1 / 255.f, {0, 0, 0}, {1, 1, 1}, 1e-5},
    {"gray_f32_chw", ChannelOrder::Gray, Layout::Chw, DType::F32, 1 / 255.f, {0.5f, 0, 0}, {0.5f, 1, 1}, 1e-5},
    {"gray_u8_hwc", ChannelOrder::Gray, Layout::Hwc, DType::U8, 1.f, {0, 0, 0}, {1, 1, 1}, 1e-6},
    {"gray_f16_hwc", ChannelOrder::Gray, Layout::Hwc, DType::F16, 1 / 255.f, {0, 0, 0}, {1, 1, 1}, 1e-6},
};

void PrintTo(const NormCase& c, std::ostream* os) { *os << c.name; }

class NormalizeStore : public testing::TestWithParam<NormCase> {};

TEST_P(NormalizeStore, MatchesDoubleReference) {
  const NormCase& c = GetParam();
  constexpr int kW = 16, kH = 6, kOutH = 10, kPadRows = 2;
  const std::array<float, 3> pad{114.f, 7.f, 250.f};
  const test::HostImage img = test::random_image(PixelFormat::Rgb24, kW, kH, 321u);
  OutputSpec spec;
  spec.name = c.name;
  spec.resize = {kW, kOutH, 0};
  spec.aspect = AspectMode::Letterbox;
  spec.interp = ops::Interp::Nearest;
  spec.pad_value = pad;
  spec.channels = c.channels;
  spec.scale = c.scale;
  spec.mean = c.mean;
  spec.std = c.std;
  spec.layout = c.layout;
  spec.dtype = c.dtype;
  const FrameInfo frame = test::frame_info(img);
  const OutputPlan plan = make_output_plan(spec, frame, "ops_test");
  CpuExecutor exec(2);
  exec.setup(frame, make_color_params({}, frame), std::span(&plan, 1), 1);
  auto outs = test::poisoned_outputs(std::span(&plan, 1), 1);
  const ops::ImageView view = img.view();
  exec.process(std::span(&view, 1), test::pointers(outs));
  const auto got = test::to_double(outs[0], c.dtype);

  const int nc = c.channels == ChannelOrder::Gray ? 1 : 3;
  ASSERT_EQ(got.size(), size_t(nc) * kW * kOutH);
  int failures = 0;
  for (int y = 0; y < kOutH && failures < 5; ++y) {
    for (int x = 0; x < kW; ++x) {
      const int sy = y - kPadRows;
      const bool is_pad = sy < 0 || sy >= kH;
      std::array<double, 3> rgb = is_pad ? std::array<double, 3>{pad[0], pad[1], pad[2]}
                                         : ref_pixel(img, x, sy, {}, ops::ChromaUpsample::Nearest, {});
      std::array<double, 3> px = rgb;
      if (c.channels == ChannelOrder::Bgr) px = {rgb[2], rgb[1], rgb[0]};
      if (c.channels == ChannelOrder::Gray) px[0] = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2];
      for (int ch = 0; ch < nc; ++ch) {
        const double want = (px[ch] * double(c.scale) - c.mean[ch]) / c.std[ch];
        const size_t i = c.layout == Layout::Chw ? (size_t(ch) * kOutH + y) * kW + x : (size_t(y) * kW + x) * nc + ch;
        const double out = got[i];
        const double lo = want - c.window * std::max(1.0, std::abs(want));
        const double hi = want + c.window * std::max(1.0, std::abs(want));
        // Rounding is monotonic: anything between the roundings of the window's ends is allowed.
        bool ok = false;
        switch (c.dtype) {
          case DType::F32: ok = out >= lo && out <= hi; break;
          case DType::F16:
            ok = c.window == 0 ? ops::to_half_bits(float(out)) == ref_half_bits(want)
                               : out >= std::copysign(ref_half_magnitude(std::abs(lo)), lo) &&
                                     out <= std::copysign(ref_half_magnitude(std::abs(hi)), hi);
            break;
          case DType::U8: ok = c.window == 0 ? out == ref_u8(want) : out >= ref_u8(lo) && out <= ref_u8(hi); break;
        }
        if (!ok && ++failures <= 5)
          ADD_FAILURE() << "(x=" << x << ", y=" << y << ", c=" << ch << ")" << (is_pad ? " pad" : "") << ": got " << out
                        << ", want " << want;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, NormalizeStore, testing::ValuesIn(kNormCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace framefuse
