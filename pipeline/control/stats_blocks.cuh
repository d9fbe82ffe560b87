#pragma once
//! Device code of the control statistics inside the fused launch (pipeline/control/
//! fused_control.hpp): included by pipeline/fused/fused_kernel.cu, whose blocks below
//! control_blocks() call control_block(), and whose flush kernel calls detail::finish_late().
//!
//! The end of an iteration is a chain of dependent memory round trips (totals, slot, loops, record,
//! write-back). With d = 1 it must end inside the iteration's own launch, after its statistics: each
//! statistics block fetches, before the upload's completion, everything the last block could need
//! besides the totals. With d >= 2 the next launch's finisher block runs it beside that launch's
//! tiles, waiting for nothing of the launch, and fetches all its inputs in one round trip
//! (fused_control.hpp). Either way the block works on shared copies with parallel threads wherever
//! the work splits, with as few barriers as the data flow allows.
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

//! Words per thread that cover `words` words.
constexpr int per_thread(int words) { return (words + kStatsThreads - 1) / kStatsThreads; }

//! Up to K * kStatsThreads words of a copy held in the registers of every thread (word t + k *
//! kStatsThreads in v[k]): load() them, store() them where the copy goes once the round trip is
//! over. Loads of several Words before any store cost one round trip together.
template <int K>
struct Words {
  uint32_t v[K];

  __device__ __forceinline__ void load(const void* src, int words) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (const int w = static_cast<int>(threadIdx.x) + k * kStatsThreads; w < words)
        v[k] = __ldcg(static_cast<const uint32_t*>(src) + w);
  }
  //! v[k] = other.v[k] where `take`.
  __device__ __forceinline__ void take_if(bool take, const Words& other) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = take ? other.v[k] : v[k];
  }
  __device__ __forceinline__ void store(void* dst, int words) const {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (const int w = static_cast<int>(threadIdx.x) + k * kStatsThreads; w < words)
        static_cast<uint32_t*>(dst)[w] = v[k];
  }
};

//! Bytes of a Slot up to and including region n - 1's statistics: all that an iteration writes.
__device__ __forceinline__ size_t slot_bytes(int n) {
  return offsetof(Slot, stats) + offsetof(FrameStats, region) + sizeof(RegionStats) * size_t(n);
}
__device__ __forceinline__ int slot_words(int n) { return static_cast<int>(slot_bytes(n) / 4); }

//! The working copies of the block that ends an iteration (shared memory, staged()).
struct Staged {
  //! d >= 2: all of FusedControl's head, copied by the finisher. d = 1: params, block and
  //! mail_before (region 0 of the slot observed before the next loops' one), copied by every
  //! statistics block; slots and records, set by the last one (finish_iteration).
  ControlHead head;
  TermAccum accum[kMaxRegions];   //!< the closed iteration's totals
  Slot current;                   //!< its slot, filled here
  Slot observed;                  //!< the slot the loops read when it is not `current` (closes_late())
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

//! Every thread, one phase with no barrier (the caller ends it): st.current becomes the closed slot
//! of the iteration st.head.block's counter names, from st.accum, its n `regions` and `used`, the
//! state its outputs got: each of n * kStatFields threads sums its region's terms and finalises one
//! field (finalize_field), the others copy the histograms and the state. Thread 0 returns the header
//! close_slot_header() advanced, to be stored once no thread reads st.head.block's any more.
__device__ __forceinline__ RingHeader close_staged(Staged& st, int n, const Region* regions, const ControlState& used) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid < n * kStatFields) {
    const int r = tid / kStatFields, f = tid % kStatFields;
    RegionSums sums{};
    add_terms(sums, st.accum[r].terms);
    set_field(st.current.stats.region[r], f, finalize_field(sums, regions[r], f));
    if (f == 0) st.current.stats.region[r].pixels = static_cast<uint32_t>(sums.pixels);
  }
  for (int i = tid; i < n * kHistBins; i += kStatsThreads)
    st.current.stats.region[i / kHistBins].hist[i % kHistBins] = st.accum[i / kHistBins].hist[i % kHistBins];
  copy_words(&st.current.applied, &used, sizeof used);
  RingHeader h = st.head.block.header;
  if (tid == 0) close_slot_header(st.head.params, st.current, h);
  return h;
}

//! Every thread, then a barrier: the record of the slot st.current (when `closed`, with the health
//! st.head.reported; warp kRecordWarp, one lane per make_record_part()) beside the loops of the
//! next iteration on st.head.block (when `o`, the slot they observe, is not null): warp 0 sums the
//! scene distance's terms (against st.head.mail_before when `has_before`) and its first lane runs
//! health, warp 1 runs auto_gain with one lane per output, warp 2's first lane roi_follow. Each loop
//! steps a copy in registers of the words of the block it owns (control_step.hpp), so its
//! shared-memory reads need not wait for its writes, then stores them.
inline constexpr int kRecordWarp = 3;
__device__ __forceinline__ void record_and_loops(Staged& st, bool closed, const Slot* o, bool has_before) {
  static_assert(kStatsThreads >= 32 * (kRecordWarp + 1) && kMaxOutputs <= 32 && kRecordParts <= 32,
                "three warps for the loops, one for the record, one lane per output or part");
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const ControlParams& p = st.head.params;
  ControlBlock& block = st.head.block;
  const RegionStats& before = st.head.mail_before;
  if (closed && warp == kRecordWarp && lane < kRecordParts) {
    make_record_part(p, st.current, st.head.reported, lane, st.record);
  } else if (o && warp == 0) {
    uint64_t d = 0;
    if (has_before)
      for (int bin = lane; bin < kHistBins; bin += 32) d += hist_term(o->stats.region[0], before, bin);
    d = warp_sum(d);
    if (lane == 0) {
      ControlBlock b;
      b.loops.health = block.loops.health;
      step_health(p, *o, has_before ? hist_distance_of(d, o->stats.region[0], before) : 0.f, b);
      block.loops.health = b.loops.health;
    }
  } else if (o && warp == 1 && lane < p.num_outputs) {
    ControlBlock b;
    b.state.out[lane].gain = block.state.out[lane].gain;
    b.loops.integral[lane] = block.loops.integral[lane];
    step_auto_gain(p, *o, lane, b);
    block.state.out[lane].gain = b.state.out[lane].gain;
    block.loops.integral[lane] = b.loops.integral[lane];
  } else if (o && warp == 2 && lane == 0 && (p.loops & kLoopRoiFollow)) {
    const int k = p.roi_follow.output;   // its gain is warp 1's
    ControlBlock b;
    b.loops.roi = block.loops.roi;
    b.state.out[k].dx = block.state.out[k].dx;
    b.state.out[k].dy = block.state.out[k].dy;
    step_roi_follow(p, *o, b);
    block.loops.roi = b.loops.roi;
    block.state.out[k].dx = b.state.out[k].dx;
    block.state.out[k].dy = b.state.out[k].dy;
  }
  __syncthreads();
}

//! Every thread: the closed iteration's slot and record (when `closed`), the block, and (when
//! `stepped`) the applied state and regions of iteration `step_for`, one word per thread; the
//! record without fences (PublishedRecord), its check summed by the last warp.
__device__ __forceinline__ void write_back(FusedControl& c, const Staged& st, int n, bool closed, uint64_t iteration,
                                           bool stepped, uint64_t step_for) {
  const int tid = static_cast<int>(threadIdx.x);
  const ControlHead& h = st.head;
  if (closed) copy_words(&h.slots[write_slot(iteration, h.params.depth)], &st.current, slot_bytes(n));
  copy_words(&c.block, &h.block, sizeof h.block);
  if (stepped) {
    copy_words(&c.applied[step_for & 1u], &h.block.state, sizeof h.block.state);
    if (tid < n) c.regions[step_for & 1u][tid] = stats_region(h.params, h.block.state, tid);
  }
  if (!closed) return;
  PublishedRecord& e = h.records[iteration % kRecordRing];
  constexpr int kWords = words_of<ControlRecord>();
  static_assert(kWords <= kStatsThreads, "one thread per word of the record");
  const uint32_t* const words = reinterpret_cast<const uint32_t*>(&st.record);
  if (tid < kWords) reinterpret_cast<uint32_t*>(&e.record)[tid] = words[tid];
  if (tid / 32 == kWarps - 1) {
    const uint64_t seq = iteration + 1;
    uint64_t sum = 0;
    for (int w = tid % 32; w < kWords; w += 32) sum ^= check_word(seq, static_cast<uint32_t>(w), words[w]);
    for (int offset = 16; offset > 0; offset /= 2) sum ^= __shfl_xor_sync(kAllLanes, sum, offset);
    if (tid % 32 == 0) {
      e.seq = seq;
      e.check = sum;
    }
  }
}

//! d = 1: the end of iteration i = `iteration` in its last statistics block (every thread; `regions`
//! the iteration's, `st` staged by stats_block(): params, block, mail_before): the totals are read
//! back from its accumulators (and cleared), its statistics finalised, the iteration closed (as
//! close_iteration()), then the loops of iteration i + 1 on its own slot beside its record, and
//! everything written back.
__device__ __noinline__ void finish_iteration(FusedControl& c, Staged& st, uint64_t iteration, int n,
                                              const Region* regions) {
  const int tid = static_cast<int>(threadIdx.x);
  TermAccum* const accum = iteration_accum(c, iteration);
  if (tid == 0) {
    st.head.slots = c.slots;
    st.head.records = c.records;
  }
  const Run runs[] = {{st.accum, accum, n * words_of<TermAccum>()}};
  copy_runs(runs);
  __syncthreads();
  clear_words(accum, n * words_of<TermAccum>());
  const RingHeader closed = close_staged(st, n, regions, st.head.block.state);
  copy_words(&st.head.reported, &st.head.block.loops.health, sizeof st.head.reported);   // before the loops of i + 1
  __syncthreads();
  if (tid == 0) st.head.block.header = closed;
  record_and_loops(st, true, &st.current, has_input(iteration + 1, st.head.params.delay + 1));
  write_back(c, st, n, true, iteration, true, iteration + 1);
  if (tid == 0) c.ticket = 0;
}

//! d >= 2 (closes_late()): the finisher block of launch i = c.finisher_next (every thread, before and
//! without any wait for the upload; n = num_regions(c.params)). Iteration i - 1, when still open (the
//! block's counter), is closed from the totals launch i - 1 left: its slot with the state its
//! outputs got, its record with the health `reported` kept for it. With `step`, the health after the
//! loops of iteration i is kept for iteration i's record, the loops of iteration i + 1 run on slot
//! i + 1 - d and the applied state and regions of i + 1 go out; finisher_next becomes i + 1. Without
//! `step` (flush_control): only the close. One memory round trip fetches every input (fused_control.
//! hpp): the head whole, the accumulators of both parities (it keeps those of i - 1) and the
//! mailbox's slot, which with the mailbox's region it keeps up for the next finisher. Global
//! memory is written only after the loops.
__device__ __noinline__ void finish_late(FusedControl& c, int n, bool step) {
  constexpr int kTotals = words_of<TermAccum>() * kMaxRegions;
  Staged& st = staged();
  const int tid = static_cast<int>(threadIdx.x);
  const int totals = n * words_of<TermAccum>(), observed_words = step ? slot_words(n) : 0;
  {
    const uint64_t i = __ldcg(reinterpret_cast<const unsigned long long*>(&c.finisher_next));
    Words<per_thread(words_of<ControlHead>())> head;
    Words<per_thread(kTotals)> even, odd;
    Words<per_thread(words_of<Slot>())> observed;
    head.load(static_cast<const ControlHead*>(&c), words_of<ControlHead>());
    even.load(c.accum[0], totals);
    odd.load(c.accum[1], totals);
    observed.load(&c.mail_observed, observed_words);
    head.store(&st.head, words_of<ControlHead>());
    even.take_if((i & 1u) == 0, odd);   // the totals of i - 1
    even.store(st.accum, totals);
    observed.store(&st.observed, observed_words);
  }
  __syncthreads();
  const ControlHead& h = st.head;
  const uint64_t i = h.finisher_next, closing = i - 1;
  const int d = h.params.delay;
  const bool open = i > 0 && h.block.header.iteration == closing;
  // The slot the next finisher observes, i + 2 - d, when this one does not close it (d = 3, open)
  // and it is closed already (d >= 3): from the ring, stored after the round trip.
  const bool carry = step && d >= 3 && has_input(i + 2, d) && !(open && d == 3);
  Words<per_thread(words_of<Slot>())> carried;
  if (carry) carried.load(&h.slots[read_slot(i + 2, d, h.params.depth)], slot_words(n));
  // The health after the loops of i, for the record of i, before the loops of i + 1 change it.
  constexpr int kHealthWords = words_of<Health::State>();
  static_assert(kHealthWords <= kStatsThreads, "one word per thread");
  const bool keeps_health = step && tid < kHealthWords;
  const uint32_t health = keeps_health ? reinterpret_cast<const uint32_t*>(&h.block.loops.health)[tid] : 0;
  RingHeader closed{};
  if (open) closed = close_staged(st, n, h.regions[closing & 1u], h.applied[closing & 1u]);
  __syncthreads();
  if (open && tid == 0) st.head.block.header = closed;
  // The loops of i + 1 observe slot i + 1 - d: with d = 2 the one this block closes, unless a flush
  // closed it already (then, as always with d >= 3, the mailbox's).
  const Slot* const observed = !step || !has_input(i + 1, d) ? nullptr : open && d == 2 ? &st.current : &st.observed;
  record_and_loops(st, open, observed, has_input(i + 1, d + 1));
  write_back(c, st, n, open, closing, step, i + 1);
  if (open) clear_words(c.accum[closing & 1u], totals);
  if (keeps_health) reinterpret_cast<uint32_t*>(&c.reported)[tid] = health;
  // The mailbox of finisher i + 1 (finisher i when `step` is false): the slot it observes, where this
  // block has it, and the region 0 before it.
  const uint64_t next = step ? i + 1 : i;
  if (open && has_input(next + 1, d) && closing == next + 1 - uint64_t(d))
    copy_words(&c.mail_observed, &st.current, slot_bytes(n));
  if (carry) carried.store(&c.mail_observed, slot_words(n));
  if (observed) copy_words(&c.mail_before, &observed->stats.region[0], sizeof(RegionStats));
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
  const ControlParams& gp = c.params;
  const int n = num_regions(gp);
  uint64_t iteration = late ? 0 : c.block.header.iteration;
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
        {&st.head.params, &gp, detail::words_of<ControlParams>()},
        {&st.head.block, &c.block, detail::words_of<ControlBlock>()},
        {&st.head.mail_before, before ? &before->stats.region[0] : nullptr, before ? detail::words_of<RegionStats>() : 0}};
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

//! Block `block` of the control_blocks() that precede the output tiles of launch `frame` of
//! `launch` (launch.stats_blocks of them): with d >= 2 block 0 is the finisher (detail::
//! finish_late), the others compute the statistics (stats_block).
template <ops::PixelFormat F, class Wait>
__device__ __forceinline__ void control_block(const FusedLaunch& launch, int frame, int block, Wait wait) {
  FusedControl& c = *launch.control;
  const bool late = launch.stats_blocks > kStatsBlocks;
  // The launch's outputs are the control's (CudaControl::attach): n without a memory round trip.
  if (late && block == 0) return detail::finish_late(c, num_regions(launch.num_outputs), true);
  stats_block<F>(c, launch.block, frame, late ? block - 1 : block, late, wait);
}

}  // namespace framefuse::control
