#include "pipeline/fused/plan.hpp"

#include <cmath>
#include <iterator>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"

namespace framefuse {
namespace {

struct Window {
  int32_t resized_w, resized_h, off_x, off_y, out_w, out_h;
};

//! Python's round(): ties to even (torchvision and ultralytics compute sizes and offsets with it).
int32_t round_half_even(double v) { return static_cast<int32_t>(std::nearbyint(v)); }

//! torchvision CenterCrop offset on one axis: round((size - crop) / 2) when the crop fits, else the
//! image is padded by (crop - size) // 2 before it (negative offset: the pad shows there).
int32_t center_crop_offset(int32_t size, int32_t crop) {
  return crop <= size ? round_half_even((size - crop) / 2.0) : -((crop - size) / 2);
}

//! Resized size, window offset and output size for the aspect policy and optional centre crop.
Window plan_window(const OutputSpec& s, int32_t cw, int32_t ch, const std::string& ctx) {
  const ResizeSpec& r = s.resize;
  if (r.shorter_side < 0)
    throw ConfigError(fmt::format("{}: resize shorter_side {} must be positive", ctx, r.shorter_side));
  const bool sized = r.width != 0 || r.height != 0;
  if (sized && (r.width <= 0 || r.height <= 0))
    throw ConfigError(fmt::format("{}: resize {}x{} needs a positive width and height", ctx, r.width, r.height));
  if (sized && r.shorter_side > 0)
    throw ConfigError(fmt::format("{}: resize gives both {}x{} and shorter_side {}; give one", ctx, r.width,
                                  r.height, r.shorter_side));
  if (!sized && s.aspect != AspectMode::Stretch)
    throw ConfigError(fmt::format("{}: aspect {} needs a resize width and height", ctx,
                                  s.aspect == AspectMode::Letterbox ? "letterbox" : "fill"));
  Window w{};
  if (r.shorter_side > 0) {
    // torchvision Resize(int): the longer side is int(side * long / short), truncated.
    const int32_t side = r.shorter_side;
    if (cw <= ch) {
      w.resized_w = side;
      w.resized_h = static_cast<int32_t>(int64_t(side) * ch / cw);
    } else {
      w.resized_h = side;
      w.resized_w = static_cast<int32_t>(int64_t(side) * cw / ch);
    }
    w.out_w = w.resized_w;
    w.out_h = w.resized_h;
  } else if (sized) {
    w.out_w = r.width;
    w.out_h = r.height;
    const double sx = double(w.out_w) / cw, sy = double(w.out_h) / ch;
    switch (s.aspect) {
      case AspectMode::Stretch:
        w.resized_w = w.out_w;
        w.resized_h = w.out_h;
        break;
      case AspectMode::Letterbox:
      case AspectMode::CenterCropFill: {
        const double k = s.aspect == AspectMode::Letterbox ? std::min(sx, sy) : std::max(sx, sy);
        w.resized_w = std::max(1, round_half_even(cw * k));
        w.resized_h = std::max(1, round_half_even(ch * k));
        if (s.aspect == AspectMode::Letterbox) {
          // ultralytics letterbox: the odd pad pixel goes after (bottom/right): top = (out - resized) // 2.
          w.off_x = -((w.out_w - w.resized_w) / 2);
          w.off_y = -((w.out_h - w.resized_h) / 2);
        } else {   // fill = resize to cover, then torchvision CenterCrop
          w.off_x = center_crop_offset(w.resized_w, w.out_w);
          w.off_y = center_crop_offset(w.resized_h, w.out_h);
        }
        break;
      }
    }
  } else {
    w.resized_w = w.out_w = cw;   // no resize: the crop as it is
    w.resized_h = w.out_h = ch;
  }
  if (s.center_crop) {
    const auto [ccw, cch] = *s.center_crop;
    if (ccw <= 0 || cch <= 0)
      throw ConfigError(fmt::format("{}: center_crop must be positive, got {}x{}", ctx, ccw, cch));
    w.off_x += center_crop_offset(w.out_w, ccw);
    w.off_y += center_crop_offset(w.out_h, cch);
    w.out_w = ccw;
    w.out_h = cch;
  }
  if (w.out_w <= 0 || w.out_h <= 0 || w.resized_w <= 0 || w.resized_h <= 0)
    throw ConfigError(fmt::format("{}: output size {}x{} is empty", ctx, w.out_w, w.out_h));
  return w;
}

struct PixelRect {
  int32_t x, y, w, h;
};

//! The crop in whole pixels. Fractional crops round their edges (not their sizes), so a crop
//! inside [0, 1] always lies inside the frame, odd sizes included.
PixelRect crop_pixels(const RectSpec& c, const FrameInfo& f, const std::string& ctx) {
  const auto bad = [&](const char* why) {
    return ConfigError(fmt::format("{}: crop x={} y={} w={} h={} {}", ctx, c.x, c.y, c.w, c.h, why));
  };
  for (const double v : {c.x, c.y, c.w, c.h})
    if (!std::isfinite(v)) throw bad("is not finite");
  if (c.fractional) {
    for (const double v : {c.x, c.y, c.w, c.h})
      if (v < 0 || v > 1) throw bad("is fractional, so every value must lie in [0, 1]");
    const auto edge = [](double v, int32_t size) { return static_cast<int32_t>(std::lround(v * size)); };
    const int32_t x0 = edge(c.x, f.width), y0 = edge(c.y, f.height);
    return {x0, y0, edge(c.x + c.w, f.width) - x0, edge(c.y + c.h, f.height) - y0};
  }
  for (const double v : {c.x, c.y, c.w, c.h})
    if (v != std::floor(v) || std::abs(v) > 1 << 30) throw bad("is in pixels, so every value must be a whole number");
  return {static_cast<int32_t>(c.x), static_cast<int32_t>(c.y), static_cast<int32_t>(c.w), static_cast<int32_t>(c.h)};
}

}  // namespace

OutputPlan make_output_plan(const OutputSpec& s, const FrameInfo& f, const std::string& ctx) {
  const auto [cx, cy, cw, ch] = crop_pixels(s.crop, f, ctx);
  if (cw < 1 || ch < 1) throw ConfigError(fmt::format("{}: crop x={} y={} w={} h={} is empty", ctx, cx, cy, cw, ch));
  if (cx < 0 || cy < 0 || int64_t(cx) + cw > f.width || int64_t(cy) + ch > f.height)
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
  p.resize.inv_scale_x = double(w.resized_w) / cw;   // cv::resize: inv_scale = dst / src, scale = 1 / inv
  p.resize.inv_scale_y = double(w.resized_h) / ch;
  p.resize.scale_x = 1.0 / p.resize.inv_scale_x;
  p.resize.scale_y = 1.0 / p.resize.inv_scale_y;
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
  if (!std::isfinite(s.scale)) throw ConfigError(fmt::format("{}: scale = {} (must be finite)", ctx, s.scale));
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(s.mean[c]))
      throw ConfigError(fmt::format("{}: mean[{}] = {} (must be finite)", ctx, c, s.mean[c]));
    if (!std::isfinite(s.pad_value[c]))
      throw ConfigError(fmt::format("{}: pad_value[{}] = {} (must be finite)", ctx, c, s.pad_value[c]));
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
  static constexpr const char* kFormats[] = {"nv12", "p010", "yuv420p", "rgb24", "bgr24", "yuv420p10", "yuv422p"};
  static_assert(std::size(kFormats) == ops::kPixelFormats, "a name for every ops::PixelFormat");
  return fmt::format("{}x{} {} {}/{}", f.width, f.height, kFormats[static_cast<int>(f.format)],
                     f.matrix == ops::ColorMatrix::Bt709 ? "bt709" : "bt601",
                     f.range == ops::ColorRange::Full ? "full" : "limited");
}

}  // namespace framefuse
