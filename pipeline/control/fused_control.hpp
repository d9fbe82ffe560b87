#pragma once
//! One pipeline's control as the fused launch sees it on a CUDA device (pipeline/control/
//! stats_blocks.cuh runs it; CudaControl sets it up). POD, no CUDA types.
//!
//! Iteration i is one fused launch of one frame: its output blocks apply applied[i & 1]; its
//! kStatsBlocks statistics blocks (the lowest block indices, so they overlap the output tiles)
//! compute the thumbnail of the frame, compare it with the previous one and add their sums into
//! `accum` with atomics; the last of them to arrive (`ticket`) runs end_iteration(), publishes the
//! record, writes applied[(i + 1) & 1] and clears accum and ticket for iteration i + 1. Nothing an
//! output block reads is written during its launch: the blocks of launch i read the state of
//! iteration batch_first + b (b the launch's batch frame), and batch_first is a snapshot of the
//! iteration counter taken by the parameter upload before the batch's first launch.
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

//! Device memory of one pipeline's control.
struct FusedControl {
  const ControlParams* params;
  ControlBlock* block;         //!< header (iteration counter), state, loop memory: the last block's
  Slot* slots;                 //!< params->depth slots
  uint16_t* previous;          //!< kThumbPixels: the previous frame's thumbnail, rewritten in place
  RegionAccum* accum;          //!< kMaxRegions accumulators of the running iteration, zero between
  PublishedRecord* records;    //!< kRecordRing entries of mapped pinned host memory
  uint32_t ticket;             //!< statistics blocks of the running iteration that finished
  uint64_t batch_first;        //!< iteration of the current batch's frame 0
  ControlState applied[2];     //!< iteration i's outputs apply applied[i & 1]
};

//! What the parameter upload does before a batch: batch_first = the iteration counter.
FF_HD void begin_batch(FusedControl& c) { c.batch_first = c.block->header.iteration; }

//! Applies the state of batch frame `frame` (control::apply) to output k's planned parameters.
FF_HD void apply(const FusedControl& c, int frame, int k, ops::Chain::Params& p) {
  apply(c.applied[(c.batch_first + static_cast<uint64_t>(frame)) & 1u], k, p);
}

}  // namespace framefuse::control
