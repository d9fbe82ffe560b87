#pragma once
//! Device code of the control statistics inside the fused launch (pipeline/control/
//! fused_control.hpp): included by pipeline/fused/fused_kernel.cu, whose blocks below
//! kStatsBlocks call stats_block().
//!
//! The statistics of an iteration are a chain of dependent memory round trips (frame pointer,
//! samples, block sums, the cross-block ticket, totals, slot and record writes) that must end
//! inside the launch, so each step reads what it can before it is needed: a statistics block
//! fetches, before the upload's completion, everything the last block could need besides the
//! totals (parameters, control block, the slots the loops read), and the last block works on
//! shared copies with parallel threads wherever the work splits.
#include "pipeline/control/fused_control.hpp"
#include "pipeline/control/thumbnail.hpp"

namespace framefuse::control {
namespace detail {

inline constexpr unsigned kAllLanes = 0xffffffffu;
inline constexpr int kWarps = kStatsThreads / 32;
//! Words of one region's accumulator that blocks add up: the term sums (64-bit), then the bins.
inline constexpr int kItems = kTerms + kHistBins;

//! Sum of v over the warp (every lane calls it).
__device__ __forceinline__ uint32_t warp_sum(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(kAllLanes, v);
#else
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kAllLanes, v, offset);
  return v;
#endif
}

__device__ __forceinline__ uint64_t warp_sum(uint64_t v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kAllLanes, v, offset);
  return v;
}

//! Copies the first `bytes` (a multiple of 4) of `src` to `dst`, one word per thread and step.
__device__ __forceinline__ void copy_words(void* dst, const void* src, size_t bytes) {
  for (size_t i = threadIdx.x; i < bytes / 4; i += blockDim.x)
    static_cast<uint32_t*>(dst)[i] = static_cast<const uint32_t*>(src)[i];
}

//! A run of words to copy (copy_runs()).
struct Run {
  void* dst;
  const void* src;
  int words;
};

//! Copies `runs` (at most kMaxRunWords words together), each thread loading all its words before
//! storing any, so the whole copy costs one memory round trip.
template <int kMaxRunWords, int kRuns>
__device__ __forceinline__ void copy_runs(const Run (&runs)[kRuns]) {
  constexpr int kPerThread = (kMaxRunWords + kStatsThreads - 1) / kStatsThreads;
  uint32_t value[kPerThread];
  uint32_t* where[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    int w = static_cast<int>(threadIdx.x) + k * kStatsThreads;
    where[k] = nullptr;
#pragma unroll
    for (int r = 0; r < kRuns; ++r) {
      if (!where[k] && w < runs[r].words) {
        where[k] = static_cast<uint32_t*>(runs[r].dst) + w;
        value[k] = static_cast<const uint32_t*>(runs[r].src)[w];
      }
      w -= where[k] ? 0 : runs[r].words;
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k)
    if (where[k]) *where[k] = value[k];
}

//! Bytes of a Slot up to and including region n - 1's statistics: all that an iteration writes.
__device__ __forceinline__ size_t slot_bytes(int n) {
  return offsetof(Slot, stats) + offsetof(FrameStats, region) + sizeof(RegionStats) * size_t(n);
}

//! What a statistics block fetches for the last block before the upload's completion (all of it
//! written by earlier launches), and the last block's working copies.
struct Staged {
  ControlParams params;
  ControlBlock block;
  Slot current;            //!< slot i, filled by the last block
  Slot observed;           //!< slot i + 1 - d when that is not slot i (d > 1)
  RegionStats before;      //!< region 0 of slot i - d (health's scene distance), when it exists
  RegionSums sums[kMaxRegions];
  ControlRecord record;
};

//! The end of iteration i = `iteration` in its last statistics block (every thread; `regions` the
//! iteration's n regions, `st` staged by stats_block()): the totals are read back from c.accum (and
//! cleared; the histograms straight into slot i's shared copy), the statistics' fields finalised by
//! one thread each, close_iteration() run by one thread, the scene distance's terms summed by a
//! warp whose first thread runs control_step() for iteration i + 1; then slot i, the block, the
//! applied state and regions of iteration i + 1 and the record go out one word per thread (the
//! record without fences: PublishedRecord).
__device__ __noinline__ void finish_iteration(FusedControl& c, Staged& st, uint64_t iteration, int n,
                                              const Region* regions) {
  __shared__ uint64_t terms[kMaxRegions][kTerms];
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const ControlParams& p = st.params;
  const RingHeader next{iteration + 1, p.delay, p.depth};
  const bool observed_is_current = observed_slot(c.slots, next) == &c.slots[write_slot(iteration, p.depth)];
  const bool has_observed = has_input(next.iteration, p.delay), has_before = has_input(next.iteration, p.delay + 1);

  for (int i = tid; i < n * kItems; i += threads) {   // totals (from L2), cleared
    const int r = i / kItems, j = i % kItems;
    if (j < kTerms) {
      uint64_t* g = &c.accum[r].terms[j];
      terms[r][j] = __ldcg(reinterpret_cast<const unsigned long long*>(g));
      *g = 0;
    } else {
      uint32_t* g = &c.accum[r].hist[j - kTerms];
      st.current.stats.region[r].hist[j - kTerms] = __ldcg(g);
      *g = 0;
    }
  }
  __syncthreads();
  if (tid < n) {
    st.sums[tid] = RegionSums{};
    add_terms(st.sums[tid], terms[tid]);
    st.current.stats.region[tid].pixels = static_cast<uint32_t>(st.sums[tid].pixels);
  }
  __syncthreads();
  if (tid < n * kStatFields) {
    const int r = tid / kStatFields, f = tid % kStatFields;
    set_field(st.current.stats.region[r], f, finalize_field(st.sums[r], regions[r], f));
  }
  __syncthreads();
  if (tid == 0) close_iteration(p, st.current, st.block, st.record);
  __syncthreads();
  if (tid < 32) {   // one warp: the scene distance, then the loops
    const Slot* const o = !has_observed ? nullptr : observed_is_current ? &st.current : &st.observed;
    uint64_t d = 0;
    if (o && has_before)
      for (int bin = tid; bin < kHistBins; bin += 32) d += hist_term(o->stats.region[0], st.before, bin);
    d = warp_sum(d);
    if (tid == 0)
      control_step(p, o, o && has_before ? hist_distance_of(d, o->stats.region[0], st.before) : 0.f, st.block);
  }
  __syncthreads();
  copy_words(&c.slots[write_slot(iteration, p.depth)], &st.current, slot_bytes(n));
  copy_words(c.block, &st.block, sizeof st.block);
  copy_words(&c.applied[next.iteration & 1u], &st.block.state, sizeof st.block.state);
  if (tid < n) c.regions[next.iteration & 1u][tid] = stats_region(p, st.block.state, tid);
  PublishedRecord& e = c.records[iteration % kRecordRing];
  constexpr int kWords = sizeof(ControlRecord) / 4;
  static_assert(kWords < kStatsThreads, "one thread per word of the record");
  if (tid < kWords) reinterpret_cast<uint32_t*>(&e.record)[tid] = reinterpret_cast<const uint32_t*>(&st.record)[tid];
  if (tid == kWords) {
    e.seq = iteration + 1;
    e.check = record_check(iteration + 1, st.record);
  }
  if (tid == 0) c.ticket = 0;
}

}  // namespace detail

//! Statistics block `block` (< kStatsBlocks, kStatsThreads threads) of launch `frame` of the
//! current batch: thread t computes thumbnail pixel block * kStatsThreads + t and replaces the
//! previous thumbnail's pixel with it; per region each warp sums each term of its pixels
//! (sample_term, one warp reduction each) and counts the histogram (lanes of one bin grouped by
//! __match_any_sync, shared atomics); the block adds its sums to c.accum with global atomics, and
//! the last block to finish ends the iteration (detail::finish_iteration). Before `wait()` (the
//! upload's completion) it reads only what earlier launches and setup wrote, which no block of
//! this launch rewrites before every block took its ticket: the iteration counter, sample
//! positions, the previous pixel, the regions, and the last block's detail::Staged.
template <ops::PixelFormat F, class Wait>
__device__ __noinline__ void stats_block(FusedControl& c, const FusedParams* params, int frame, int block,
                                         Wait wait) {
  __shared__ detail::Staged st;
  __shared__ uint32_t warp_terms[detail::kWarps][kMaxRegions][kTerms];
  __shared__ uint32_t hist[kMaxRegions][kHistBins];
  __shared__ Region regions[kMaxRegions];
  __shared__ bool last;
  const int tid = static_cast<int>(threadIdx.x);
  const ControlParams& gp = *c.params;
  const int n = num_regions(gp);
  const uint64_t iteration = c.block->header.iteration;
  const int t = block * kStatsThreads + tid;
  const int tx = t % kThumbW, ty = t / kThumbW;
  int xs[kThumbSamples], ys[kThumbSamples];
  cell_samples(tx, kThumbW, gp.frame_w, xs);
  cell_samples(ty, kThumbH, gp.frame_h, ys);
  const uint32_t previous = c.previous[t];
  for (int i = tid; i < n * kHistBins; i += kStatsThreads) hist[i / kHistBins][i % kHistBins] = 0;
  if (tid < n) regions[tid] = c.regions[iteration & 1u][tid];
  {
    const RingHeader next{iteration + 1, gp.delay, gp.depth};
    const Slot* const observed = observed_slot(c.slots, next);
    const Slot* const before = before_slot(c.slots, next);
    const bool copy_observed = observed && observed != &c.slots[write_slot(iteration, gp.depth)];
    const detail::Run runs[] = {
        {&st.params, &gp, int(sizeof st.params / 4)},
        {&st.block, c.block, int(sizeof st.block / 4)},
        {&st.observed, observed, copy_observed ? int(detail::slot_bytes(n) / 4) : 0},
        {&st.before, before ? &before->stats.region[0] : nullptr, before ? int(sizeof st.before / 4) : 0}};
    detail::copy_runs<(sizeof(ControlParams) + sizeof(ControlBlock) + sizeof(Slot) + sizeof(RegionStats)) / 4>(runs);
  }

  wait();
  if (frame >= params->num_frames) return;   // uniform: no frame, no iteration
  const FrameSlot& slot = params->frames[frame];
  const uint32_t q = thumb_q(thumb_sum<F>(slot.image, xs, ys), luma_scale(F, slot.color));
  c.previous[t] = static_cast<uint16_t>(q);
  const PixelSample s = sample_pixel(q, previous, iteration > 0, tx, ty);
  __syncthreads();

  const int warp = tid / 32, lane = tid % 32;
  const unsigned same_bin = __match_any_sync(detail::kAllLanes, s.bin);
  for (int r = 0; r < n; ++r) {
    const Region region = regions[r];
    const bool in = contains(region, tx, ty);
    const unsigned in_lanes = __ballot_sync(detail::kAllLanes, in);
    const unsigned group = same_bin & in_lanes;
    if (in && lane == __ffs(group) - 1) atomicAdd(&hist[r][s.bin], uint32_t(__popc(group)));
#pragma unroll
    for (int k = 0; k < kTerms; ++k) {
      const uint32_t v = in_lanes ? detail::warp_sum(sample_term(s, k, in)) : 0;   // in_lanes: uniform per warp
      if (lane == 0) warp_terms[warp][r][k] = v;
    }
  }
  __syncthreads();
  for (int i = tid; i < n * detail::kItems; i += kStatsThreads) {   // reductions: no value returned
    const int r = i / detail::kItems, j = i % detail::kItems;
    if (j < kTerms) {
      uint64_t v = 0;
      for (int w = 0; w < detail::kWarps; ++w) v += warp_terms[w][r][j];
      if (v != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&c.accum[r].terms[j]), static_cast<unsigned long long>(v));
    } else if (const uint32_t v = hist[r][j - kTerms]; v != 0) {
      atomicAdd(&c.accum[r].hist[j - kTerms], v);
    }
  }
  __threadfence();   // this block's sums and thumbnail pixels before its ticket
  __syncthreads();
  if (tid == 0) last = atomicAdd(&c.ticket, 1u) == kStatsBlocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();   // every block's sums are visible
  detail::finish_iteration(c, st, iteration, n, regions);
}

}  // namespace framefuse::control
