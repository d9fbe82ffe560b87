#pragma once
//! One pipeline's control on a CUDA device: the iteration of control_step.hpp as three launches
//! per frame on one stream (control step -> fused kernel of that frame, control applied ->
//! statistics), with the delay ring, loop state and iteration counter in device memory and the
//! records published into a mapped pinned ring the host reads without synchronising.
#include <optional>

#include "pipeline/control/control_kernels.hpp"
#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/fused/fused_preprocess.hpp"

namespace framefuse::control {

class CudaControl {
 public:
  //! Allocates the device parameters, block, D slots, previous thumbnail, the thumbnails of
  //! `max_batch` frames and the record ring; uploads iteration 0 (initial_block) on `stream` and
  //! waits for it.
  void setup(const ControlParams& params, int max_batch, cudaStream_t stream);

  //! The hidden thumbnail output (params.thumbnail), to append to the visible outputs given to
  //! FusedPreprocess::setup; its tensor is thumbnails().
  OutputPlan thumbnail_plan() const;
  //! Device tensor of the thumbnail output, frame 0 of the batch (frame b at + b * kThumbPixels).
  float* thumbnails() const { return thumbnails_.as<float>(); }
  //! The device ControlState the current frame's fused pass applies (FusedPreprocess::set_control).
  const ControlState* device_state() const { return &device_.block->state; }

  //! Enqueues, on `stream`, the fused parameter upload and per frame b < `frames` of the batch of
  //! `fused` (set up with thumbnail_plan() last, set_control(device_state())): the control step,
  //! the fused kernel of frame b, the statistics of thumbnail b. Never allocates or synchronises;
  //! a captured graph replays it as is (the iteration counter is advanced by the kernels).
  void run(const FusedPreprocess& fused, int frames, cudaStream_t stream) const;
  //! run()'s parts for one iteration: the control step, and the statistics of batch frame `frame`'s
  //! thumbnail (whatever wrote it).
  void control_step(cudaStream_t stream) const;
  void stats_step(int frame, cudaStream_t stream) const;

  //! The newest record the device has completed, nullopt before the first. Reads the mapped ring
  //! without synchronising: it may trail the work enqueued so far.
  std::optional<ControlRecord> record() const;

  const ControlParams& params() const { return params_; }
  //! Device copies, for tests and diagnostics: the block and the D slots.
  const ControlBlock* device_block() const { return device_.block; }
  const Slot* device_slots() const { return device_.slots; }

 private:
  ControlParams params_{};
  int max_batch_ = 0;
  cuda::DeviceBuffer memory_;       //!< params, block, slots, previous thumbnail
  cuda::DeviceBuffer thumbnails_;   //!< max_batch thumbnails
  cuda::PinnedBuffer records_;      //!< kRecordRing PublishedRecords, mapped
  ControlDevice device_{};
};

}  // namespace framefuse::control
