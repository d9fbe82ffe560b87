#include "pipeline/fused/fused_kernel.hpp"
#include "pipeline/ops/dispatch.hpp"

namespace framefuse {
namespace {

template <class T>
__device__ __forceinline__ void copy_to_shared(T& dst, const T& src) {
  static_assert(sizeof(T) % 4 == 0);
  auto* d = reinterpret_cast<uint32_t*>(&dst);
  auto* s = reinterpret_cast<const uint32_t*>(&src);
  for (unsigned i = threadIdx.x; i < sizeof(T) / 4; i += blockDim.x) d[i] = s[i];
}

template <ops::PixelFormat F>
__global__ void __launch_bounds__(kTileW * kTileH) fused_kernel(const FusedParams* __restrict__ params) {
  __shared__ ops::Chain::Params out;
  __shared__ FrameSlot slot;
  const int b = static_cast<int>(blockIdx.y);
  if (b >= params->num_frames) return;   // uniform per block
  const int tile = static_cast<int>(blockIdx.x);
  int k = 0;
  while (k + 1 < params->num_outputs && tile >= params->tile_begin[k + 1]) ++k;
  copy_to_shared(out, params->outputs[k]);
  copy_to_shared(slot, params->frames[b]);
  __syncthreads();
  const int local = tile - params->tile_begin[k];
  const int tx = local % params->tiles_x[k], ty = local / params->tiles_x[k];
  const int x = tx * kTileW + static_cast<int>(threadIdx.x % kTileW);
  const int y = ty * kTileH + static_cast<int>(threadIdx.x / kTileW);
  if (x >= out.store.width || y >= out.store.height) return;
  const ops::FrameReader<F> src{slot.image, slot.color};
  ops::Chain::pixel(src, out, b, x, y);
}

}  // namespace

cudaError_t launch_fused(ops::PixelFormat format, const FusedParams* params, int32_t tiles, int32_t max_batch,
                         cudaStream_t stream) {
  if (tiles <= 0 || max_batch <= 0) return cudaErrorInvalidValue;
  return ops::dispatch_format(format, [&](auto tag) {
    fused_kernel<decltype(tag)::value><<<dim3(tiles, max_batch), kTileW * kTileH, 0, stream>>>(params);
    return cudaGetLastError();
  });
}

}  // namespace framefuse
