#pragma once
//! Device code of the control statistics inside the fused launch (pipeline/control/
//! fused_control.hpp): included by pipeline/fused/fused_kernel.cu, whose blocks below
//! kStatsBlocks call stats_block().
#include "pipeline/control/fused_control.hpp"
#include "pipeline/control/thumbnail.hpp"

namespace framefuse::control {
namespace detail {

//! merge()'s add for the warps of a block: an atomic add into shared memory (exact and
//! order-independent on integers).
struct SharedAtomicAdd {
  __device__ void operator()(uint64_t& dst, uint64_t v) const {
    atomicAdd(reinterpret_cast<unsigned long long*>(&dst), static_cast<unsigned long long>(v));
  }
};

inline constexpr int kSumFields = sizeof(RegionSums) / sizeof(uint64_t);
static_assert(sizeof(RegionSums) == kSumFields * sizeof(uint64_t), "RegionSums is an array of uint64_t");
//! Words of one region's accumulator that blocks add up: the sums (64-bit), then the bins.
inline constexpr int kItems = kSumFields + kHistBins;

__device__ __forceinline__ unsigned long long* sum_field(RegionAccum& a, int j) {
  return reinterpret_cast<unsigned long long*>(&a.sums) + j;
}

//! The end of iteration i in thread 0 of its last statistics block, the slot's statistics
//! written: end_iteration() on local copies of the parameters and the block (so its reads of the
//! slots never wait behind its own writes) into `record`, the state of iteration i + 1 made
//! visible to its launch, the ticket cleared. Returns i.
__device__ uint64_t finish_iteration(FusedControl& c, ControlRecord& record) {
  const ControlParams p = *c.params;
  ControlBlock b = *c.block;
  const uint64_t iteration = b.header.iteration;
  end_iteration(p, c.slots, b, record);
  *c.block = b;
  c.applied[b.header.iteration & 1u] = b.state;
  c.ticket = 0;
  return iteration;
}

}  // namespace detail

//! Statistics block `block` (< kStatsBlocks, kStatsThreads threads) of the current iteration on
//! `frame`: thread t computes thumbnail pixel block * kStatsThreads + t and replaces the previous
//! thumbnail's pixel with it; per region the block sums its pixels (warp shuffles, __match_any_sync
//! for the histogram, shared atomics) and adds the sums to c.accum with global atomics. The last
//! block to finish reads the totals back (clearing them), finalises the regions in parallel into
//! the slot and ends the iteration (detail::finish_iteration). Call after the launch's dependency
//! on the kernel before it is resolved (every write of the previous iteration visible).
template <ops::PixelFormat F>
__device__ __noinline__ void stats_block(FusedControl& c, const FrameSlot& frame, int block) {
  constexpr int kRows = kStatsThreads / kThumbW;   // thumbnail rows per block
  __shared__ RegionAccum acc[kMaxRegions];
  __shared__ ControlRecord record;
  __shared__ uint64_t iteration;
  __shared__ bool last;
  const int tid = static_cast<int>(threadIdx.x);
  const ControlParams& p = *c.params;
  const ControlBlock& b = *c.block;
  const int n = num_regions(p);
  const int t = block * kStatsThreads + tid;
  const int tx = t % kThumbW, ty = t / kThumbW, row0 = block * kRows;
  // The counter advances only in the last block, after every block arrived.
  const bool has_previous = b.header.iteration > 0;
  const uint32_t q = thumb_pixel<F>(frame.image, luma_scale(F, frame.color), tx, ty);
  const PixelSample s = sample_pixel(q, c.previous[t], has_previous, tx, ty);
  c.previous[t] = static_cast<uint16_t>(q);
  for (int i = tid; i < n * static_cast<int>(sizeof(RegionAccum) / 4); i += kStatsThreads)
    reinterpret_cast<uint32_t*>(acc)[i] = 0;
  __syncthreads();

  const unsigned lane = threadIdx.x % 32u;
  for (int r = 0; r < n; ++r) {
    const Region region = stats_region(p, b.state, r);
    if (region.y1 <= row0 || region.y0 >= row0 + kRows) continue;   // uniform: none of this block's rows
    const bool in = contains(region, tx, ty);
    RegionSums mine{};
    if (in) add_sample(mine, s);
    const uint32_t bin = in ? s.bin : kHistBins;   // kHistBins: no bin
    const unsigned same = __match_any_sync(0xffffffffu, bin);
    if (in && lane == static_cast<unsigned>(__ffs(same) - 1)) atomicAdd(&acc[r].hist[bin], uint32_t(__popc(same)));
    for_each_field(mine, [](uint64_t& v) {
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    });
    if (lane == 0) merge(acc[r].sums, mine, detail::SharedAtomicAdd{});
  }
  __syncthreads();
  for (int i = tid; i < n * detail::kItems; i += kStatsThreads) {
    const int r = i / detail::kItems, j = i % detail::kItems;
    if (j < detail::kSumFields) {
      const unsigned long long v = *detail::sum_field(acc[r], j);
      if (v != 0) atomicAdd(detail::sum_field(c.accum[r], j), v);
    } else if (const uint32_t v = acc[r].hist[j - detail::kSumFields]; v != 0) {
      atomicAdd(&c.accum[r].hist[j - detail::kSumFields], v);
    }
  }
  __threadfence();   // this block's sums and thumbnail pixels before its ticket
  __syncthreads();
  if (tid == 0) last = atomicAdd(&c.ticket, 1u) == kStatsBlocks - 1;
  __syncthreads();
  if (!last) return;

  __threadfence();   // every block's sums are visible
  for (int i = tid; i < n * detail::kItems; i += kStatsThreads) {   // totals (from L2), cleared
    const int r = i / detail::kItems, j = i % detail::kItems;
    if (j < detail::kSumFields) {
      unsigned long long* g = detail::sum_field(c.accum[r], j);
      *detail::sum_field(acc[r], j) = __ldcg(g);
      *g = 0;
    } else {
      uint32_t* g = &c.accum[r].hist[j - detail::kSumFields];
      acc[r].hist[j - detail::kSumFields] = __ldcg(g);
      *g = 0;
    }
  }
  __syncthreads();
  if (tid < n) current_slot(c.slots, b).stats.region[tid] = finalize(acc[tid], stats_region(p, b.state, tid));
  __syncthreads();   // the slot's statistics before thread 0 reads them
  if (tid == 0) iteration = detail::finish_iteration(c, record);
  __syncthreads();
  // The record into the mapped ring, one word per thread (no fences: PublishedRecord).
  PublishedRecord& e = c.records[iteration % kRecordRing];
  constexpr int kWords = sizeof(ControlRecord) / 4;
  static_assert(kWords < kStatsThreads, "one thread per word of the record");
  if (tid < kWords) reinterpret_cast<uint32_t*>(&e.record)[tid] = reinterpret_cast<const uint32_t*>(&record)[tid];
  if (tid == kWords) {
    e.seq = iteration + 1;
    e.check = record_check(iteration + 1, record);
  }
}

}  // namespace framefuse::control
