#pragma once
//! The luma thumbnail the control statistics are measured on, defined once for the CPU engine and
//! the GPU statistics blocks: kThumbW x kThumbH pixels; pixel (tx, ty) is the mean of a
//! kThumbSamples x kThumbSamples grid of luma samples spread over its cell of the frame (cell
//! columns [tx W / kThumbW, (tx + 1) W / kThumbW), rows likewise; sample k of an axis sits at the
//! centre of the cell's k-th quarter, rounded down), range-normalised to 0..1 and stored in fixed
//! point (q = luma x kLumaOne). Luma is read straight from the Y plane (limited range: (Y - 16) /
//! 219, clamped), or for RGB frames computed as OpenCV's fixed-point gray (0.299 R + 0.587 G +
//! 0.114 B). A 1080p frame is read 16 times per 15 x 15 cell: a quarter of its luma rows, no chroma.
//! Integer arithmetic only: both backends produce the same thumbnail bit for bit.
#include <cstdint>

#include "pipeline/control/stats.hpp"
#include "pipeline/ops/color.hpp"

namespace framefuse::control {

inline constexpr int kThumbSamples = 4;   //!< luma samples per cell and axis

//! Sum of a cell's luma codes (16-bit scale: 8-bit samples x 256, P010 as stored) -> q.
struct LumaScale {
  uint32_t black;   //!< black level x kThumbSamples^2
  uint64_t mul;     //!< 2^32 kLumaOne / (white - black level) / kThumbSamples^2, rounded
};

//! The scale of frames of format `f` with colour `c`: limited range when the conversion has a
//! luma offset (ColorParams::yuv.y_off, 16 for limited-range YUV), full range otherwise and for RGB.
FF_HD LumaScale luma_scale(ops::PixelFormat f, const ops::ColorParams& c) {
  const bool limited = f != ops::PixelFormat::Rgb24 && f != ops::PixelFormat::Bgr24 && c.yuv.y_off > 0.f;
  const uint64_t n = kThumbSamples * kThumbSamples;
  const uint64_t black = limited ? 16 * 256 : 0, range = (limited ? 219 : 255) * 256;
  return {static_cast<uint32_t>(black * n), ((uint64_t{kLumaOne} << 32) + range * n / 2) / (range * n)};
}

//! Luma code of pixel (x, y) on the 16-bit scale.
template <ops::PixelFormat F>
FF_HD uint32_t luma_code(const ops::ImageView& img, int x, int y) {
  const uint8_t* row = img.data[0] + static_cast<int64_t>(y) * img.pitch[0];
  if constexpr (F == ops::PixelFormat::P010) {
    return ops::sample16(img, 0, x, y);
  } else if constexpr (F == ops::PixelFormat::Yuv420p10) {
    return uint32_t{ops::sample16(img, 0, x, y)} << 6;
  } else if constexpr (F == ops::PixelFormat::Rgb24 || F == ops::PixelFormat::Bgr24) {
    const uint8_t* p = row + 3 * x;
    const uint32_t r = F == ops::PixelFormat::Rgb24 ? p[0] : p[2], g = p[1], b = F == ops::PixelFormat::Rgb24 ? p[2] : p[0];
    return ((r * 4899u + g * 9617u + b * 1868u + 8192u) >> 14) << 8;   // cv::COLOR_RGB2GRAY's integer weights
  } else {
    return uint32_t{row[x]} << 8;
  }
}

//! Frame coordinate of sample k of cell `cell` of `cells` along an axis of `size` pixels. Inside
//! the frame for any size >= 1 (an empty cell samples its start).
FF_HD int cell_sample(int cell, int cells, int size, int k) {
  const int lo = cell * size / cells, hi = (cell + 1) * size / cells;
  return lo + (2 * k + 1) * (hi - lo) / (2 * kThumbSamples);
}

//! The frame coordinates of the samples of cell `cell` of `cells` along an axis of `size` pixels.
FF_HD void cell_samples(int cell, int cells, int size, int (&at)[kThumbSamples]) {
  for (int k = 0; k < kThumbSamples; ++k) at[k] = cell_sample(cell, cells, size, k);
}

//! Sum of the luma codes at the samples xs x ys.
template <ops::PixelFormat F>
FF_HD uint32_t thumb_sum(const ops::ImageView& img, const int (&xs)[kThumbSamples], const int (&ys)[kThumbSamples]) {
  uint32_t sum = 0;
  for (int j = 0; j < kThumbSamples; ++j)
    for (int i = 0; i < kThumbSamples; ++i) sum += luma_code<F>(img, xs[i], ys[j]);
  return sum;
}

//! A cell's sum of luma codes -> q in [0, kLumaOne].
FF_HD uint32_t thumb_q(uint32_t sum, const LumaScale& s) {
  const uint64_t above = sum > s.black ? sum - s.black : 0;
  const uint64_t q = (above * s.mul + (uint64_t{1} << 31)) >> 32;
  return q < kLumaOne ? static_cast<uint32_t>(q) : kLumaOne;
}

//! Thumbnail pixel (tx, ty) of `img`: q in [0, kLumaOne].
template <ops::PixelFormat F>
FF_HD uint32_t thumb_pixel(const ops::ImageView& img, const LumaScale& s, int tx, int ty) {
  int xs[kThumbSamples], ys[kThumbSamples];
  cell_samples(tx, kThumbW, img.width, xs);
  cell_samples(ty, kThumbH, img.height, ys);
  return thumb_q(thumb_sum<F>(img, xs, ys), s);
}

}  // namespace framefuse::control
