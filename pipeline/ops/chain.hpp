#pragma once
//! The fused chain for one output pixel: read (colour) -> crop/resize (read-back) -> aspect window
//! (letterbox pad / centre crop) -> channel order -> normalize -> store. `Chain::pixel` defines every
//! output value: the GPU kernel calls it per pixel; the CPU executor runs the same ops a row at a
//! time (separable passes, the same float operations in the same order), bit-identical to it.
#include "pipeline/ops/color.hpp"
#include "pipeline/ops/resize.hpp"
#include "pipeline/ops/write.hpp"

namespace framefuse::ops {

enum class Channels : uint8_t { Rgb, Bgr, Gray };

//! Luma of an RGB pixel with cv::COLOR_RGB2GRAY weights.
FF_HD float rgb_to_gray(Vec3 v) { return 0.299f * v.x + 0.587f * v.y + 0.114f * v.z; }

struct Chain {
  //! Everything one output needs, by value. Output pixel (x, y) shows resized pixel
  //! (x + off_x, y + off_y); outside the resized image it is `pad` (pixel units, normalized too).
  struct Params {
    Resize::Params resize;
    int32_t off_x, off_y;
    float pad[3];
    Channels channels;
    Normalize::Params norm;
    Store::Params store;        //!< store.data is frame 0's tensor; frame b adds b * frame_stride bytes
    int64_t frame_stride;       //!< bytes between frames of a batch
  };

  template <class Reader>
  FF_HD static void pixel(const Reader& src, const Params& p, int batch_index, int x, int y) {
    const int rx = x + p.off_x, ry = y + p.off_y;
    Vec3 v;
    if (rx < 0 || ry < 0 || rx >= p.resize.dst_w || ry >= p.resize.dst_h) {
      v = {p.pad[0], p.pad[1], p.pad[2]};
    } else {
      v = Resize::sample(src, p.resize, rx, ry);
    }
    emit(p, batch_index, x, y, v);
  }

  //! pixel()'s last ops for output pixel (x, y) of batch frame `batch_index` showing the resized
  //! (or pad) value v: channel order, normalize, store.
  FF_HD static void emit(const Params& p, int batch_index, int x, int y, Vec3 v) {
    Store::Params st = p.store;
    st.data = static_cast<uint8_t*>(st.data) + p.frame_stride * batch_index;
    switch (p.channels) {
      case Channels::Rgb:
        Store::apply(st, x, y, 0, Normalize::apply(v.x, 0, p.norm));
        Store::apply(st, x, y, 1, Normalize::apply(v.y, 1, p.norm));
        Store::apply(st, x, y, 2, Normalize::apply(v.z, 2, p.norm));
        break;
      case Channels::Bgr:
        Store::apply(st, x, y, 0, Normalize::apply(v.z, 0, p.norm));
        Store::apply(st, x, y, 1, Normalize::apply(v.y, 1, p.norm));
        Store::apply(st, x, y, 2, Normalize::apply(v.x, 2, p.norm));
        break;
      case Channels::Gray:
        Store::apply(st, x, y, 0, Normalize::apply(rgb_to_gray(v), 0, p.norm));
        break;
    }
  }
};

}  // namespace framefuse::ops
