#pragma once
//! Test data shared by unit, oracle, GPU tests and benches: seeded random frames in every pixel
//! format (with row padding, never zeros), poisoned output buffers, and element comparison.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "pipeline/fused/plan.hpp"

namespace framefuse::test {

//! A frame owned by the test, planes padded by `pad` bytes per row.
struct HostImage {
  ops::PixelFormat format{};
  int32_t width = 0, height = 0;
  std::vector<std::vector<uint8_t>> planes;
  std::vector<int32_t> pitch;
  ops::ImageView view() const;
};

//! Uniform random samples from `seed` (P010 samples keep the low 6 bits zero, as NVDEC writes them).
HostImage random_image(ops::PixelFormat format, int32_t width, int32_t height, uint32_t seed, int32_t pad = 3);

//! FrameInfo describing `img` with the given colour metadata.
FrameInfo frame_info(const HostImage& img, ops::ColorMatrix m = ops::ColorMatrix::Bt601,
                     ops::ColorRange r = ops::ColorRange::Limited);

//! Output buffers for `plans` x `batch` frames, filled with a poison pattern (0xFF bytes: NaN for
//! f32/f16, 255 for u8) so unwritten elements are caught.
std::vector<std::vector<std::byte>> poisoned_outputs(std::span<const OutputPlan> plans, int batch);
std::vector<std::byte*> pointers(std::vector<std::vector<std::byte>>& bufs);

//! Elements of a tensor as double, whatever its dtype.
std::vector<double> to_double(std::span<const std::byte> bytes, ops::DType dtype);

//! IEEE half bits -> float.
float half_to_float(uint16_t h);

struct Diff {
  double max_abs = 0, max_rel = 0;
  size_t count = 0, differing = 0, non_finite = 0;
};
//! Compares element-wise; `rel_floor` keeps the relative error finite near zero.
Diff compare(std::span<const double> a, std::span<const double> b, double rel_floor = 1e-3);

}  // namespace framefuse::test
