#include "pipeline/exec/upload_kernel.hpp"

#include <algorithm>

namespace framefuse {

namespace {

constexpr int kUploadThreads = 256;
//! Loads each thread keeps in flight before it stores: reads of host memory cross PCIe, so the
//! kernel's speed is the number of reads outstanding.
constexpr int kUnroll = 4;

template <class Word>
__device__ void copy_rows(const UploadJob& job) {
  const int32_t per_row = job.row_bytes / int32_t(sizeof(Word));
  const int32_t total = per_row * job.rows;
  const int32_t stride = int32_t(gridDim.x) * kUploadThreads;
  const auto at = [&](int32_t i, int64_t pitch) {
    const int32_t row = i / per_row;
    return int64_t(row) * pitch + int64_t(i - row * per_row) * int64_t(sizeof(Word));
  };
  for (int32_t base = int32_t(blockIdx.x) * kUploadThreads + int32_t(threadIdx.x); base < total;
       base += kUnroll * stride) {
    Word w[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (base + k * stride < total)
        w[k] = *reinterpret_cast<const Word*>(job.src + at(base + k * stride, job.src_pitch));
#pragma unroll
    for (int k = 0; k < kUnroll; ++k)
      if (base + k * stride < total) *reinterpret_cast<Word*>(job.dst + at(base + k * stride, job.dst_pitch)) = w[k];
  }
}

__global__ void __launch_bounds__(kUploadThreads) upload_planes(const UploadJob* block) {
  __shared__ UploadJob job;
  if (threadIdx.x == 0) job = block[blockIdx.y];
  __syncthreads();
  if (job.rows <= 0) return;
  const bool words = ((reinterpret_cast<uintptr_t>(job.src) | reinterpret_cast<uintptr_t>(job.dst) |
                       uint64_t(job.src_pitch) | uint64_t(job.dst_pitch) | uint64_t(job.row_bytes)) &
                      15) == 0;
  if (words) {
    copy_rows<uint4>(job);
  } else {
    copy_rows<uint8_t>(job);
  }
}

}  // namespace

int upload_blocks_per_job(size_t bytes) {
  const size_t per_block = size_t(kUploadThreads) * kUnroll * 16;
  return int(std::clamp<size_t>((bytes + per_block - 1) / per_block, 1, 1024));
}

cudaError_t launch_upload(const UploadJob* block, int jobs, int blocks_per_job, cudaStream_t stream) {
  if (jobs < 1 || jobs > kMaxUploadJobs || blocks_per_job < 1) return cudaErrorInvalidValue;
  cudaLaunchConfig_t config{};   // the launch's own status, not an earlier call's left-over error
  config.gridDim = dim3(unsigned(blocks_per_job), unsigned(jobs));
  config.blockDim = dim3(kUploadThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, upload_planes, block);
}

}  // namespace framefuse
