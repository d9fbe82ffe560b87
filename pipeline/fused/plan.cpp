#include "pipeline/fused/plan.hpp"

#include <cmath>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"

namespace framefuse {
namespace {

struct Window {
  int32_t resized_w, resized_h, off_x, off_y, out_w, out_h;
};

int32_t round_half_even(double v) { return static_cast<int32_t>(std::nearbyint(v)); }

//! Resized size, window offset and output size for the aspect policy and optional centre crop.
Window plan_window(const OutputSpec& s, int32_t cw, int32_t ch, const std::string& ctx) {
  Window w{};
  if (s.resize.shorter_side > 0) {
    const int32_t side = s.resize.shorter_side;
    if (cw <= ch) {
      w.resized_w = side;
      w.resized_h = static_cast<int32_t>(int64_t(side) * ch / cw);
    } else {
      w.resized_h = side;
      w.resized_w = static_cast<int32_t>(int64_t(side) * cw / ch);
    }
    w.out_w = w.resized_w;
    w.out_h = w.resized_h;
  } else if (s.resize.width > 0 && s.resize.height > 0) {
    w.out_w = s.resize.width;
    w.out_h = s.resize.height;
    const double sx = double(w.out_w) / cw, sy = double(w.out_h) / ch;
    switch (s.aspect) {
      case AspectMode::Stretch:
        w.resized_w = w.out_w;
        w.resized_h = w.out_h;
        break;
      case AspectMode::Letterbox:
      case AspectMode::CenterCropFill: {
        const double k = s.aspect == AspectMode::Letterbox ? std::min(sx, sy) : std::max(sx, sy);
        w.resized_w = std::max(1, static_cast<int32_t>(std::lround(cw * k)));
        w.resized_h = std::max(1, static_cast<int32_t>(std::lround(ch * k)));
        // Letterbox: negative offsets put padding around; fill: positive offsets crop the overflow.
        w.off_x = (w.resized_w - w.out_w) / 2;
        w.off_y = (w.resized_h - w.out_h) / 2;
        break;
      }
    }
  } else {
    w.resized_w = w.out_w = cw;   // no resize: the crop as it is
    w.resized_h = w.out_h = ch;
  }
  if (s.center_crop) {
    const auto [ccw, cch] = *s.center_crop;
    if (ccw <= 0 || cch <= 0) throw ConfigError(fmt::format("{}: center_crop must be positive, got {}x{}", ctx, ccw, cch));
    // torchvision CenterCrop: top-left = round((size - crop) / 2), Python rounding (ties to even).
    w.off_x += round_half_even((w.out_w - ccw) / 2.0);
    w.off_y += round_half_even((w.out_h - cch) / 2.0);
    w.out_w = ccw;
    w.out_h = cch;
  }
  if (w.out_w <= 0 || w.out_h <= 0 || w.resized_w <= 0 || w.resized_h <= 0)
    throw ConfigError(fmt::format("{}: output size {}x{} is empty", ctx, w.out_w, w.out_h));
  return w;
}

}  // namespace

OutputPlan make_output_plan(const OutputSpec& s, const FrameInfo& f, const std::string& ctx) {
  int32_t cx, cy, cw, ch;
  if (s.crop.fractional) {
    cx = static_cast<int32_t>(std::lround(s.crop.x * f.width));
    cy = static_cast<int32_t>(std::lround(s.crop.y * f.height));
    cw = static_cast<int32_t>(std::lround(s.crop.w * f.width));
    ch = static_cast<int32_t>(std::lround(s.crop.h * f.height));
  } else {
    cx = static_cast<int32_t>(s.crop.x);
    cy = static_cast<int32_t>(s.crop.y);
    cw = static_cast<int32_t>(s.crop.w);
    ch = static_cast<int32_t>(s.crop.h);
  }
  if (cw < 1 || ch < 1 || cx < 0 || cy < 0 || int64_t(cx) + cw > f.width || int64_t(cy) + ch > f.height)
    throw ConfigError(fmt::format("{}: crop x={} y={} w={} h={} does not lie inside the {}x{} frame", ctx, cx,
                                  cy, cw, ch, f.width, f.height));

  const Window w = plan_window(s, cw, ch, ctx);
  OutputPlan plan;
  plan.name = s.name;
  ops::Chain::Params& p = plan.params;
  p = {};
  p.resize.x0 = cx;
  p.resize.y0 = cy;
  p.resize.src_w = cw;
  p.resize.src_h = ch;
  p.resize.dst_w = w.resized_w;
  p.resize.dst_h = w.resized_h;
  p.resize.scale_x = static_cast<float>(double(cw) / w.resized_w);
  p.resize.scale_y = static_cast<float>(double(ch) / w.resized_h);
  p.resize.inv_scale_x = static_cast<float>(double(w.resized_w) / cw);
  p.resize.inv_scale_y = static_cast<float>(double(w.resized_h) / ch);
  p.resize.interp = s.interp;
  if (s.interp == ops::Interp::Area) {   // cv::resize: true area only when shrinking both axes
    p.resize.interp = (cw >= w.resized_w && ch >= w.resized_h) ? ops::Interp::AreaBox : ops::Interp::AreaUp;
  }
  p.off_x = w.off_x;
  p.off_y = w.off_y;
  for (int c = 0; c < 3; ++c) p.pad[c] = s.pad_value[c];

  p.channels = s.channels == ChannelOrder::Gray ? ops::Channels::Gray
               : s.channels == ChannelOrder::Bgr ? ops::Channels::Bgr
                                                 : ops::Channels::Rgb;
  const int channels = s.channels == ChannelOrder::Gray ? 1 : 3;
  for (int c = 0; c < 3; ++c) {
    if (!(s.std[c] != 0.f) || !std::isfinite(s.std[c]))
      throw ConfigError(fmt::format("{}: std[{}] = {} (must be finite and non-zero)", ctx, c, s.std[c]));
    p.norm.mul[c] = s.scale / s.std[c];
    p.norm.add[c] = -s.mean[c] / s.std[c];
  }
  p.store = {nullptr, w.out_w, w.out_h, channels, s.layout, s.dtype};
  plan.shape = s.layout == ops::Layout::Chw ? std::vector<int64_t>{channels, w.out_h, w.out_w}
                                            : std::vector<int64_t>{w.out_h, w.out_w, channels};
  plan.bytes_per_frame = size_t(channels) * w.out_w * w.out_h * ops::dtype_size(s.dtype);
  p.frame_stride = static_cast<int64_t>(plan.bytes_per_frame);
  return plan;
}

ops::ColorParams make_color_params(const ColorSpec& spec, const FrameInfo& f) {
  return {ops::make_yuv_to_rgb(spec.matrix.value_or(f.matrix), spec.range.value_or(f.range)),
          spec.chroma_upsample, f.chroma_location};
}

std::vector<OutputPlan> make_output_plans(const PipelineSpec& spec, const FrameInfo& frame) {
  std::vector<OutputPlan> plans;
  plans.reserve(spec.outputs.size());
  for (const auto& o : spec.outputs)
    plans.push_back(make_output_plan(o, frame, fmt::format("pipeline '{}' output '{}'", spec.name, o.name)));
  return plans;
}

std::string describe(const FrameInfo& f) {
  static constexpr const char* kFormats[] = {"nv12", "p010", "yuv420p", "rgb24", "bgr24"};
  return fmt::format("{}x{} {} {}/{}", f.width, f.height, kFormats[static_cast<int>(f.format)],
                     f.matrix == ops::ColorMatrix::Bt709 ? "bt709" : "bt601",
                     f.range == ops::ColorRange::Full ? "full" : "limited");
}

}  // namespace framefuse
