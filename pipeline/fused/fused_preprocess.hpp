#pragma once
//! Setup/run wrapper of the fused kernel (CUB/DALI contract): setup() plans the launch (tiling, tap
//! tables on the device, the kernel's by-value parameter) and allocates the device per-call block and
//! its pinned staging; set_batch() fills the staging on the host; run(stream) enqueues the block's
//! upload (a one-block staging kernel reading the pinned copy) and the fused kernel, never
//! allocating or synchronising (graph-capturable: replays re-read the staging).
#include <span>

#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/fused/fused_params.hpp"
#include "pipeline/fused/plan.hpp"

namespace framefuse {

class FusedPreprocess {
 public:
  //! Throws ConfigError for more than kMaxOutputs outputs, kMaxBatch frames, or a rows_per_thread
  //! outside kRowsPerThreadChoices. rows_per_thread 0 = pick for the current device: as many rows
  //! per thread as still fill 90 % of the device's resident block slots for a batch of `max_batch`.
  void setup(const FrameInfo& frame, std::span<const OutputPlan> plans, int max_batch, int rows_per_thread = 0);

  //! Points the next run at `frames` (device views) and `outs` (device tensors of frame 0, one per
  //! output, aligned to their element size; frame b at + b * bytes_per_frame). Host-only; throws
  //! ConfigError for a batch larger than setup's, another output count, or a misaligned tensor.
  //! The caller must not call it again before the previous run's upload has executed (wait on an
  //! event recorded after run()).
  void set_batch(std::span<const FrameSlot> frames, std::span<void* const> outs);

  //! Adds a pipeline's control (FusedLaunch::control, `stats_blocks` statistics blocks per launch),
  //! or removes it (nullptr, 0: as after setup()). Host-only; launches enqueued after it see it.
  void set_control(control::FusedControl* control, int32_t stats_blocks);

  //! Enqueues the upload of the parameter block (params_bytes(max_batch)) and the fused kernel on
  //! `stream`: two kernels, upload() then launch(0, max_batch()).
  void run(cudaStream_t stream) const;
  //! run()'s first half: the parameter upload (one small kernel).
  void upload(cudaStream_t stream) const;
  //! run()'s second half for batch frames [first_frame, first_frame + frames), after an upload();
  //! frames past the batch exit. Throws ConfigError for a range outside [0, max_batch()).
  void launch(int first_frame, int frames, cudaStream_t stream) const;

  int max_batch() const { return max_batch_; }
  int rows_per_thread() const { return rows_per_thread_; }
  //! The per-call block as the next upload() sends it (pinned staging).
  const FusedParams& params() const { return *staging_.as<FusedParams>(); }
  //! The kernel's by-value parameter; its `block` points at the device copy of params().
  const FusedLaunch& launch_data() const { return launch_; }

 private:
  ops::PixelFormat format_{};
  int max_batch_ = 0;
  int rows_per_thread_ = 1;
  FusedLaunch launch_{};
  cuda::PinnedBuffer staging_;
  cuda::DeviceBuffer device_;
  cuda::DeviceBuffer taps_;   //!< AxisTap tables of the outputs, FusedOutput::cols / rows
};

}  // namespace framefuse
