#pragma once
//! One pipeline's control on a CUDA device: each frame is one fused launch whose statistics blocks
//! measure the frame and in which the loops for a later frame run (fused_control.hpp: with d = 1
//! the frame's last statistics block, for the next frame; with d >= 2 the next launch's finisher
//! block, for the frame after it), with the delay ring, loop state and iteration counters in device
//! memory and the records published into a mapped pinned ring the host reads without
//! synchronising.
#include <optional>

#include "pipeline/control/fused_control.hpp"
#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/fused/fused_preprocess.hpp"

namespace framefuse::control {

class CudaControl {
 public:
  //! Allocates the device FusedControl (parameters, block, accumulators, mailbox, previous
  //! thumbnail), D slots and the record ring; uploads iteration 0 (initial_block) on `stream` and waits for it.
  void setup(const ControlParams& params, cudaStream_t stream);

  //! Makes `fused` (set up for the pipeline's outputs, params().num_outputs of them, else throws
  //! ConfigError) compute this control's statistics in control_blocks() extra blocks of each launch
  //! and apply its state; its launches must then be one frame each, as run() makes them.
  void attach(FusedPreprocess& fused) const;

  //! Enqueues, on `stream`, the parameter upload of `fused` (attached) and per frame b < `frames`
  //! of its batch one fused launch of frame b: one iteration each, in order. When the work runs,
  //! the batch set_batch() gave must hold `frames` frames (the device counts the iterations from
  //! it). Never allocates or synchronises; a captured graph replays it as is (the iteration
  //! counters are advanced by the device).
  void run(const FusedPreprocess& fused, int frames, cudaStream_t stream) const;

  //! Enqueues, on `stream`, the close of the iteration that a d >= 2 control leaves open until
  //! the next launch (closes_late()): afterwards the slots, block and records hold every frame run
  //! so far. Not needed between frames; nothing with d = 1. Never allocates or synchronises.
  void flush(cudaStream_t stream) const;

  //! Iterations the newest record trails the frames run: 1 when closes_late() (until flush()),
  //! else 0.
  int record_lag() const { return closes_late(params_) ? 1 : 0; }

  //! The newest record the device has completed, nullopt before the first. Reads the mapped ring
  //! without synchronising: it may trail the work enqueued so far (at least record_lag()).
  std::optional<ControlRecord> record() const;

  const ControlParams& params() const { return params_; }
  //! Device copies, for tests and diagnostics: the block, the D slots, and the thumbnail of the
  //! last completed frame (kThumbPixels values).
  const ControlBlock* device_block() const { return &control_->block; }
  const Slot* device_slots() const { return slots_; }
  const uint16_t* device_thumbnail() const { return control_->previous; }

 private:
  ControlParams params_{};
  cuda::DeviceBuffer memory_;       //!< FusedControl, then its slots
  cuda::PinnedBuffer records_;      //!< kRecordRing PublishedRecords, mapped
  FusedControl* control_ = nullptr;
  const Slot* slots_ = nullptr;
};

}  // namespace framefuse::control
