#pragma once
//! Launch of the fused preprocessing kernel: every output of every frame of a batch in ONE launch.
#include <cuda_runtime_api.h>

#include "pipeline/fused/fused_params.hpp"

namespace framefuse {

//! Enqueues one launch on `stream` with `launch` as its by-value parameter, reading the per-call
//! block launch.block (device memory, valid until the kernel ran), tiled by tile_outputs(launch,
//! rows_per_thread) (one of kRowsPerThreadChoices), for batch frames [first_frame, first_frame +
//! frames). Grid: launch.stats_blocks control blocks (finisher and statistics), then launch.tile_begin[kMaxOutputs]
//! blocks (all outputs), x `frames`; frames >=
//! block->num_frames exit. A programmatic dependent launch (sm_90): its blocks start while the
//! kernel before it on `stream` (the upload) still runs, read only `launch` and the tap tables, and
//! wait for that kernel's completion before reading the block or writing outputs. Never allocates
//! or synchronises: safe inside stream capture.
cudaError_t launch_fused(ops::PixelFormat format, int rows_per_thread, const FusedLaunch& launch, int32_t first_frame,
                         int32_t frames, cudaStream_t stream);

//! Enqueues the parameter upload on `stream`: one small kernel copies `bytes` (a multiple of 16) from
//! pinned host memory to device memory. A kernel and not cudaMemcpyAsync: on the H200 lease host the
//! copy engine's round trip cost ~8 us per launch, the kernel ~3 us (tests/bench/RESULTS.md).
//! The host bytes are read when the kernel runs, not when it is enqueued. `control` (device, or
//! null): the pipeline's control, whose batch the upload starts (control::begin_batch).
cudaError_t stage_fused_params(const void* host, void* device, size_t bytes, control::FusedControl* control,
                               cudaStream_t stream);

//! Enqueues, on `stream`, one small kernel that closes the iteration a d >= 2 `control` (device)
//! left open for the next launch (pipeline/control/fused_control.hpp); nothing when none is.
cudaError_t flush_fused_control(control::FusedControl* control, cudaStream_t stream);

//! Blocks of the kernel for `format` / `rows_per_thread` resident at once on one multiprocessor of
//! the current device (cudaOccupancyMaxActiveBlocksPerMultiprocessor). Host query, for setup.
cudaError_t fused_blocks_per_sm(ops::PixelFormat format, int rows_per_thread, int* blocks);

}  // namespace framefuse
