#pragma once
//! Specs shared by the control tests (CPU: tests/unit/control_test.cpp, GPU:
//! tests/gpu/control_gpu_test.cpp): a 320x180 RGB stream at 25 fps and the outputs whose bytes
//! expose what control did (gray f32 = luma x gain; an unresized u8 window = the pixels under it).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/control/stats.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/spec.hpp"

namespace framefuse::test {

inline constexpr int kControlW = 320, kControlH = 180;   // thumbnail scale 2.5 on both axes
inline constexpr double kControlFps = 25;

inline RectSpec pixels(int x, int y, int w, int h) { return {double(x), double(y), double(w), double(h), false}; }

//! A gray f32 output on the 0..1 scale: its mean is the window's luma times the gain.
inline OutputSpec gray_output(std::string name, RectSpec crop = {}) {
  OutputSpec o;
  o.name = std::move(name);
  o.crop = crop;
  o.channels = ChannelOrder::Gray;
  o.scale = 1.f / 255.f;
  return o;
}

//! An RGB u8 HWC output of the crop, not resized: its bytes are the source pixels under the window.
inline OutputSpec window_output(std::string name, RectSpec crop) {
  OutputSpec o;
  o.name = std::move(name);
  o.crop = crop;
  o.layout = ops::Layout::Hwc;
  o.dtype = ops::DType::U8;
  o.scale = 1.f;
  return o;
}

//! A pipeline named `name` with `outputs` and `control` switched on.
inline PipelineSpec control_pipeline(std::string name, std::vector<OutputSpec> outputs, ControlSpec control) {
  PipelineSpec p;
  p.name = std::move(name);
  p.outputs = std::move(outputs);
  control.enabled = true;
  p.control = std::move(control);
  return p;
}

//! Luma (0..1, clamped; NaN -> 0) as a thumbnail value: round(luma * kLumaOne).
inline uint16_t to_q(float luma) {
  const float c = luma > 0.f ? (luma < 1.f ? luma : 1.f) : 0.f;
  return static_cast<uint16_t>(c * float(control::kLumaOne) + 0.5f);
}

//! The kControlW x kControlH RGB24 stream.
inline FrameInfo control_frame_info() {
  FrameInfo f;
  f.width = kControlW;
  f.height = kControlH;
  f.format = ops::PixelFormat::Rgb24;
  return f;
}

}  // namespace framefuse::test
