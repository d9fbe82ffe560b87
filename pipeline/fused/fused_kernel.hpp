#pragma once
//! Launch of the fused preprocessing kernel: every output of every frame of a batch in ONE launch.
#include <cuda_runtime_api.h>

#include "pipeline/fused/fused_params.hpp"

namespace framefuse {

//! Enqueues one launch on `stream` reading `params` (device memory, valid until the kernel ran),
//! tiled by tile_outputs(p, rows_per_thread) (one of kRowsPerThreadChoices), for batch frames
//! [first_frame, first_frame + frames). Grid: `tiles` blocks (all outputs) x `frames`; frames
//! >= params->num_frames exit. Never allocates or synchronises: safe inside stream capture.
cudaError_t launch_fused(ops::PixelFormat format, int rows_per_thread, const FusedParams* params, int32_t tiles,
                         int32_t first_frame, int32_t frames, cudaStream_t stream);

//! Enqueues the parameter upload on `stream`: one small kernel copies `bytes` (a multiple of 16) from
//! pinned host memory to device memory. A kernel and not cudaMemcpyAsync: on the H200 lease host the
//! copy engine's round trip cost ~8 us per launch, the kernel ~3 us (tests/bench/RESULTS.md).
//! The host bytes are read when the kernel runs, not when it is enqueued.
cudaError_t stage_fused_params(const void* host, void* device, size_t bytes, cudaStream_t stream);

//! Blocks of the kernel for `format` / `rows_per_thread` resident at once on one multiprocessor of
//! the current device (cudaOccupancyMaxActiveBlocksPerMultiprocessor). Host query, for setup.
cudaError_t fused_blocks_per_sm(ops::PixelFormat format, int rows_per_thread, int* blocks);

}  // namespace framefuse
