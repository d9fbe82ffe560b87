#pragma once
//! The upload of host frames into device memory as ONE kernel for every plane of a batch, reading
//! its jobs from pinned host memory when it runs: a captured graph replays it unchanged while the
//! frames' addresses change from frame to frame. A copy-engine memcpy node would need its
//! parameters set per frame (cudaGraphExecMemcpyNodeSetParams1D, 0.6 us of host time on the H200
//! host) and a frame in one contiguous span; the copy engine moves a 1080p frame in 62 us, this
//! kernel in 69 us (tests/bench/RESULTS.md).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "pipeline/fused/fused_params.hpp"

namespace framefuse {

//! One plane: `rows` rows of `row_bytes` from `src` to `dst`. `src` is page-locked host memory
//! (cudaHostAlloc / cudaMallocHost), read by the kernel through its unified address; `dst` is
//! device memory. rows 0: nothing (a frame of the batch that needs no upload).
struct UploadJob {
  const uint8_t* src;
  uint8_t* dst;
  int64_t src_pitch, dst_pitch;
  int32_t row_bytes, rows;
};

//! Every plane of the largest batch (at most 3 planes a frame).
inline constexpr int kMaxUploadJobs = 3 * kMaxBatch;

//! Blocks of one job that move `bytes` (the largest plane) in one pass of the kernel's loop.
int upload_blocks_per_job(size_t bytes);

//! Enqueues jobs [0, jobs) of `block` (pinned host memory, at least `jobs` entries, read when the
//! kernel runs) on `stream`: a grid of blocks_per_job x jobs blocks. Rows move as 16-byte words
//! where every address, pitch and row length is a multiple of 16, else byte by byte. Never
//! allocates or synchronises: safe inside stream capture.
cudaError_t launch_upload(const UploadJob* block, int jobs, int blocks_per_job, cudaStream_t stream);

}  // namespace framefuse
