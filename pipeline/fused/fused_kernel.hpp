#pragma once
//! Launch of the fused preprocessing kernel: every output of every frame of a batch in ONE launch.
#include <cuda_runtime_api.h>

#include "pipeline/fused/fused_params.hpp"

namespace framefuse {

//! Enqueues one launch on `stream` reading `params` (device memory, valid until the kernel ran).
//! Grid: `tiles` blocks (all outputs) x `max_batch` frames; frames >= params->num_frames exit.
//! Never allocates or synchronises: safe inside stream capture.
cudaError_t launch_fused(ops::PixelFormat format, const FusedParams* params, int32_t tiles, int32_t max_batch,
                         cudaStream_t stream);

}  // namespace framefuse
