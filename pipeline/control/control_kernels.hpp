#pragma once
//! Launches of the control iteration's device steps (control_step.hpp) on one pipeline's device
//! memory. Neither allocates nor synchronises: both are safe inside stream capture, and a replayed
//! graph needs no parameter edits (the iteration counter lives in the device ControlBlock).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "pipeline/control/control_step.hpp"

namespace framefuse::control {

//! One entry of the host-visible record ring. `seq` is 2 * (iteration + 1) once `record` holds
//! that iteration, odd while the device rewrites the entry, 0 before its first write; a reader
//! copies the record between two equal even reads of `seq` (a sequence lock).
struct PublishedRecord {
  uint64_t seq;
  ControlRecord record;
};

//! Entries of the record ring: iteration i writes entry i % kRecordRing.
inline constexpr int kRecordRing = 8;

//! Threads of the statistics kernel's single block.
inline constexpr int kStatsThreads = 512;

//! Where one pipeline's control lives. Device-accessible pointers.
struct ControlDevice {
  const ControlParams* params;
  ControlBlock* block;         //!< header (iteration counter), state, loop memory
  Slot* slots;                 //!< params->depth slots
  float* previous;             //!< kThumbW x kThumbH: the previous frame's thumbnail
  PublishedRecord* records;    //!< kRecordRing entries of mapped pinned host memory
};

//! Enqueues step 1 of the current iteration (control_step): one thread.
cudaError_t launch_control_step(const ControlDevice& d, cudaStream_t stream);

//! Enqueues steps 3 and 4: the statistics of `thumbnail` (device, kThumbW x kThumbH f32, the fused
//! pass's hidden output) against the previous thumbnail, which then becomes this one; slot
//! i mod D written, the iteration advanced, the record published into records[i % kRecordRing].
//! One block of kStatsThreads threads.
cudaError_t launch_control_stats(const ControlDevice& d, const float* thumbnail, cudaStream_t stream);

}  // namespace framefuse::control
