#include "pipeline/fused/fused_kernel.hpp"
#include "pipeline/control/control_state.hpp"
#include "pipeline/ops/dispatch.hpp"

namespace framefuse {
namespace {

constexpr int kStageThreads = 512;

//! Block-cooperative copy of a POD from global to shared memory, one 4-byte word per thread.
template <class T>
__device__ __forceinline__ void copy_to_shared(T& dst, const T& src) {
  static_assert(sizeof(T) % 4 == 0 && sizeof(T) / 4 <= kBlockThreads);
  if (threadIdx.x < sizeof(T) / 4)
    reinterpret_cast<uint32_t*>(&dst)[threadIdx.x] = reinterpret_cast<const uint32_t*>(&src)[threadIdx.x];
}

// Blocks per multiprocessor the compiler must allow for, which caps registers per thread. sm_90
// (H200), classify / detect / three outputs at batch 16 (tests/bench/RESULTS.md): uncapped (64-68
// registers, 50 % occupancy) 1.71 / 7.84 / 9.89 us per frame; 5 blocks (48) 1.39 / 6.04 / 8.11;
// 6 blocks (40, small spills) 1.37 / 5.73 / 7.51; 8 blocks (32, heavy spills) slower on classify.
// Other architectures keep the compiler's choice (not measured).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define FF_FUSED_MIN_BLOCKS 6
#else
#define FF_FUSED_MIN_BLOCKS 1
#endif

//! One block = one tile of one output of one frame (first_frame + blockIdx.y). The prologue has two
//! dependent global reads (which output, then its parameters staged in shared memory; with control,
//! thread 0 then applies the control state to them); after that each thread runs Chain::pixel for
//! R pixels of its column, kBlockRows rows apart, so a warp always covers 32 consecutive pixels of
//! a row (coalesced source taps and stores).
template <ops::PixelFormat F, int R>
__global__ void __launch_bounds__(kBlockThreads, FF_FUSED_MIN_BLOCKS)
    fused_kernel(const FusedParams* __restrict__ params, int first_frame) {
  __shared__ ops::Chain::Params out;
  __shared__ FrameSlot slot;
  const int b = first_frame + static_cast<int>(blockIdx.y);
  const int tile = static_cast<int>(blockIdx.x);
  int k = 0;
#pragma unroll
  for (int j = 1; j < kMaxOutputs; ++j) k += tile >= params->tile_begin[j] ? 1 : 0;
  if (b >= params->num_frames) return;   // uniform per block
  copy_to_shared(out, params->outputs[k]);
  copy_to_shared(slot, params->frames[b]);
  const int local = tile - params->tile_begin[k];
  const int tiles_x = params->tiles_x[k];
  __syncthreads();
  if (params->control) {   // uniform per launch
    if (threadIdx.x == 0) control::apply(*params->control, k, out);
    __syncthreads();
  }
  const int x = (local % tiles_x) * kTileW + static_cast<int>(threadIdx.x % kTileW);
  const int y0 = (local / tiles_x) * (kBlockRows * R) + static_cast<int>(threadIdx.x / kTileW);
  if (x >= out.store.width) return;
  const ops::FrameReader<F> src{slot.image, slot.color};
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int y = y0 + i * kBlockRows;
    if (y < out.store.height) ops::Chain::pixel(src, out, b, x, y);
  }
}

//! Copies the parameter block from pinned host memory (device-readable under UVA) to its device
//! copy: one block, 16-byte words, so the read crosses the bus once.
__global__ void __launch_bounds__(kStageThreads) stage_params(const uint4* __restrict__ host,
                                                              uint4* __restrict__ device, int words) {
  for (int i = static_cast<int>(threadIdx.x); i < words; i += kStageThreads) device[i] = host[i];
}

//! Calls fn(kernel) with the instantiation for `format` and `rows_per_thread`.
template <class Fn>
cudaError_t with_kernel(ops::PixelFormat format, int rows_per_thread, Fn&& fn) {
  return ops::dispatch_format(format, [&](auto tag) {
    constexpr ops::PixelFormat F = decltype(tag)::value;
    switch (rows_per_thread) {
      case 1: return fn(fused_kernel<F, 1>);
      case 2: return fn(fused_kernel<F, 2>);
      case 4: return fn(fused_kernel<F, 4>);
      default: return cudaErrorInvalidValue;
    }
  });
}

}  // namespace

cudaError_t launch_fused(ops::PixelFormat format, int rows_per_thread, const FusedParams* params, int32_t tiles,
                         int32_t first_frame, int32_t frames, cudaStream_t stream) {
  if (tiles <= 0 || first_frame < 0 || frames <= 0 || first_frame + frames > kMaxBatch) return cudaErrorInvalidValue;
  return with_kernel(format, rows_per_thread, [&](auto kernel) {
    kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(frames)), kBlockThreads, 0, stream>>>(
        params, first_frame);
    return cudaGetLastError();
  });
}

cudaError_t stage_fused_params(const void* host, void* device, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || bytes % 16 != 0) return cudaErrorInvalidValue;
  stage_params<<<1, kStageThreads, 0, stream>>>(static_cast<const uint4*>(host), static_cast<uint4*>(device),
                                                static_cast<int>(bytes / 16));
  return cudaGetLastError();
}

cudaError_t fused_blocks_per_sm(ops::PixelFormat format, int rows_per_thread, int* blocks) {
  return with_kernel(format, rows_per_thread, [&](auto kernel) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, kBlockThreads, 0);
  });
}

}  // namespace framefuse
