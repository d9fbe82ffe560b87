#pragma once
//! One pipeline's control as the fused launch sees it on a CUDA device (pipeline/control/
//! stats_blocks.cuh runs it; CudaControl sets it up). POD, no CUDA types.
//!
//! Iteration i is one fused launch of one frame: its output blocks apply applied[i & 1]; its
//! kStatsBlocks statistics blocks (the lowest block indices after the finisher, so they overlap
//! the output tiles) compute the thumbnail of the frame over regions[i & 1], compare it with the
//! previous one and add their term sums into the accumulators of parity i & 1 with atomics. Launch
//! b of a batch is iteration batch_first + b, batch_first being `launches` as the parameter upload
//! saw it before the batch (the upload advances it). Where the iteration ends depends on d:
//! - d = 1 (the loops of i + 1 need frame i's statistics): the last statistics block to arrive
//!   (`ticket`) finalises the regions, runs the loops, publishes the record, advances the block's
//!   counter, writes applied and regions of iteration i + 1 (the other parity) and clears the
//!   accumulators and the ticket. Statistics blocks read the counter before the upload completes
//!   (only the last of them rewrites it, after every one took its ticket).
//! - d >= 2 (closes_late()): nothing in launch i waits for frame i's statistics. Its finisher block
//!   (block 0, which never waits for the upload) closes iteration i - 1 from the accumulators launch
//!   i - 1 left (slot, record), then runs the loops of iteration i + 1 on slot i + 1 - d <= i - 1
//!   and writes applied and regions of i + 1. The host sees each record one launch later;
//!   CudaControl::flush() closes the last launch's iteration.
//! The finisher is the launch's critical path, so it gets all its inputs in one memory round trip:
//! everything it reads lies at fixed places of FusedControl (no pointer to fetch first), whatever
//! depends on its iteration i it loads for both parities and keeps the one i names, and the slots
//! of the delay ring it reads come from the mailbox the finisher before it left.
//! Blocks read before the upload's completion only what earlier launches wrote: only a batch's
//! first launch overlaps the upload (programmatic dependent launch), later ones start after the
//! launch before them completed. Output and statistics blocks fetch both parities before the wait
//! (the one a finisher rewrites meanwhile is never used).
#include <cstdint>

#include "pipeline/control/control_step.hpp"

namespace framefuse::control {

//! One entry of the host-visible record ring, written without system-scope fences (one word per
//! thread of the last statistics block, none of them waiting for the bus): `seq` is iteration + 1
//! (0 before the first write) and `check` is record_check(seq, record). A reader accepts a copy
//! only when its check matches, so an entry the device is rewriting, or whose writes landed out of
//! order, is skipped; everything is visible once the launch completed.
struct PublishedRecord {
  uint64_t seq;
  ControlRecord record;
  uint64_t check;
};

//! Word w (value v) of record_check(seq, ...): a 64-bit mix (splitmix64's finaliser) of all three.
FF_HD uint64_t check_word(uint64_t seq, uint32_t w, uint32_t v) {
  uint64_t z = seq * 0x9e3779b97f4a7c15ull + (uint64_t{w} << 32 | v);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

//! The XOR of check_word() over the 32-bit words of `r`: the words are mixed apart, so the device
//! computes it in parallel (one warp) instead of as one chain of dependent steps.
FF_HD uint64_t record_check(uint64_t seq, const ControlRecord& r) {
  static_assert(sizeof(ControlRecord) % 4 == 0, "ControlRecord is whole words");
  uint64_t h = 0;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
  for (uint32_t i = 0; i < sizeof(ControlRecord) / 4; ++i) h ^= check_word(seq, i, w[i]);
  return h;
}

//! Entries of the record ring: iteration i writes entry i % kRecordRing.
inline constexpr int kRecordRing = 8;

//! Threads of a statistics block (the fused kernel's block size, pipeline/fused/fused_params.hpp)
//! and thumbnail pixels per block: one each.
inline constexpr int kStatsThreads = kBlockThreads;
inline constexpr int kStatsBlocks = kThumbPixels / kStatsThreads;
static_assert(kThumbPixels % kStatsThreads == 0 && kStatsThreads % kThumbW == 0,
              "a statistics block covers whole thumbnail rows");

//! Term sums and histogram of one region, added up by the statistics blocks of an iteration.
struct TermAccum {
  uint64_t terms[kTerms];
  uint32_t hist[kHistBins];
};

//! Whether iterations end in the next launch's finisher block (d >= 2) instead of in their own.
FF_HD bool closes_late(const ControlParams& p) { return p.delay >= 2; }

//! Blocks of a fused launch before its output tiles: the finisher when closes_late(), then the
//! statistics blocks.
FF_HD int32_t control_blocks(const ControlParams& p) { return kStatsBlocks + (closes_late(p) ? 1 : 0); }

//! The part of FusedControl that a d >= 2 finisher fetches whole, as one contiguous run, in its first
//! memory round trip (its accumulators and the mailbox's slot travel beside it, FusedControl).
struct ControlHead {
  ControlParams params;
  ControlBlock block;          //!< header (counter of closed iterations), state, loop memory
  Slot* slots;                 //!< params.depth slots
  PublishedRecord* records;    //!< kRecordRing entries of mapped pinned host memory
  uint64_t launches;           //!< iterations begun (the parameter upload advances it per batch)
  uint64_t batch_first;        //!< iteration of the current batch's frame 0
  uint64_t finisher_next;      //!< closes_late(): the iteration of the next finisher's launch
  uint32_t ticket;             //!< d = 1: statistics blocks of the running iteration that finished
  Health::State reported;      //!< closes_late(): health after the loops of iteration finisher_next - 1,
                               //!< which the record of that iteration carries
  ControlState applied[2];     //!< iteration i's outputs apply applied[i & 1]
  Region regions[2][kMaxRegions];   //!< iteration i's statistics regions (stats_region())
  RegionStats mail_before;     //!< closes_late(): mailbox, see FusedControl
};

//! Device memory of one pipeline's control: this, then params.depth slots at `slots`, in one
//! allocation. Members at fixed places, so a block that has the FusedControl pointer fetches any of
//! them in one memory round trip.
//!
//! The mailbox (closes_late()): what a finisher leaves for the next one, so that the next one reads
//! no slot of the delay ring (whose index depends on its iteration). With finisher_next = i (before
//! finisher i runs), mail_observed holds slot i + 1 - d (the input of the loops of i + 1) once that
//! iteration is closed (with d = 2 and i - 1 still open finisher i closes it itself), mail_before
//! region 0 of slot i - d once it exists. Finisher i leaves, for i + 1, region 0 of the slot it
//! observed and, with d >= 3, slot i + 2 - d (the one it closed, or a copy from the ring);
//! flush_control, with d = 2, the slot it closed. Setup leaves both empty: no finisher reads them
//! before they are written.
struct FusedControl : ControlHead {
  TermAccum accum[2][kMaxRegions];   //!< iteration i adds into accum[i & 1][r], zero until it is closed
  Slot mail_observed;
  uint16_t previous[kThumbPixels];   //!< the previous frame's thumbnail, rewritten in place
};

//! The accumulators of iteration i's regions.
FF_HD TermAccum* iteration_accum(FusedControl& c, uint64_t i) { return c.accum[i & 1u]; }

//! What the parameter upload does before a batch of `frames` launches, `launches` being c.launches
//! as it read it (beside the parameter block, so both cost one memory round trip).
FF_HD void begin_batch(FusedControl& c, uint64_t launches, int frames) {
  c.batch_first = launches;
  c.launches = launches + uint64_t(frames);
}

//! The iteration of launch `frame` of the current batch (read once the upload is visible).
FF_HD uint64_t launch_iteration(const FusedControl& c, int frame) { return c.batch_first + uint64_t(frame); }

}  // namespace framefuse::control
