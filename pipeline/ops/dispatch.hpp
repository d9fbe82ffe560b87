#pragma once
//! Turns a run-time PixelFormat into a compile-time one: f(std::integral_constant<PixelFormat, F>{}).
#include <type_traits>

#include "pipeline/ops/image.hpp"

namespace framefuse::ops {

template <PixelFormat F>
using FormatTag = std::integral_constant<PixelFormat, F>;

template <class Fn>
decltype(auto) dispatch_format(PixelFormat f, Fn&& fn) {
  switch (f) {
    case PixelFormat::Nv12: return fn(FormatTag<PixelFormat::Nv12>{});
    case PixelFormat::P010: return fn(FormatTag<PixelFormat::P010>{});
    case PixelFormat::Yuv420p: return fn(FormatTag<PixelFormat::Yuv420p>{});
    case PixelFormat::Rgb24: return fn(FormatTag<PixelFormat::Rgb24>{});
    case PixelFormat::Yuv420p10: return fn(FormatTag<PixelFormat::Yuv420p10>{});
    case PixelFormat::Yuv422p: return fn(FormatTag<PixelFormat::Yuv422p>{});
    case PixelFormat::Bgr24: break;
  }
  return fn(FormatTag<PixelFormat::Bgr24>{});
}

}  // namespace framefuse::ops
