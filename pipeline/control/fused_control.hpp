#pragma once
//! One pipeline's control as the fused launch sees it on a CUDA device (pipeline/control/
//! stats_blocks.cuh runs it; CudaControl sets it up). POD, no CUDA types.
//!
//! Iteration i is one fused launch of one frame: its output blocks apply applied[i & 1]; its
//! kStatsBlocks statistics blocks (the lowest block indices, so they overlap the output tiles)
//! compute the thumbnail of the frame over regions[i & 1], compare it with the previous one and add
//! their term sums into `accum` with atomics; the last of them to arrive (`ticket`) finalises the
//! regions, runs the loops, publishes the record, advances the counter, writes applied and regions
//! of iteration i + 1 (the other parity) and clears accum and ticket. Output blocks may start after
//! that last block finished, so they never read the counter: launch b of a batch is iteration
//! batch_first + b, batch_first being the counter as the parameter upload saw it before the batch.
//! Statistics blocks read the counter itself (only the last of them rewrites it, after every one
//! took its ticket). Blocks read before the upload's completion only what earlier launches wrote:
//! only a batch's first launch overlaps the upload (programmatic dependent launch), later ones
//! start after the launch before them completed.
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

//! FNV-1a over the 32-bit words of `r`, seeded with `seq`.
FF_HD uint64_t record_check(uint64_t seq, const ControlRecord& r) {
  static_assert(sizeof(ControlRecord) % 4 == 0, "ControlRecord is whole words");
  uint64_t h = 1469598103934665603ull ^ seq;
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
  for (size_t i = 0; i < sizeof(ControlRecord) / 4; ++i) h = (h ^ w[i]) * 1099511628211ull;
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

//! Device memory of one pipeline's control.
struct FusedControl {
  const ControlParams* params;
  ControlBlock* block;         //!< header (iteration counter), state, loop memory: the last block's
  Slot* slots;                 //!< params->depth slots
  uint16_t* previous;          //!< kThumbPixels: the previous frame's thumbnail, rewritten in place
  TermAccum* accum;            //!< kMaxRegions accumulators of the running iteration, zero between
  PublishedRecord* records;    //!< kRecordRing entries of mapped pinned host memory
  uint32_t ticket;             //!< statistics blocks of the running iteration that finished
  uint64_t batch_first;        //!< iteration of the current batch's frame 0
  ControlState applied[2];     //!< iteration i's outputs apply applied[i & 1]
  Region regions[2][kMaxRegions];   //!< iteration i's statistics regions (stats_region())
};

//! What the parameter upload does before a batch: batch_first = the iteration counter.
FF_HD void begin_batch(FusedControl& c) { c.batch_first = c.block->header.iteration; }

//! The iteration of launch `frame` of the current batch (read once the upload is visible).
FF_HD uint64_t launch_iteration(const FusedControl& c, int frame) { return c.batch_first + uint64_t(frame); }

}  // namespace framefuse::control
