#pragma once
//! Crop + resize by read-back: an output pixel asks the reader behind it for exactly the source taps
//! it needs; no cropped or resized image is ever materialised. Coordinates follow cv::resize:
//!  Nearest: sx = floor(dx * scale), scale = 1 / (dst / src)  (INTER_NEAREST, double as OpenCV)
//!  Linear:  sx = (dx + 0.5) * scale - 0.5, edge-clamped     (INTER_LINEAR, torchvision antialias=False)
//!  AreaBox: exact box average with fractional edge weights   (INTER_AREA when shrinking both axes)
//!  AreaUp:  OpenCV's INTER_AREA coefficients when enlarging  (either axis scale < 1)
#include "pipeline/ops/op_traits.hpp"

namespace framefuse::ops {

//! What the user asks for; `Area` resolves to AreaBox or AreaUp at setup, as OpenCV decides.
enum class Interp : uint8_t { Nearest, Linear, Area, AreaBox, AreaUp };

struct Resize {
  //! Maps a crop window of the source (x0, y0, w, h) onto a virtual image of dst_w x dst_h.
  //! Scales are double, computed as cv::resize does (inv = dst / src, scale = 1 / inv): nearest and
  //! area-up floor `d * scale`, and where d * src / dst is an integer OpenCV's double product can
  //! land just below it; float or exact arithmetic would then pick the next source pixel.
  struct Params {
    int32_t x0, y0, src_w, src_h;   //!< crop window in source pixels
    int32_t dst_w, dst_h;           //!< size of the virtual resized image
    double scale_x, scale_y;        //!< 1 / inv_scale (src / dst, rounded as OpenCV does)
    double inv_scale_x, inv_scale_y;  //!< dst / src
    Interp interp;                  //!< never Area (resolved)
  };

  //! floor() for |v| < 2^31, identical on host and device.
  FF_HD static int floord(double v) {
    int i = static_cast<int>(v);
    return (static_cast<double>(i) > v) ? i - 1 : i;
  }

  //! Source index of output index d (cv::resize INTER_NEAREST: floor(d * scale), clamped).
  FF_HD static int nearest_tap(int d, double scale, int n) {
    const int i = floord(double(d) * scale);
    return i < n - 1 ? i : n - 1;
  }

  //! One axis of a two-tap filter: sample index i0 with weight (1 - a), i1 with weight a.
  struct Taps2 {
    int i0, i1;
    float a;
  };

  //! INTER_LINEAR: half-pixel centres, position rounded to float before the floor, edges clamped.
  FF_HD static Taps2 linear_taps(int d, double scale, int n) {
    float f = static_cast<float>((double(d) + 0.5) * scale - 0.5);
    int i = floori(f);
    f -= float(i);
    if (i < 0) { i = 0; f = 0.f; }
    if (i >= n - 1) { i = n - 1; f = 0.f; }
    return {i, i + 1 < n ? i + 1 : n - 1, f};
  }

  //! INTER_AREA when enlarging: a pixel straddling a source boundary blends the two sources.
  FF_HD static Taps2 area_up_taps(int d, double scale, double inv_scale, int n) {
    int i = floord(double(d) * scale);
    float f = static_cast<float>(double(d + 1) - double(i + 1) * inv_scale);
    f = f <= 0.f ? 0.f : f - float(floori(f));
    if (i < 0) { i = 0; f = 0.f; }
    if (i >= n - 1) { i = n - 1; f = 0.f; }
    return {i, i + 1 < n ? i + 1 : n - 1, f};
  }

  //! Box filter extent on one axis: covers source [first + lo, first + hi), clipped to the image.
  //! lo/hi are relative to `first` so float keeps full precision far from the origin.
  struct Box {
    float lo, hi, inv_cell;
    int first, last;   //!< inclusive range of sample indices touched
  };

  //! cv::resize INTER_AREA (shrinking) box of output index d: [d * scale, (d + 1) * scale) in double.
  FF_HD static Box area_box(int d, double scale, int n) {
    const double lo = double(d) * scale;
    double hi = lo + scale;
    const double cell = scale < double(n) - lo ? scale : double(n) - lo;
    if (hi > double(n)) hi = double(n);
    int first = floord(lo);
    int last = floord(hi - 1e-3);
    if (last > n - 1) last = n - 1;
    if (first > last) first = last;
    return {static_cast<float>(lo - first), static_cast<float>(hi - first), static_cast<float>(1.0 / cell),
            first, last};
  }

  //! Weight of sample i inside a box (overlap of [i, i+1) with the box, ignoring slivers <= 1e-3).
  FF_HD static float box_weight(const Box& b, int i) {
    const float k = float(i - b.first);
    const float l = k > b.lo ? k : b.lo;
    const float h = k + 1.f < b.hi ? k + 1.f : b.hi;
    const float w = h - l;
    return w > 1e-3f ? w * b.inv_cell : 0.f;
  }

  //! The two taps sample() weighs on one axis (y_axis: rows) for resized index d, for every interp
  //! but AreaBox. Nearest: its one tap as {i, i, 0}, which blend() weighs to exactly that sample
  //! (v * 1 + v * 0 == v for the finite, non-negative pixels here). Kernels tabulate it per output
  //! column and row at setup.
  FF_HD static Taps2 axis_taps(const Params& p, bool y_axis, int d) {
    const double scale = y_axis ? p.scale_y : p.scale_x;
    const int n = y_axis ? p.src_h : p.src_w;
    switch (p.interp) {
      case Interp::Nearest: {
        const int i = nearest_tap(d, scale, n);
        return {i, i, 0.f};
      }
      case Interp::AreaUp: return area_up_taps(d, scale, y_axis ? p.inv_scale_y : p.inv_scale_x, n);
      default: return linear_taps(d, scale, n);
    }
  }

  //! The two-tap filter (linear, area-up) of the crop at origin (x0, y0): reads src.rgb(x0 + tx.i*,
  //! y0 + ty.i*) and weighs rows, then columns.
  template <class Reader>
  FF_HD static Vec3 blend(const Reader& src, int x0, int y0, Taps2 tx, Taps2 ty) {
    // A tap of weight 0 is not read: v * 1 + w * 0 == v for the finite, non-negative pixels
    // here, so substituting its neighbour gives the bit-identical result (integer scale
    // factors put weight 0 on every second tap).
    const Vec3 a = src.rgb(x0 + tx.i0, y0 + ty.i0);
    const Vec3 b = tx.a != 0.f ? src.rgb(x0 + tx.i1, y0 + ty.i0) : a;
    const Vec3 top = a * (1.f - tx.a) + b * tx.a;
    Vec3 bot = top;
    if (ty.a != 0.f) {
      const Vec3 c = src.rgb(x0 + tx.i0, y0 + ty.i1);
      const Vec3 d = tx.a != 0.f ? src.rgb(x0 + tx.i1, y0 + ty.i1) : c;
      bot = c * (1.f - tx.a) + d * tx.a;
    }
    return top * (1.f - ty.a) + bot * ty.a;
  }

  //! The resized pixel (dx, dy) of the crop, read back through `src.rgb(x, y)`.
  template <class Reader>
  FF_HD static Vec3 sample(const Reader& src, const Params& p, int dx, int dy) {
    switch (p.interp) {
      case Interp::Nearest:
        return src.rgb(p.x0 + nearest_tap(dx, p.scale_x, p.src_w), p.y0 + nearest_tap(dy, p.scale_y, p.src_h));
      case Interp::AreaBox: {
        const Box bx = area_box(dx, p.scale_x, p.src_w), by = area_box(dy, p.scale_y, p.src_h);
        Vec3 acc{0.f, 0.f, 0.f};
        for (int y = by.first; y <= by.last; ++y) {
          const float wy = box_weight(by, y);
          Vec3 row{0.f, 0.f, 0.f};
          for (int x = bx.first; x <= bx.last; ++x) {
            row = row + src.rgb(p.x0 + x, p.y0 + y) * box_weight(bx, x);
          }
          acc = acc + row * wy;
        }
        return acc;
      }
      default: return blend(src, p.x0, p.y0, axis_taps(p, false, dx), axis_taps(p, true, dy));
    }
  }
};

}  // namespace framefuse::ops
