#pragma once
//! Crop + resize by read-back: an output pixel asks the reader behind it for exactly the source taps
//! it needs; no cropped or resized image is ever materialised. Coordinates follow cv::resize:
//!  Nearest: sx = floor(dx * src / dst)                       (INTER_NEAREST)
//!  Linear:  sx = (dx + 0.5) * src / dst - 0.5, edge-clamped  (INTER_LINEAR, torchvision antialias=False)
//!  AreaBox: exact box average with fractional edge weights   (INTER_AREA when shrinking both axes)
//!  AreaUp:  OpenCV's INTER_AREA coefficients when enlarging  (either axis scale < 1)
#include "pipeline/ops/op_traits.hpp"

namespace framefuse::ops {

//! What the user asks for; `Area` resolves to AreaBox or AreaUp at setup, as OpenCV decides.
enum class Interp : uint8_t { Nearest, Linear, Area, AreaBox, AreaUp };

struct Resize {
  //! Maps a crop window of the source (x0, y0, w, h) onto a virtual image of dst_w x dst_h.
  struct Params {
    int32_t x0, y0, src_w, src_h;   //!< crop window in source pixels
    int32_t dst_w, dst_h;           //!< size of the virtual resized image
    float scale_x, scale_y;         //!< src / dst
    float inv_scale_x, inv_scale_y; //!< dst / src
    Interp interp;                  //!< never Area (resolved)
  };

  //! One axis of a two-tap filter: sample index i0 with weight (1 - a), i0 + 1 with weight a.
  struct Taps2 {
    int i0, i1;
    float a;
  };

  FF_HD static Taps2 linear_taps(int d, float scale, int n) {
    float f = (float(d) + 0.5f) * scale - 0.5f;
    int i = floori(f);
    f -= float(i);
    if (i < 0) { i = 0; f = 0.f; }
    if (i >= n - 1) { i = n - 1; f = 0.f; }
    return {i, i + 1 < n ? i + 1 : n - 1, f};
  }

  FF_HD static Taps2 area_up_taps(int d, float scale, float inv_scale, int n) {
    int i = floori(float(d) * scale);
    float f = float(d + 1) - float(i + 1) * inv_scale;
    f = f <= 0.f ? 0.f : f - float(floori(f));
    if (i < 0) { i = 0; f = 0.f; }
    if (i >= n - 1) { i = n - 1; f = 0.f; }
    return {i, i + 1 < n ? i + 1 : n - 1, f};
  }

  //! Box filter extent on one axis: covers source [lo, hi) in float, clipped to the image.
  struct Box {
    float lo, hi, inv_cell;
    int first, last;   //!< inclusive range of sample indices touched
  };

  FF_HD static Box area_box(int d, float scale, int n) {
    const float lo = float(d) * scale;
    float hi = lo + scale;
    const float cell = scale < float(n) - lo ? scale : float(n) - lo;
    if (hi > float(n)) hi = float(n);
    int first = floori(lo);
    int last = floori(hi - 1e-3f);
    if (last > n - 1) last = n - 1;
    if (first > last) first = last;
    return {lo, hi, 1.f / cell, first, last};
  }

  //! Weight of sample i inside a box (overlap of [i, i+1) with [lo, hi), ignoring slivers < 1e-3).
  FF_HD static float box_weight(const Box& b, int i) {
    float l = float(i) > b.lo ? float(i) : b.lo;
    float h = float(i + 1) < b.hi ? float(i + 1) : b.hi;
    float w = h - l;
    return w > 1e-3f ? w * b.inv_cell : 0.f;
  }

  //! The resized pixel (dx, dy) of the crop, read back through `src.rgb(x, y)`.
  template <class Reader>
  FF_HD static Vec3 sample(const Reader& src, const Params& p, int dx, int dy) {
    switch (p.interp) {
      case Interp::Nearest: {
        int sx = int((int64_t(dx) * p.src_w) / p.dst_w);
        int sy = int((int64_t(dy) * p.src_h) / p.dst_h);
        return src.rgb(p.x0 + sx, p.y0 + sy);
      }
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
      default: {
        const bool up = p.interp == Interp::AreaUp;
        const Taps2 tx = up ? area_up_taps(dx, p.scale_x, p.inv_scale_x, p.src_w)
                            : linear_taps(dx, p.scale_x, p.src_w);
        const Taps2 ty = up ? area_up_taps(dy, p.scale_y, p.inv_scale_y, p.src_h)
                            : linear_taps(dy, p.scale_y, p.src_h);
        const Vec3 a = src.rgb(p.x0 + tx.i0, p.y0 + ty.i0), b = src.rgb(p.x0 + tx.i1, p.y0 + ty.i0);
        const Vec3 c = src.rgb(p.x0 + tx.i0, p.y0 + ty.i1), d = src.rgb(p.x0 + tx.i1, p.y0 + ty.i1);
        const Vec3 top = a * (1.f - tx.a) + b * tx.a, bot = c * (1.f - tx.a) + d * tx.a;
        return top * (1.f - ty.a) + bot * ty.a;
      }
    }
  }
};

}  // namespace framefuse::ops
