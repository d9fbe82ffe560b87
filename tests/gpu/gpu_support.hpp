#pragma once
//! Device-side helpers of the GPU tests: frames uploaded with their own row pitch, poisonable device
//! output tensors, and the CPU-vs-GPU tolerance check (u8 <= 1 LSB and exact on >= 99.9 %, on all but
//! one element below 1000; f32 <= 1e-5 of the reference's largest magnitude; f16 <= 1 ulp, or that
//! f32 bound where it is more; nothing non-finite).
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/fused/fused_params.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse::test {

//! A frame in device memory. Row pitch differs from the host image's (host pitch rounded up to
//! 256 bytes, plus 256), so pitch handling is exercised.
struct DeviceImage {
  std::vector<cuda::DeviceBuffer> planes;
  ops::ImageView view{};   //!< device pointers
};
DeviceImage upload(const HostImage& img);

//! A batch of frames uploaded with upload(), and the fused kernel's slots for them (one colour).
struct DeviceBatch {
  std::vector<DeviceImage> frames;
  std::vector<FrameSlot> slots;
};
DeviceBatch upload_batch(std::span<const HostImage> images, const ops::ColorParams& color);

//! Device tensors of `plans` for `batch` frames: output k of frame b at ptrs()[k] + b * bytes_per_frame.
class DeviceOutputs {
 public:
  DeviceOutputs(std::span<const OutputPlan> plans, int batch);
  std::span<void* const> ptrs() const { return ptrs_; }
  //! Fills every byte with `byte` (synchronous).
  void poison(uint8_t byte);
  //! Copies every tensor back (synchronous).
  std::vector<std::vector<std::byte>> download() const;

 private:
  std::vector<cuda::DeviceBuffer> bufs_;
  std::vector<void*> ptrs_;
};

//! Byte equality; on failure names the first differing byte and how many differ.
::testing::AssertionResult same_bytes(std::span<const std::byte> a, std::span<const std::byte> b);

//! GPU tensor `got` against CPU tensor `ref` (same dtype, same size) within the tolerances above.
::testing::AssertionResult matches_cpu(std::span<const std::byte> got, std::span<const std::byte> ref,
                                       ops::DType dtype);

}  // namespace framefuse::test
