#pragma once
//! Device code of the control statistics inside the fused launch (pipeline/control/
//! fused_control.hpp): included by pipeline/fused/fused_kernel.cu, whose blocks below
//! control_blocks() call control_block(), and whose flush kernel calls detail::finish_late().
//!
//! The end of an iteration is a chain of dependent memory round trips (totals, slot, loops, record,
//! write-back). With d = 1 it must end inside the iteration's own launch, after its statistics: each
//! statistics block fetches, before the upload's completion, everything the last block could need
//! besides the totals. With d >= 2 the next launch's finisher block runs it beside that launch's
//! tiles, waiting for nothing of the launch. Either way the block works on shared copies with
//! parallel threads wherever the work splits.
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

//! Copies `runs` through L2, kPerThread words per thread and round: each thread loads all its words
//! of a round before storing any, so up to kPerThread * kStatsThreads words cost one memory round
//! trip.
template <int kRuns, int kPerThread = 4>
__device__ __forceinline__ void copy_runs(const Run (&runs)[kRuns]) {
  int total = 0;
#pragma unroll
  for (int r = 0; r < kRuns; ++r) total += runs[r].words;
  for (int base = 0; base < total; base += kPerThread * kStatsThreads) {
    uint32_t value[kPerThread];
    uint32_t* where[kPerThread];
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      int w = base + static_cast<int>(threadIdx.x) + k * kStatsThreads;
      where[k] = nullptr;
#pragma unroll
      for (int r = 0; r < kRuns; ++r) {
        if (!where[k] && w < runs[r].words) {
          where[k] = static_cast<uint32_t*>(runs[r].dst) + w;
          value[k] = __ldcg(static_cast<const uint32_t*>(runs[r].src) + w);
        }
        w -= where[k] ? 0 : runs[r].words;
      }
    }
#pragma unroll
    for (int k = 0; k < kPerThread; ++k)
      if (where[k]) *where[k] = value[k];
  }
}

template <class T>
constexpr int words_of() {
  static_assert(sizeof(T) % 4 == 0, "copied as words");
  return static_cast<int>(sizeof(T) / 4);
}

//! Bytes of a Slot up to and including region n - 1's statistics: all that an iteration writes.
__device__ __forceinline__ size_t slot_bytes(int n) {
  return offsetof(Slot, stats) + offsetof(FrameStats, region) + sizeof(RegionStats) * size_t(n);
}
__device__ __forceinline__ int slot_words(int n) { return static_cast<int>(slot_bytes(n) / 4); }

//! The working copies of the block that ends an iteration (shared memory, staged()).
struct Staged {
  ControlParams params;
  ControlBlock block;
  TermAccum accum[kMaxRegions];   //!< the closed iteration's totals
  Region regions[kMaxRegions];    //!< its regions
  ControlState used;              //!< the state its outputs got (closes_late())
  Health::State reported;         //!< the health its record carries (closes_late())
  Slot current;                   //!< its slot, filled here
  Slot observed;                  //!< the slot the loops read when it is not `current`
  RegionStats before;             //!< region 0 of the slot observed before that one, when it exists
  RegionSums sums[kMaxRegions];
  ControlRecord record;
};

//! The one Staged of a block (statistics blocks and the finisher share it).
__device__ __forceinline__ Staged& staged() {
  __shared__ Staged st;
  return st;
}

//! Sets `words` words at `dst` to zero, one per thread and step.
__device__ __forceinline__ void clear_words(void* dst, int words) {
  for (int i = static_cast<int>(threadIdx.x); i < words; i += static_cast<int>(blockDim.x))
    static_cast<uint32_t*>(dst)[i] = 0;
}

//! Every thread: st.current's statistics of the n regions from st.accum and st.regions, one field
//! of one region per thread (finalize_field).
__device__ __forceinline__ void finalize_staged(Staged& st, int n) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < n) {
    st.sums[tid] = RegionSums{};
    add_terms(st.sums[tid], st.accum[tid].terms);
    st.current.stats.region[tid].pixels = static_cast<uint32_t>(st.sums[tid].pixels);
  }
  for (int i = tid; i < n * kHistBins; i += kStatsThreads)
    st.current.stats.region[i / kHistBins].hist[i % kHistBins] = st.accum[i / kHistBins].hist[i % kHistBins];
  __syncthreads();
  if (tid < n * kStatFields) {
    const int r = tid / kStatFields, f = tid % kStatFields;
    set_field(st.current.stats.region[r], f, finalize_field(st.sums[r], st.regions[r], f));
  }
  __syncthreads();
}

//! Every thread: close_slot() of the iteration st.block's counter names, with `used` (one word
//! per thread, the header in thread 0), then its record with `health` (one thread per
//! make_record_part()).
__device__ __forceinline__ void close_staged(Staged& st, const ControlState& used, const Health::State& health) {
  const int tid = static_cast<int>(threadIdx.x);
  copy_words(&st.current.applied, &used, sizeof used);
  if (tid == 0) close_slot_header(st.params, st.current, st.block.header);
  __syncthreads();
  if (tid < kRecordParts) make_record_part(st.params, st.current, health, tid, st.record);
  __syncthreads();
}

//! Every thread: the loops of iteration `step_for` on st.block, control_step()'s parts at once:
//! warp 0 sums the scene distance's terms and its first lane runs health, warp 1 runs auto_gain
//! with one lane per output, warp 2's first lane roi_follow. The slot they observe is st.current
//! when it holds that iteration (`current` its iteration, `has_current` whether it holds one),
//! else st.observed. Each part steps a copy in registers of the words of the block it owns
//! (control_step.hpp), so its shared-memory reads need not wait for its writes, then stores them.
__device__ __forceinline__ void run_loops(Staged& st, uint64_t step_for, bool has_current, uint64_t current) {
  static_assert(kStatsThreads >= 96 && kMaxOutputs <= 32, "three warps, one lane per output");
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const ControlParams& p = st.params;
  const bool has_observed = has_input(step_for, p.delay), has_before = has_input(step_for, p.delay + 1);
  const Slot* const o = !has_observed                                            ? nullptr
                        : has_current && step_for - uint64_t(p.delay) == current ? &st.current
                                                                                 : &st.observed;
  if (o && warp == 0) {
    uint64_t d = 0;
    if (has_before)
      for (int bin = lane; bin < kHistBins; bin += 32) d += hist_term(o->stats.region[0], st.before, bin);
    d = warp_sum(d);
    if (lane == 0) {
      ControlBlock b;
      b.loops.health = st.block.loops.health;
      step_health(p, *o, has_before ? hist_distance_of(d, o->stats.region[0], st.before) : 0.f, b);
      st.block.loops.health = b.loops.health;
    }
  } else if (o && warp == 1 && lane < p.num_outputs) {
    ControlBlock b;
    b.state.out[lane].gain = st.block.state.out[lane].gain;
    b.loops.integral[lane] = st.block.loops.integral[lane];
    step_auto_gain(p, *o, lane, b);
    st.block.state.out[lane].gain = b.state.out[lane].gain;
    st.block.loops.integral[lane] = b.loops.integral[lane];
  } else if (o && warp == 2 && lane == 0 && (p.loops & kLoopRoiFollow)) {
    const int k = p.roi_follow.output;   // its gain is warp 1's
    ControlBlock b;
    b.loops.roi = st.block.loops.roi;
    b.state.out[k].dx = st.block.state.out[k].dx;
    b.state.out[k].dy = st.block.state.out[k].dy;
    step_roi_follow(p, *o, b);
    st.block.loops.roi = b.loops.roi;
    st.block.state.out[k].dx = b.state.out[k].dx;
    st.block.state.out[k].dy = b.state.out[k].dy;
  }
  __syncthreads();
}

//! Every thread: the closed iteration's slot and record (when `closed`), the block, and (when
//! `stepped`) the applied state and regions of iteration `step_for`, one word per thread; the
//! record without fences (PublishedRecord).
__device__ __forceinline__ void write_back(FusedControl& c, const Staged& st, int n, bool closed, uint64_t iteration,
                                           bool stepped, uint64_t step_for) {
  const int tid = static_cast<int>(threadIdx.x);
  const ControlParams& p = st.params;
  if (closed) copy_words(&c.slots[write_slot(iteration, p.depth)], &st.current, slot_bytes(n));
  copy_words(c.block, &st.block, sizeof st.block);
  if (stepped) {
    copy_words(&c.applied[step_for & 1u], &st.block.state, sizeof st.block.state);
    if (tid < n) c.regions[step_for & 1u][tid] = stats_region(p, st.block.state, tid);
  }
  if (!closed) return;
  PublishedRecord& e = c.records[iteration % kRecordRing];
  constexpr int kWords = words_of<ControlRecord>();
  static_assert(kWords < kStatsThreads, "one thread per word of the record");
  if (tid < kWords) reinterpret_cast<uint32_t*>(&e.record)[tid] = reinterpret_cast<const uint32_t*>(&st.record)[tid];
  if (tid == kWords) {
    e.seq = iteration + 1;
    e.check = record_check(iteration + 1, st.record);
  }
}

//! d = 1: the end of iteration i = `iteration` in its last statistics block (every thread; `regions`
//! the iteration's, `st` staged by stats_block(): params, block, before): the totals are read back
//! from its accumulators (and cleared), its statistics finalised, the iteration closed (as
//! close_iteration()), then the loops of iteration i + 1 on its own slot, and everything written
//! back.
__device__ __noinline__ void finish_iteration(FusedControl& c, Staged& st, uint64_t iteration, int n,
                                              const Region* regions) {
  const int tid = static_cast<int>(threadIdx.x);
  TermAccum* const accum = iteration_accum(c, iteration);
  const Run runs[] = {{st.accum, accum, n * words_of<TermAccum>()}};
  copy_runs(runs);
  if (tid < n) st.regions[tid] = regions[tid];
  __syncthreads();
  clear_words(accum, n * words_of<TermAccum>());
  finalize_staged(st, n);
  close_staged(st, st.block.state, st.block.loops.health);
  run_loops(st, iteration + 1, true, iteration);
  write_back(c, st, n, true, iteration, true, iteration + 1);
  if (tid == 0) c.ticket = 0;
}

//! d >= 2 (closes_late()): the finisher block of launch i = c.finisher_next (every thread, before and
//! without any wait for the upload). Iteration i - 1, when still open (the block's counter), is
//! closed from the totals launch i - 1 left: its slot with the state its outputs got, its record with
//! the health `reported` kept for it. With `step`, the health after the loops of iteration i is kept
//! for iteration i's record, the loops of iteration i + 1 run on slot i + 1 - d and the applied
//! state and regions of i + 1 go out; finisher_next becomes i + 1. Without `step` (flush_control):
//! only the close.
__device__ __noinline__ void finish_late(FusedControl& c, bool step) {
  Staged& st = staged();
  const int tid = static_cast<int>(threadIdx.x);
  const uint64_t i = c.finisher_next, closing = i - 1;
  const int n = c.regions_n;
  const RingHeader next{i + 1, c.delay, c.depth};
  const Slot* const observed = observed_slot(c.slots, next);
  const Slot* const before = before_slot(c.slots, next);
  TermAccum* const accum = iteration_accum(c, closing);
  const bool any = i > 0;
  // With d = 2 the loops observe the iteration this block closes (i + 1 - d = i - 1): its slot is
  // st.current, unless a flush closed it already (read below then).
  const bool observes_closing = any && c.delay == 2;
  const Run runs[] = {
      {&st.params, c.params, words_of<ControlParams>()},
      {&st.block, c.block, words_of<ControlBlock>()},
      {&st.reported, &c.reported, words_of<Health::State>()},
      {st.accum, accum, any ? n * words_of<TermAccum>() : 0},
      {st.regions, c.regions[closing & 1u], any ? n * words_of<Region>() : 0},
      {&st.used, &c.applied[closing & 1u], any ? words_of<ControlState>() : 0},
      {&st.observed, observed, step && observed && !observes_closing ? slot_words(n) : 0},
      {&st.before, before ? &before->stats.region[0] : nullptr, step && before ? words_of<RegionStats>() : 0}};
  copy_runs(runs);
  __syncthreads();
  const bool open = any && st.block.header.iteration == closing;
  if (open) {
    clear_words(accum, n * words_of<TermAccum>());
    finalize_staged(st, n);
    close_staged(st, st.used, st.reported);
  }
  if (step) {
    if (observes_closing && !open) {
      const Run flushed[] = {{&st.observed, observed, slot_words(n)}};
      copy_runs(flushed);
    }
    copy_words(&c.reported, &st.block.loops.health, sizeof(Health::State));   // before the loops of i + 1
    __syncthreads();
    run_loops(st, i + 1, open, closing);
  }
  write_back(c, st, n, open, closing, step, i + 1);
  if (step && tid == 0) c.finisher_next = i + 1;
}

}  // namespace detail

//! Statistics block `block` (< kStatsBlocks, kStatsThreads threads) of launch `frame` of the
//! current batch: thread t computes thumbnail pixel block * kStatsThreads + t and replaces the
//! previous thumbnail's pixel with it; per region each warp sums each term of its pixels
//! (sample_term, one warp reduction each) and counts the histogram (lanes of one bin grouped by
//! __match_any_sync, shared atomics); the block adds its sums to the iteration's accumulators with
//! global atomics. With d = 1 the last block to finish ends the iteration (detail::
//! finish_iteration); `late` (closes_late()) leaves that to the next launch's finisher. Before
//! `wait()` (the upload's completion) it reads only what earlier launches and setup wrote, which no
//! block of this launch rewrites before it is read: sample positions, the previous pixel, both
//! parities' regions, and with d = 1 the iteration counter (only the last block rewrites it, after
//! every block took its ticket) and the last block's detail::Staged; `late` blocks learn their
//! iteration from the upload.
template <ops::PixelFormat F, class Wait>
__device__ __noinline__ void stats_block(FusedControl& c, const FusedParams* params, int frame, int block, bool late,
                                         Wait wait) {
  __shared__ uint32_t warp_terms[detail::kWarps][kMaxRegions][kTerms];
  __shared__ uint32_t hist[kMaxRegions][kHistBins];
  __shared__ Region regions[2][kMaxRegions];
  __shared__ bool last;
  detail::Staged& st = detail::staged();
  const int tid = static_cast<int>(threadIdx.x);
  const ControlParams& gp = *c.params;
  const int n = num_regions(gp);
  uint64_t iteration = late ? 0 : c.block->header.iteration;
  const int t = block * kStatsThreads + tid;
  const int tx = t % kThumbW, ty = t / kThumbW;
  int xs[kThumbSamples], ys[kThumbSamples];
  cell_samples(tx, kThumbW, gp.frame_w, xs);
  cell_samples(ty, kThumbH, gp.frame_h, ys);
  const uint32_t previous = c.previous[t];
  for (int i = tid; i < n * kHistBins; i += kStatsThreads) hist[i / kHistBins][i % kHistBins] = 0;
  if (tid < 2 * kMaxRegions) regions[tid / kMaxRegions][tid % kMaxRegions] = c.regions[tid / kMaxRegions][tid % kMaxRegions];
  if (!late) {   // the loops of iteration i + 1 read slot i (this one) and slot i - 1
    const Slot* const before = before_slot(c.slots, RingHeader{iteration + 1, gp.delay, gp.depth});
    const detail::Run runs[] = {
        {&st.params, &gp, detail::words_of<ControlParams>()},
        {&st.block, c.block, detail::words_of<ControlBlock>()},
        {&st.before, before ? &before->stats.region[0] : nullptr, before ? detail::words_of<RegionStats>() : 0}};
    detail::copy_runs(runs);
  }

  wait();
  if (frame >= params->num_frames) return;   // uniform: no frame, no iteration
  if (late) iteration = launch_iteration(c, frame);
  const Region* const region_of = regions[iteration & 1u];
  const FrameSlot& slot = params->frames[frame];
  const uint32_t q = thumb_q(thumb_sum<F>(slot.image, xs, ys), luma_scale(F, slot.color));
  c.previous[t] = static_cast<uint16_t>(q);
  const PixelSample s = sample_pixel(q, previous, iteration > 0, tx, ty);
  __syncthreads();

  const int warp = tid / 32, lane = tid % 32;
  const unsigned same_bin = __match_any_sync(detail::kAllLanes, s.bin);
  for (int r = 0; r < n; ++r) {
    const Region region = region_of[r];
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
  TermAccum* const accum = iteration_accum(c, iteration);
  for (int i = tid; i < n * detail::kItems; i += kStatsThreads) {   // reductions: no value returned
    const int r = i / detail::kItems, j = i % detail::kItems;
    if (j < kTerms) {
      uint64_t v = 0;
      for (int w = 0; w < detail::kWarps; ++w) v += warp_terms[w][r][j];
      if (v != 0) atomicAdd(reinterpret_cast<unsigned long long*>(&accum[r].terms[j]), static_cast<unsigned long long>(v));
    } else if (const uint32_t v = hist[r][j - kTerms]; v != 0) {
      atomicAdd(&accum[r].hist[j - kTerms], v);
    }
  }
  if (late) return;
  __threadfence();   // this block's sums and thumbnail pixels before its ticket
  __syncthreads();
  if (tid == 0) last = atomicAdd(&c.ticket, 1u) == kStatsBlocks - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();   // every block's sums are visible
  detail::finish_iteration(c, st, iteration, n, region_of);
}

//! Block `block` of the control_blocks() that precede the output tiles of launch `frame` (`blocks`
//! of them): with d >= 2 block 0 is the finisher (detail::finish_late), the others compute the
//! statistics (stats_block).
template <ops::PixelFormat F, class Wait>
__device__ __forceinline__ void control_block(FusedControl& c, const FusedParams* params, int frame, int block,
                                              int blocks, Wait wait) {
  const bool late = blocks > kStatsBlocks;
  if (late && block == 0) return detail::finish_late(c, true);
  stats_block<F>(c, params, frame, late ? block - 1 : block, late, wait);
}

}  // namespace framefuse::control
