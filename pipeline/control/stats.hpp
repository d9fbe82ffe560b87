#pragma once
//! Monitoring statistics of one frame, measured on its luma thumbnail (pipeline/control/
//! thumbnail.hpp): kThumbW x kThumbH fixed-point luma values, each the mean of a grid of luma
//! samples of its cell of the frame. Histogram and near-black / near-white fractions are therefore
//! those of the thumbnail, not of single source pixels; motion compares the thumbnail with the
//! previous frame's.
//!
//! Sums are integers over fixed-point luma, so the result does not depend on the order pixels are
//! added in: a CPU loop and GPU block reductions (warp sums of each term, shared-memory and global
//! atomics) give the same accumulators for the same thumbnail, and finalize() turns them into
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

//! What one pixel adds to each field of RegionSums, as 32-bit terms that a 32-lane sum never
//! overflows (each at most 65535 x 255): the GPU sums each term over a warp in one instruction
//! (redux), the CPU adds them one pixel at a time; add_terms() turns term sums into RegionSums.
//! sum_sq travels as two 16-bit halves of q^2.
enum Term : int {
  kTermPixels, kTermSum, kTermSqHigh, kTermSqLow, kTermBlack, kTermWhite, kTermDiff,
  kTermMoving, kTermMovingW, kTermMovingWx2, kTermMovingWy2, kTerms
};

//! Term t of pixel `s` counted in a region (0 for a pixel outside it: pass in = false).
FF_HD uint32_t sample_term(const PixelSample& s, int t, bool in) {
  if (!in) return 0;
  const bool moving = s.diff >= kMovingDiffQ;
  switch (t) {
    case kTermPixels: return 1;
    case kTermSum: return s.q;
    case kTermSqHigh: return (s.q * s.q) >> 16;
    case kTermSqLow: return (s.q * s.q) & 0xffffu;
    case kTermBlack: return s.bin < kBlackBins ? 1 : 0;
    case kTermWhite: return s.bin >= kHistBins - kWhiteBins ? 1 : 0;
    case kTermDiff: return s.diff;
    case kTermMoving: return moving ? 1 : 0;
    case kTermMovingW: return moving ? s.diff : 0;
    case kTermMovingWx2: return moving ? s.diff * uint32_t(2 * s.x + 1) : 0;
    default: return moving ? s.diff * uint32_t(2 * s.y + 1) : 0;   // kTermMovingWy2
  }
}

//! a += the term sums `t` (kTerms of them, any number of pixels).
FF_HD void add_terms(RegionSums& a, const uint64_t* t) {
  a.pixels += t[kTermPixels];
  a.sum += t[kTermSum];
  a.sum_sq += (t[kTermSqHigh] << 16) + t[kTermSqLow];
  a.black += t[kTermBlack];
  a.white += t[kTermWhite];
  a.diff_sum += t[kTermDiff];
  a.moving += t[kTermMoving];
  a.moving_w += t[kTermMovingW];
  a.moving_wx2 += t[kTermMovingWx2];
  a.moving_wy2 += t[kTermMovingWy2];
}

//! Adds one pixel to private (CPU) sums.
FF_HD void add_sample(RegionSums& a, const PixelSample& s) {
  uint64_t t[kTerms];
  for (int i = 0; i < kTerms; ++i) t[i] = sample_term(s, i, true);
  add_terms(a, t);
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

//! The float fields of RegionStats, in finalize_field()'s numbering.
enum StatField : int {
  kStatMean, kStatVariance, kStatBlack, kStatWhite, kStatMotion, kStatMoving, kStatCentroidX, kStatCentroidY,
  kStatFields
};

//! Field f of the statistics of the sums `a` over region `r`: an integer numerator over an exact
//! denominator, one correctly rounded division (host and device agree bit for bit). The switch only
//! picks the operands, so GPU threads computing different fields divide together.
FF_HD float finalize_field(const RegionSums& a, const Region& r, int f) {
  const uint64_t n = a.pixels > 0 ? a.pixels : 1;
  const double one = double(kLumaOne);
  double num, den;
  switch (f) {
    case kStatMean: num = double(a.sum), den = double(n) * one; break;
    // n * sum_sq <= 9216 * 9216 * 65535^2 < 2^64; the difference is exact and >= 0.
    case kStatVariance: num = double(n * a.sum_sq - a.sum * a.sum), den = double(n * n) * one * one; break;
    case kStatBlack: num = double(a.black), den = double(n); break;
    case kStatWhite: num = double(a.white), den = double(n); break;
    case kStatMotion: num = double(a.diff_sum), den = double(n) * one; break;
    case kStatMoving: num = double(a.moving), den = double(n); break;
    case kStatCentroidX:
      num = a.moving_w > 0 ? double(a.moving_wx2) : double(r.x0 + r.x1);
      den = a.moving_w > 0 ? double(2 * a.moving_w * kThumbW) : double(2 * kThumbW);
      break;
    default:   // kStatCentroidY
      num = a.moving_w > 0 ? double(a.moving_wy2) : double(r.y0 + r.y1);
      den = a.moving_w > 0 ? double(2 * a.moving_w * kThumbH) : double(2 * kThumbH);
      break;
  }
  return static_cast<float>(num / den);
}

//! Sets field f (StatField) of `s` to v.
FF_HD void set_field(RegionStats& s, int f, float v) {
  switch (f) {
    case kStatMean: s.mean = v; break;
    case kStatVariance: s.variance = v; break;
    case kStatBlack: s.black_fraction = v; break;
    case kStatWhite: s.white_fraction = v; break;
    case kStatMotion: s.motion = v; break;
    case kStatMoving: s.moving_fraction = v; break;
    case kStatCentroidX: s.centroid_x = v; break;
    default: s.centroid_y = v; break;
  }
}

//! Accumulators -> statistics: every finalize_field(), the pixel count and the histogram (the GPU
//! computes the same pieces in parallel threads).
FF_HD RegionStats finalize(const RegionAccum& acc, const Region& r) {
  RegionStats s;
  for (int f = 0; f < kStatFields; ++f) set_field(s, f, finalize_field(acc.sums, r, f));
  s.pixels = static_cast<uint32_t>(acc.sums.pixels);
  for (int b = 0; b < kHistBins; ++b) s.hist[b] = acc.hist[b];
  return s;
}

//! Total-variation distance of two histograms, each normalised by its pixel count: 0 = same
//! distribution, 1 = disjoint. An exact integer sum of one term per bin (hist_term; the GPU sums
//! them in parallel), then one division (hist_distance_of).
FF_HD uint64_t hist_term(const RegionStats& a, const RegionStats& b, int bin) {
  const uint64_t x = uint64_t{a.hist[bin]} * b.pixels, y = uint64_t{b.hist[bin]} * a.pixels;
  return x > y ? x - y : y - x;
}
FF_HD float hist_distance_of(uint64_t terms, const RegionStats& a, const RegionStats& b) {
  if (a.pixels == 0 || b.pixels == 0) return 0.f;
  return static_cast<float>(double(terms) / (2.0 * double(a.pixels) * double(b.pixels)));
}
FF_HD float hist_distance(const RegionStats& a, const RegionStats& b) {
  uint64_t d = 0;
  for (int i = 0; i < kHistBins; ++i) d += hist_term(a, b, i);
  return hist_distance_of(d, a, b);
}

//! Statistics of one frame: region 0 the whole frame, region k + 1 output k's crop window.
struct FrameStats {
  int32_t num_regions;
  RegionStats region[kMaxRegions];
};

}  // namespace framefuse::control
