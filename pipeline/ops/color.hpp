#pragma once
//! Input read + colour conversion: the first op of every chain. Reads one luma-resolution pixel of a
//! frame and returns RGB in float, 0..255, clamped (what cvtColor produces before rounding).
#include "pipeline/ops/image.hpp"
#include "pipeline/ops/op_traits.hpp"

namespace framefuse::ops {

//! Y'CbCr -> R'G'B' with samples on the 8-bit scale (10-bit input is divided by 4).
//! Limited range clamps Y below 16 to 16 before scaling, as OpenCV does.
struct YuvToRgb {
  struct Params {
    float ky;       //!< luma gain (255/219 limited, 1 full)
    float y_off;    //!< 16 limited, 0 full
    float rv, gu, gv, bu;   //!< chroma gains, chroma centred on 128
  };
  //! Samples are finite and never -0 (converted integers), so are yy and the sums below.
  FF_HD static Vec3 apply(float y, float u, float v, const Params& p) {
    float yy = y - p.y_off;
    yy = at_least_zero(yy) * p.ky;
    u -= 128.f;
    v -= 128.f;
    return {clamp255(yy + p.rv * v), clamp255(yy + p.gu * u + p.gv * v), clamp255(yy + p.bu * u)};
  }

  //! v < 0 ? 0 : v and clampf(v, 0, 255) for v neither NaN nor -0, where max and min give the
  //! same: on the device one FMNMX each instead of a compare and a select each.
  FF_HD static float at_least_zero(float v) {
#if defined(__CUDA_ARCH__)
    return fmaxf(v, 0.f);
#else
    return v < 0.f ? 0.f : v;
#endif
  }
  FF_HD static float clamp255(float v) {
#if defined(__CUDA_ARCH__)
    return fminf(fmaxf(v, 0.f), 255.f);
#else
    return clampf(v, 0.f, 255.f);
#endif
  }
};

//! Builds conversion coefficients from the standard's Kr/Kb (exact, not rounded tables).
YuvToRgb::Params make_yuv_to_rgb(ColorMatrix matrix, ColorRange range);

//! Everything the reader needs about a frame's colour.
struct ColorParams {
  YuvToRgb::Params yuv;
  ChromaUpsample upsample;
  ChromaLocation location;
};

//! Reads RGB pixels of one frame. Format is a template parameter so kernels specialise on it;
//! chroma upsampling is a uniform run-time branch.
template <PixelFormat F>
struct FrameReader {
  ImageView img;
  ColorParams color;

  static constexpr bool kYuv = F != PixelFormat::Rgb24 && F != PixelFormat::Bgr24;
  static constexpr int kShiftY = chroma_shift_y(F);   //!< chroma row of luma row y: y >> kShiftY

  FF_HD Vec3 rgb(int x, int y) const {
    if constexpr (!kYuv) {
      const uint8_t* p = img.data[0] + static_cast<int64_t>(y) * img.pitch[0] + 3 * x;
      Vec3 v{float(p[0]), float(p[1]), float(p[2])};
      if constexpr (F == PixelFormat::Bgr24) return {v.z, v.y, v.x};
      return v;
    } else {
      float l, u, v;
      yuv(x, y, l, u, v);
      return YuvToRgb::apply(l, u, v, color.yuv);
    }
  }

  //! The samples rgb() converts at pixel (x, y) of a YUV format: luma and upsampled chroma.
  FF_HD void yuv(int x, int y, float& l, float& u, float& v) const {
    if (color.upsample == ChromaUpsample::Nearest) {
      chroma_at(x >> 1, y >> kShiftY, u, v);
    } else {
      chroma_linear(x, y, u, v);
    }
    l = luma(x, y);
  }

  //! yuv() of the n pixels x0 .. x0 + n - 1 of row y, into l, u, v: the same samples, read in
  //! loops a CPU compiler vectorises (nearest chroma: one chroma read per pair of pixels).
  FF_HD void yuv_run(int x0, int n, int y, float* __restrict__ l, float* __restrict__ u,
                     float* __restrict__ v) const {
    for (int i = 0; i < n; ++i) l[i] = luma(x0 + i, y);
    if (color.upsample != ChromaUpsample::Nearest) {
      for (int i = 0; i < n; ++i) chroma_linear(x0 + i, y, u[i], v[i]);
      return;
    }
    int i = 0;
    if (n > 0 && (x0 & 1)) {   // odd first pixel: the second of its chroma pair
      chroma_at(x0 >> 1, y >> kShiftY, u[0], v[0]);
      i = 1;
    }
    const int c0 = (x0 + i) >> 1, pairs = (n - i) >> 1;
    for (int j = 0; j < pairs; ++j) {
      float cu, cv;
      chroma_at(c0 + j, y >> kShiftY, cu, cv);
      u[i + 2 * j] = u[i + 2 * j + 1] = cu;
      v[i + 2 * j] = v[i + 2 * j + 1] = cv;
    }
    if (i + 2 * pairs < n) chroma_at((x0 + n - 1) >> 1, y >> kShiftY, u[n - 1], v[n - 1]);
  }

  //! yuv() of the n pixels (x0 + xs[i], y), into l, u, v: the same samples, one loop per chroma mode.
  FF_HD void yuv_gather(int x0, const int32_t* __restrict__ xs, int n, int y, float* __restrict__ l,
                        float* __restrict__ u, float* __restrict__ v) const {
    if (color.upsample == ChromaUpsample::Nearest) {
      for (int i = 0; i < n; ++i) {
        l[i] = luma(x0 + xs[i], y);
        chroma_at((x0 + xs[i]) >> 1, y >> kShiftY, u[i], v[i]);
      }
    } else {
      for (int i = 0; i < n; ++i) {
        l[i] = luma(x0 + xs[i], y);
        chroma_linear(x0 + xs[i], y, u[i], v[i]);
      }
    }
  }

  FF_HD float luma(int x, int y) const {
    if constexpr (F == PixelFormat::P010) {
      return float(sample16(img, 0, x, y)) * (1.f / 256.f);
    } else if constexpr (F == PixelFormat::Yuv420p10) {
      return float(sample16(img, 0, x, y)) * 0.25f;
    } else {
      return float((img.data[0] + static_cast<int64_t>(y) * img.pitch[0])[x]);
    }
  }

  //! Chroma sample (cx, cy) in chroma-plane coordinates.
  FF_HD void chroma_at(int cx, int cy, float& u, float& v) const {
    if constexpr (F == PixelFormat::Nv12) {
      const uint8_t* p = img.data[1] + static_cast<int64_t>(cy) * img.pitch[1] + 2 * cx;
      u = float(p[0]);
      v = float(p[1]);
    } else if constexpr (F == PixelFormat::P010) {
      u = float(sample16(img, 1, 2 * cx, cy)) * (1.f / 256.f);
      v = float(sample16(img, 1, 2 * cx + 1, cy)) * (1.f / 256.f);
    } else if constexpr (F == PixelFormat::Yuv420p10) {
      u = float(sample16(img, 1, cx, cy)) * 0.25f;
      v = float(sample16(img, 2, cx, cy)) * 0.25f;
    } else {
      u = float(img.data[1][static_cast<int64_t>(cy) * img.pitch[1] + cx]);
      v = float(img.data[2][static_cast<int64_t>(cy) * img.pitch[2] + cx]);
    }
  }

  //! Bilinear chroma at luma pixel (x, y), honouring where chroma samples sit (4:2:2: on every
  //! luma row, so only columns are interpolated).
  FF_HD void chroma_linear(int x, int y, float& u, float& v) const {
    const int cw = (img.width + 1) >> 1, ch = kShiftY ? (img.height + 1) >> 1 : img.height;
    const float fx = color.location == ChromaLocation::Center ? 0.5f * x - 0.25f : 0.5f * x;
    const float fy = !kShiftY ? float(y) : color.location == ChromaLocation::TopLeft ? 0.5f * y : 0.5f * y - 0.25f;
    const int x0 = floori(fx), y0 = floori(fy);
    const float ax = fx - float(x0), ay = fy - float(y0);
    const int xa = clampi(x0, 0, cw - 1), xb = clampi(x0 + 1, 0, cw - 1);
    const int ya = clampi(y0, 0, ch - 1), yb = clampi(y0 + 1, 0, ch - 1);
    float u00, v00, u01, v01, u10, v10, u11, v11;
    chroma_at(xa, ya, u00, v00);
    chroma_at(xb, ya, u01, v01);
    chroma_at(xa, yb, u10, v10);
    chroma_at(xb, yb, u11, v11);
    const float top_u = u00 + ax * (u01 - u00), bot_u = u10 + ax * (u11 - u10);
    const float top_v = v00 + ax * (v01 - v00), bot_v = v10 + ax * (v11 - v10);
    u = top_u + ay * (bot_u - top_u);
    v = top_v + ay * (bot_v - top_v);
  }
};

}  // namespace framefuse::ops
