#pragma once
//! Small output plans for sink tests: what a pipeline hands its sink.
#include <vector>

#include "pipeline/fused/plan.hpp"

namespace framefuse::test {

//! Two outputs of a 64x48 frame: "cls", 3-channel CHW 8x6 of `cls_dtype` (shape [3, 6, 8]), and
//! "gray", gray HWC 5x4 of `gray_dtype` (shape [4, 5, 1]).
inline std::vector<OutputPlan> two_output_plans(ops::DType cls_dtype, ops::DType gray_dtype) {
  FrameInfo frame;
  frame.width = 64;
  frame.height = 48;
  OutputSpec a;
  a.name = "cls";
  a.resize = {8, 6, 0};
  a.dtype = cls_dtype;
  OutputSpec b;
  b.name = "gray";
  b.resize = {5, 4, 0};
  b.channels = ChannelOrder::Gray;
  b.layout = ops::Layout::Hwc;
  b.dtype = gray_dtype;
  return {make_output_plan(a, frame, "a"), make_output_plan(b, frame, "b")};
}

}  // namespace framefuse::test
