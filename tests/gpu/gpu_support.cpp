#include "tests/gpu/gpu_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace framefuse::test {

DeviceImage upload(const HostImage& img) {
  DeviceImage d;
  d.view = img.view();
  for (int i = 0; i < ops::plane_count(img.format); ++i) {
    const auto s = ops::plane_shape(img.format, img.width, img.height, i);
    const int32_t pitch = (img.pitch[i] + 255) / 256 * 256 + 256;
    d.planes.push_back(cuda::alloc_device(size_t(pitch) * s.rows));
    cuda::check(cudaMemcpy2D(d.planes.back().as(), pitch, img.planes[i].data(), img.pitch[i], s.row_bytes, s.rows,
                             cudaMemcpyHostToDevice),
                "upload test frame");
    d.view.data[i] = d.planes.back().as<const uint8_t>();
    d.view.pitch[i] = pitch;
  }
  // A copy from pageable memory may return before its DMA landed, and the tests' kernels run on
  // non-blocking streams, which do not wait for it.
  cuda::check(cudaDeviceSynchronize(), "upload test frame");
  return d;
}

DeviceBatch upload_batch(std::span<const HostImage> images, const ops::ColorParams& color) {
  DeviceBatch b;
  for (const auto& img : images) {
    b.frames.push_back(upload(img));
    b.slots.push_back({b.frames.back().view, color});
  }
  return b;
}

DeviceOutputs::DeviceOutputs(std::span<const OutputPlan> plans, int batch) {
  for (const auto& p : plans) {
    bufs_.push_back(cuda::alloc_device(p.bytes_per_frame * batch));
    ptrs_.push_back(bufs_.back().as());
  }
}

void DeviceOutputs::poison(uint8_t byte) {
  for (auto& b : bufs_) cuda::check(cudaMemset(b.as(), byte, b.size()), "poison outputs");
  cuda::check(cudaDeviceSynchronize(), "poison outputs");
}

std::vector<std::vector<std::byte>> DeviceOutputs::download() const {
  std::vector<std::vector<std::byte>> out;
  for (const auto& b : bufs_) {
    out.emplace_back(b.size());
    cuda::check(cudaMemcpy(out.back().data(), b.as(), b.size(), cudaMemcpyDeviceToHost), "download outputs");
  }
  return out;
}

namespace {

//! Distance in representable halves between two finite IEEE half values (sign-aware).
int half_ulps(uint16_t a, uint16_t b) {
  const auto ordered = [](uint16_t h) { return (h & 0x8000u) ? -int(h & 0x7fffu) : int(h); };
  return std::abs(ordered(a) - ordered(b));
}

bool half_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }

}  // namespace

::testing::AssertionResult same_bytes(std::span<const std::byte> a, std::span<const std::byte> b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " != " << b.size();
  size_t first = a.size(), count = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      first = std::min(first, i);
      ++count;
    }
  }
  if (count > 0) return ::testing::AssertionFailure() << count << " bytes differ, first at byte " << first;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult matches_cpu(std::span<const std::byte> got, std::span<const std::byte> ref,
                                       ops::DType dtype) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != reference size " << ref.size();
  if (dtype == ops::DType::F16) {
    // Beyond 1 ulp only where the f32 tolerance covers it: near zero (after a mean is subtracted)
    // an f16 ulp is far below 1e-5 of the tensor's largest magnitude.
    const size_t n = got.size() / 2;
    if (n == 0) return ::testing::AssertionFailure() << "f16: an empty tensor";
    std::vector<uint16_t> a(n), b(n);
    std::memcpy(a.data(), got.data(), 2 * n);
    std::memcpy(b.data(), ref.data(), 2 * n);
    float ref_max = 0;
    for (const uint16_t h : b) ref_max = half_finite(h) ? std::max(ref_max, std::abs(half_to_float(h))) : ref_max;
    size_t worst_i = 0, non_finite = 0, beyond = 0;
    int worst = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!half_finite(a[i]) || !half_finite(b[i])) {
        ++non_finite;
        continue;
      }
      const int d = half_ulps(a[i], b[i]);
      if (d > 1 && std::abs(half_to_float(a[i]) - half_to_float(b[i])) > 1e-5f * ref_max) ++beyond;
      if (d > worst) worst = d, worst_i = i;
    }
    if (non_finite > 0 || beyond > 0)
      return ::testing::AssertionFailure() << "f16: " << non_finite << " non-finite of " << n << ", " << beyond
                                           << " beyond 1 ulp and 1e-5 of max |ref| " << ref_max << "; worst " << worst
                                           << " ulp at element " << worst_i << " (" << half_to_float(a[worst_i])
                                           << " vs " << half_to_float(b[worst_i]) << ")";
    return ::testing::AssertionSuccess() << "f16 within " << worst << " ulp (element " << worst_i << ": "
                                         << half_to_float(a[worst_i]) << " vs " << half_to_float(b[worst_i]) << ")";
  }
  const auto a = to_double(got, dtype), b = to_double(ref, dtype);
  double ref_max = 0;
  for (const double v : b) ref_max = std::max(ref_max, std::isfinite(v) ? std::abs(v) : 0.0);
  const Diff d = compare(a, b, std::max(ref_max, 1e-30));
  if (dtype == ops::DType::U8) {
    if (d.max_abs > 1 || d.differing > std::max<size_t>(1, d.count / 1000))
      return ::testing::AssertionFailure() << "u8: max diff " << d.max_abs << " LSB, " << d.differing << " of "
                                           << d.count << " differ";
    return ::testing::AssertionSuccess() << "u8: " << d.differing << " of " << d.count << " differ by 1";
  }
  if (d.non_finite > 0 || d.max_rel > 1e-5)
    return ::testing::AssertionFailure() << "f32: " << d.non_finite << " non-finite of " << d.count
                                         << ", max |diff| " << d.max_abs << " = " << d.max_rel
                                         << " of max |ref| " << ref_max;
  return ::testing::AssertionSuccess() << "f32: max |diff| " << d.max_abs;
}

}  // namespace framefuse::test
