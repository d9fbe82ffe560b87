#include "pipeline/ops/color.hpp"

namespace framefuse::ops {

YuvToRgb::Params make_yuv_to_rgb(ColorMatrix matrix, ColorRange range) {
  const double kr = matrix == ColorMatrix::Bt709 ? 0.2126 : 0.299;
  const double kb = matrix == ColorMatrix::Bt709 ? 0.0722 : 0.114;
  const double kg = 1.0 - kr - kb;
  const bool limited = range == ColorRange::Limited;
  const double ky = limited ? 255.0 / 219.0 : 1.0;
  const double kc = limited ? 255.0 / 224.0 : 1.0;
  YuvToRgb::Params p{};
  p.ky = static_cast<float>(ky);
  p.y_off = limited ? 16.f : 0.f;
  p.rv = static_cast<float>(kc * 2.0 * (1.0 - kr));
  p.bu = static_cast<float>(kc * 2.0 * (1.0 - kb));
  p.gu = static_cast<float>(-kc * 2.0 * kb * (1.0 - kb) / kg);
  p.gv = static_cast<float>(-kc * 2.0 * kr * (1.0 - kr) / kg);
  return p;
}

}  // namespace framefuse::ops
