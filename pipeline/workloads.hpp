#pragma once
//! The canonical preprocessing outputs that benchmarks (`framefused bench`, tests/bench), the GPU
//! tests and their torchvision mirror (tests/bench/torchvision_bench.py) share.
#include "pipeline/spec.hpp"

namespace framefuse::workloads {

//! Resize(256) -> CenterCrop(224) -> ToDtype(f32, scale) -> Normalize(ImageNet), CHW f32.
inline OutputSpec classify_spec() {
  OutputSpec s;
  s.name = "classify";
  s.resize.shorter_side = 256;
  s.interp = ops::Interp::Linear;
  s.center_crop = std::array<int32_t, 2>{224, 224};
  s.mean = {0.485f, 0.456f, 0.406f};
  s.std = {0.229f, 0.224f, 0.225f};
  return s;
}

//! Letterbox to 640x640 (pad 114) -> / 255, CHW f16.
inline OutputSpec detect_spec() {
  OutputSpec s;
  s.name = "detect";
  s.resize.width = 640;
  s.resize.height = 640;
  s.interp = ops::Interp::Linear;
  s.aspect = AspectMode::Letterbox;
  s.dtype = ops::DType::F16;
  return s;
}

//! 320x180 stretch, pixel values kept (scale 1), HWC u8.
inline OutputSpec thumbnail_spec() {
  OutputSpec s;
  s.name = "thumbnail";
  s.resize.width = 320;
  s.resize.height = 180;
  s.interp = ops::Interp::Linear;
  s.scale = 1.f;
  s.layout = ops::Layout::Hwc;
  s.dtype = ops::DType::U8;
  return s;
}

}  // namespace framefuse::workloads
