#pragma once
//! The benchmark's unfused baseline: the same chain as one kernel per op, each writing its whole
//! intermediate to device memory in f32 (the precision the fused chain keeps between ops):
//!   to_rgb (full frame) -> resize -> window (centre crop / letterbox pad) -> normalize -> store
//!   (layout + dtype).
//! Every kernel applies the op definitions of pipeline/ops, so outputs equal the fused chain's up to
//! rounding. Rgb channel order only (what the benchmark workloads use).
#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/fused/fused_params.hpp"
#include "pipeline/fused/plan.hpp"

namespace framefuse::bench {

//! Enqueues one empty kernel (one block of one thread): what a launch costs on this host with no
//! work, the floor under every mode's per-launch time.
cudaError_t launch_empty(cudaStream_t stream);

class UnfusedPreprocess {
 public:
  //! Allocates the intermediates for `max_batch` frames. Throws ConfigError for non-Rgb outputs.
  void setup(const FrameInfo& frame, std::span<const OutputPlan> plans, int max_batch);

  //! Enqueues the chain for `batch` frames: `frames` is a device array of FrameSlots, `outs` the
  //! device tensors of frame 0 per output (frame b at + b * bytes_per_frame), as FusedPreprocess.
  void run(const FrameSlot* frames, int batch, std::span<void* const> outs, cudaStream_t stream) const;

  //! Kernel launches per run().
  int launches() const;

 private:
  struct Output {
    ops::Chain::Params chain;
    bool windowed;                   //!< resized image differs from the output window
    cuda::DeviceBuffer resized, window;
  };
  FrameInfo frame_{};
  std::vector<Output> outputs_;
  cuda::DeviceBuffer rgb_;
};

}  // namespace framefuse::bench
