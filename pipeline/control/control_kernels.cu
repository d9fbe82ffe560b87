#include "pipeline/control/control_kernels.hpp"

namespace framefuse::control {
namespace {

//! merge()'s add for the warps of a block: an atomic add into shared memory (exact and
//! order-independent on integers).
struct SharedAtomicAdd {
  __device__ void operator()(uint64_t& dst, uint64_t v) const {
    atomicAdd(reinterpret_cast<unsigned long long*>(&dst), static_cast<unsigned long long>(v));
  }
};

__global__ void control_step_kernel(ControlDevice d) { control_step(*d.params, d.slots, *d.block); }

//! One block. Per region, every thread sums its pixels privately (add_sample), each warp folds its
//! lanes' sums by shuffles and merges them into the region's shared accumulator with one atomic
//! per field; histogram bins take one atomic per distinct bin per warp (__match_any_sync). Then
//! thread 0 finalises (finish_stats) and publishes the record.
__global__ void __launch_bounds__(kStatsThreads) stats_kernel(ControlDevice d, const float* __restrict__ current) {
  __shared__ RegionAccum acc[kMaxRegions];
  __shared__ Region regions[kMaxRegions];
  const ControlParams& p = *d.params;
  ControlBlock& block = *d.block;
  const int n = num_regions(p);
  for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(sizeof(acc) / 4); i += kStatsThreads)
    reinterpret_cast<uint32_t*>(acc)[i] = 0;
  if (static_cast<int>(threadIdx.x) < n) regions[threadIdx.x] = stats_region(p, block.state, threadIdx.x);
  // Read before the barrier below; thread 0 advances the counter only after the last one.
  const uint64_t iteration = block.header.iteration;
  const bool has_previous = iteration > 0;
  __syncthreads();

  const float* previous = d.previous;   // rewritten below, after the barrier: not __restrict__
  const unsigned lane = threadIdx.x % 32u;
  for (int r = 0; r < n; ++r) {
    RegionSums mine{};
    const int32_t count = pixel_count(regions[r]);
    // Whole warps iterate together (t - lane is the warp's first pixel), so the shuffles and
    // __match_any_sync below always see all 32 lanes.
    for (int32_t t = static_cast<int32_t>(threadIdx.x); t - static_cast<int32_t>(lane) < count; t += kStatsThreads) {
      const bool in = t < count;
      uint32_t bin = kHistBins;   // no bin
      if (in) {
        int32_t x, y;
        region_pixel(regions[r], t, x, y);
        const int32_t i = y * kThumbW + x;
        const PixelSample s = sample_pixel(current[i], previous[i], has_previous, x, y);
        add_sample(mine, s);
        bin = s.bin;
      }
      const unsigned same = __match_any_sync(0xffffffffu, bin);
      if (in && lane == static_cast<unsigned>(__ffs(same) - 1)) atomicAdd(&acc[r].hist[bin], uint32_t(__popc(same)));
    }
    for_each_field(mine, [](uint64_t& v) {
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    });
    if (lane == 0) merge(acc[r].sums, mine, SharedAtomicAdd{});
  }
  __syncthreads();   // every pixel read and every partial merged

  for (int i = static_cast<int>(threadIdx.x); i < kThumbPixels; i += kStatsThreads) d.previous[i] = current[i];
  if (threadIdx.x == 0) {
    finish_stats(p, regions, acc, d.slots, block);
    ControlRecord record;
    make_record(p, d.slots[write_slot(iteration, block.header.depth)], block.loops, record);
    PublishedRecord& e = d.records[iteration % kRecordRing];
    volatile uint64_t* seq = &e.seq;
    *seq = 2 * iteration + 1;   // being written
    __threadfence_system();
    e.record = record;
    __threadfence_system();
    *seq = 2 * iteration + 2;   // complete
  }
}

}  // namespace

cudaError_t launch_control_step(const ControlDevice& d, cudaStream_t stream) {
  control_step_kernel<<<1, 1, 0, stream>>>(d);
  return cudaGetLastError();
}

cudaError_t launch_control_stats(const ControlDevice& d, const float* thumbnail, cudaStream_t stream) {
  stats_kernel<<<1, kStatsThreads, 0, stream>>>(d, thumbnail);
  return cudaGetLastError();
}

}  // namespace framefuse::control
