#pragma once
//! Monitoring statistics of one frame, measured on its luma thumbnail (pipeline/control/
//! thumbnail.hpp): kThumbW x kThumbH fixed-point luma values, each the mean of a grid of luma
//! samples of its cell of the frame. Histogram and near-black / near-white fractions are therefore
//! those of the thumbnail, not of single source pixels; motion compares the thumbnail with the
//! previous frame's.
//!
//! Sums are integers over fixed-point luma, so the result does not depend on the order pixels are
//! added in: a CPU loop and GPU block reductions (per-thread sums, warp shuffles, shared-memory and
//! global atomics) give the same accumulators for the same thumbnail, and finalize() turns them into
//! the same floats, bit for bit.
#include <cstdint>

#include "pipeline/fused/fused_params.hpp"
#include "pipeline/ops/op_traits.hpp"

namespace framefuse::control {

inline constexpr int kThumbW = 128, kThumbH = 72;
inline constexpr int kThumbPixels = kThumbW * kThumbH;
inline constexpr int kHistBins = 64;
//! Region 0 is the whole frame; region k + 1 is output k's crop window.
inline constexpr int kMaxRegions = 1 + kMaxOutputs;
//! Fixed-point luma: q = luma * kLumaOne, luma in [0, 1].
inline constexpr uint32_t kLumaOne = 65535;
inline constexpr int kBinShift = 10;            //!< histogram bin = q >> kBinShift (64 bins)
inline constexpr uint32_t kBlackBins = 4;       //!< near-black: luma < 4/64 (bins 0..3)
inline constexpr uint32_t kWhiteBins = 4;       //!< near-white: luma >= 60/64 (bins 60..63)
//! A thumbnail pixel whose luma changed by at least this much (2/255) counts as moving (sensor
//! noise and compression flicker stay below it); moving pixels weight the motion centroid.
inline constexpr uint32_t kMovingDiffQ = 514;

//! A rectangle of thumbnail pixels, [x0, x1) x [y0, y1), never empty.
struct Region {
  int32_t x0, y0, x1, y1;
};

FF_HD int32_t pixel_count(const Region& r) { return (r.x1 - r.x0) * (r.y1 - r.y0); }

//! The t-th pixel of a region in row-major order, t in [0, pixel_count(r)).
FF_HD void region_pixel(const Region& r, int32_t t, int32_t& x, int32_t& y) {
  const int32_t w = r.x1 - r.x0;
  x = r.x0 + t % w;
  y = r.y0 + t / w;
}

//! The thumbnail pixels under a frame rectangle (pixels of a frame_w x frame_h frame): edges
//! rounded to the nearest thumbnail pixel edge, at least one pixel, inside the thumbnail.
FF_HD Region thumb_region(int32_t x, int32_t y, int32_t w, int32_t h, int32_t frame_w, int32_t frame_h) {
  const auto edge = [](int64_t v, int64_t size, int64_t thumb) {
    return static_cast<int32_t>((2 * v * thumb + size) / (2 * size));   // round half up, v >= 0
  };
  Region r;
  r.x0 = ops::clampi(edge(x, frame_w, kThumbW), 0, kThumbW - 1);
  r.y0 = ops::clampi(edge(y, frame_h, kThumbH), 0, kThumbH - 1);
  r.x1 = ops::clampi(edge(int64_t(x) + w, frame_w, kThumbW), r.x0 + 1, kThumbW);
  r.y1 = ops::clampi(edge(int64_t(y) + h, frame_h, kThumbH), r.y0 + 1, kThumbH);
  return r;
}

//! What one thumbnail pixel contributes, whichever regions it falls in.
struct PixelSample {
  uint32_t q;      //!< fixed-point luma
  uint32_t bin;
  uint32_t diff;   //!< |q - previous q|, 0 without a previous thumbnail
  int32_t x, y;    //!< thumbnail pixel
};

//! Thumbnail pixel (x, y) of luma q, `previous` the previous frame's (ignored without one).
FF_HD PixelSample sample_pixel(uint32_t q, uint32_t previous, bool has_previous, int x, int y) {
  const uint32_t p = has_previous ? previous : q;
  return {q, q >> kBinShift, q > p ? q - p : p - q, x, y};
}

//! Whether thumbnail pixel (x, y) lies in `r`.
FF_HD bool contains(const Region& r, int32_t x, int32_t y) { return x >= r.x0 && x < r.x1 && y >= r.y0 && y < r.y1; }

//! Integer sums over the pixels of one region. Zero-initialise before adding.
struct RegionSums {
  uint64_t pixels, sum, sum_sq, black, white, diff_sum;
  uint64_t moving, moving_w, moving_wx2, moving_wy2;   //!< wx2: sum of diff * (2x + 1) (pixel centres)
};

//! f(field) for every field of `a` (a GPU warp reduction shuffles each one).
template <class F>
FF_HD void for_each_field(RegionSums& a, F&& f) {
  f(a.pixels), f(a.sum), f(a.sum_sq), f(a.black), f(a.white), f(a.diff_sum);
  f(a.moving), f(a.moving_w), f(a.moving_wx2), f(a.moving_wy2);
}

//! Adds one pixel to private (thread-local or CPU) sums.
FF_HD void add_sample(RegionSums& a, const PixelSample& s) {
  a.pixels += 1;
  a.sum += s.q;
  a.sum_sq += uint64_t{s.q} * s.q;
  a.black += s.bin < kBlackBins ? 1 : 0;
  a.white += s.bin >= kHistBins - kWhiteBins ? 1 : 0;
  a.diff_sum += s.diff;
  if (s.diff >= kMovingDiffQ) {
    a.moving += 1;
    a.moving_w += s.diff;
    a.moving_wx2 += uint64_t{s.diff} * uint64_t(2 * s.x + 1);
    a.moving_wy2 += uint64_t{s.diff} * uint64_t(2 * s.y + 1);
  }
}

//! dst += src through `add(uint64_t& dst, uint64_t v)`: `+=` on the host, an atomic add into shared
//! memory when the warps of a GPU block merge their partial sums.
template <class Add>
FF_HD void merge(RegionSums& dst, const RegionSums& src, const Add& add) {
  add(dst.pixels, src.pixels), add(dst.sum, src.sum), add(dst.sum_sq, src.sum_sq), add(dst.black, src.black);
  add(dst.white, src.white), add(dst.diff_sum, src.diff_sum), add(dst.moving, src.moving);
  add(dst.moving_w, src.moving_w), add(dst.moving_wx2, src.moving_wx2), add(dst.moving_wy2, src.moving_wy2);
}

//! A region's sums and luma histogram. The histogram takes one add per pixel (`++` on the host, a
//! shared-memory atomic on the GPU).
struct RegionAccum {
  RegionSums sums;
  uint32_t hist[kHistBins];
};

//! Statistics of one region of one frame. Luma and motion on the 0..1 scale.
struct RegionStats {
  float mean;              //!< mean luma
  float variance;          //!< luma variance (population)
  float black_fraction;    //!< share of thumbnail pixels with luma < 1/16
  float white_fraction;    //!< share with luma >= 15/16
  float motion;            //!< mean |luma - previous luma|; 0 for the first frame
  float moving_fraction;   //!< share of pixels whose luma changed by >= 2/255
  float centroid_x;        //!< motion centroid, fractions of the frame (0 = left edge); the
  float centroid_y;        //!< region's centre when nothing moved
  uint32_t pixels;         //!< thumbnail pixels in the region
  uint32_t hist[kHistBins];   //!< luma histogram, bin b = [b/64, (b+1)/64)
};

//! Accumulators -> statistics. Integer numerators and one correctly rounded division each, so
//! host and device agree bit for bit.
FF_HD RegionStats finalize(const RegionAccum& acc, const Region& r) {
  const RegionSums& a = acc.sums;
  RegionStats s;
  const uint64_t n = a.pixels > 0 ? a.pixels : 1;
  const double one = double(kLumaOne);
  s.mean = static_cast<float>(double(a.sum) / (double(n) * one));
  // n * sum_sq <= 9216 * 9216 * 65535^2 < 2^64; the difference is exact and >= 0.
  const uint64_t spread = n * a.sum_sq - a.sum * a.sum;
  s.variance = static_cast<float>(double(spread) / (double(n * n) * one * one));
  s.black_fraction = static_cast<float>(double(a.black) / double(n));
  s.white_fraction = static_cast<float>(double(a.white) / double(n));
  s.motion = static_cast<float>(double(a.diff_sum) / (double(n) * one));
  s.moving_fraction = static_cast<float>(double(a.moving) / double(n));
  if (a.moving_w > 0) {
    s.centroid_x = static_cast<float>(double(a.moving_wx2) / double(2 * a.moving_w * kThumbW));
    s.centroid_y = static_cast<float>(double(a.moving_wy2) / double(2 * a.moving_w * kThumbH));
  } else {
    s.centroid_x = static_cast<float>(double(r.x0 + r.x1) / double(2 * kThumbW));
    s.centroid_y = static_cast<float>(double(r.y0 + r.y1) / double(2 * kThumbH));
  }
  s.pixels = static_cast<uint32_t>(a.pixels);
  for (int b = 0; b < kHistBins; ++b) s.hist[b] = acc.hist[b];
  return s;
}

//! Total-variation distance of two histograms, each normalised by its pixel count: 0 = same
//! distribution, 1 = disjoint. Exact integer sum, one division.
FF_HD float hist_distance(const uint32_t* a, uint32_t na, const uint32_t* b, uint32_t nb) {
  if (na == 0 || nb == 0) return 0.f;
  uint64_t d = 0;
  for (int i = 0; i < kHistBins; ++i) {
    const uint64_t x = uint64_t{a[i]} * nb, y = uint64_t{b[i]} * na;
    d += x > y ? x - y : y - x;
  }
  return static_cast<float>(double(d) / (2.0 * double(na) * double(nb)));
}

//! Statistics of one frame: region 0 the whole frame, region k + 1 output k's crop window.
struct FrameStats {
  int32_t num_regions;
  RegionStats region[kMaxRegions];
};

}  // namespace framefuse::control
