#pragma once
//! Host-side planning: turns an OutputSpec plus the first frame's description into the POD
//! parameters of the fused chain, validating everything a kernel must never check.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "pipeline/ops/chain.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

//! What the decoder says about its frames. Changes of any field require a new plan.
struct FrameInfo {
  int32_t width = 0, height = 0;
  ops::PixelFormat format = ops::PixelFormat::Yuv420p;
  ops::ColorMatrix matrix = ops::ColorMatrix::Bt601;
  ops::ColorRange range = ops::ColorRange::Limited;
  ops::ChromaLocation chroma_location = ops::ChromaLocation::Left;
  bool operator==(const FrameInfo&) const = default;
};

//! One output, planned for frames described by a FrameInfo. `params.store.data` is left null;
//! executors point it at their buffers.
struct OutputPlan {
  std::string name;
  ops::Chain::Params params;
  std::vector<int64_t> shape;   //!< per frame: [C, H, W] (CHW) or [H, W, C] (HWC)
  size_t bytes_per_frame = 0;

  int32_t width() const { return params.store.width; }
  int32_t height() const { return params.store.height; }
};

//! Throws ConfigError naming `context` (e.g. "pipeline 'lobby' output 'cls'") and the bad value.
OutputPlan make_output_plan(const OutputSpec& spec, const FrameInfo& frame, const std::string& context);

//! Colour parameters for frames described by `frame`, with `spec` overriding the stream metadata.
ops::ColorParams make_color_params(const ColorSpec& spec, const FrameInfo& frame);

//! Plans every output of a pipeline.
std::vector<OutputPlan> make_output_plans(const PipelineSpec& spec, const FrameInfo& frame);

//! "1920x1080 nv12 bt709/limited"
std::string describe(const FrameInfo& frame);

}  // namespace framefuse
