#pragma once
//! One running pipeline: a decode thread feeds a bounded queue, a process thread runs the fused
//! chain on the pipeline's executor and hands outputs to the sink, or, for a member of a batch
//! group, hands its frames to the group (runtime/batch_group.hpp), which runs them and writes the
//! pipeline's sink. Owns its threads (RAII): the destructor stops and joins. Errors stay inside the
//! pipeline (state Failed), never in others.
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/exec/executor.hpp"
#include "pipeline/memory/frame_pool.hpp"
#include "pipeline/runtime/batch_group.hpp"
#include "pipeline/runtime/pipeline_stats.hpp"
#include "pipeline/runtime/preview_frame.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

class DecoderShare;     // pipeline/decode/video_source.hpp
class DecodeBalancer;   // pipeline/decode/decode_balancer.hpp

class PipelineRunner {
 public:
  //! `device` is already resolved (Cpu or Cuda:N). Nothing starts until start(). With `group`
  //! (which must outlive the runner, on the same device) the frames go through that group. With
  //! `share` (which must outlive the runner) a file decoded in software is one of its members: its
  //! decoder opens with a share of the host's cores instead of FFmpeg's count. With `balancer`
  //! (which must outlive the runner) its decoder is counted there, and `decoder: auto` on a CUDA
  //! device takes NVDEC or the cores as the balancer says (hybrid decode).
  PipelineRunner(PipelineSpec spec, DeviceSpec device, int cpu_threads = 0, BatchGroup* group = nullptr,
                 DecoderShare* share = nullptr, DecodeBalancer* balancer = nullptr);
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  void start();
  //! Asks both threads to stop; blocking source reads are interrupted. Returns at once.
  void request_stop();
  //! Drops the frames waiting in its queue, counted as Shutdown: a stop that cannot wait for them
  //! (after request_stop()). Frames in flight still finish and the sink is flushed. Thread-safe;
  //! returns the frames dropped.
  uint64_t discard_queued() { return drop_queued(DropReason::Shutdown); }
  //! Waits for the threads; sinks are flushed. Idempotent.
  void join();
  //! True once the source ended (or failed) and every queued frame was processed.
  bool done() const { return done_.load(std::memory_order_acquire); }

  const PipelineSpec& spec() const { return spec_; }
  const DeviceSpec& device() const { return device_; }
  PipelineStats& stats() { return stats_; }
  //! The frame kept for previews, while they are wanted (runtime/preview_frame.hpp); shared, so a
  //! preview may wait on it without holding whatever owns the runner.
  std::shared_ptr<PreviewFrame> preview() const { return preview_; }

 private:
  struct Impl;
  //! After executor.setup(): plans and enables the spec's control (if any) for `frame`, and tells
  //! the stats which outputs it reports.
  void setup_control(Executor& executor, const FrameInfo& frame, std::span<const OutputPlan> plans);
  //! The process thread of a group member: queued frames to the group, in order, until the queue
  //! closes; then waits for their delivery.
  void forward_to_group(const FramePool& pool);
  //! A failed process thread: the pipeline stops, its queued frames are dropped (ProcessError).
  void fail_processing(const std::string& error);
  //! Drops (and counts as `reason`) the frames queued now; returns how many.
  uint64_t drop_queued(DropReason reason);
  PipelineSpec spec_;
  DeviceSpec device_;
  int cpu_threads_;
  BatchGroup* group_;
  PipelineStats stats_;
  std::unique_ptr<Impl> impl_;
  DecoderShare* share_;   //!< the share its software-decoded file joined, else null
  DecodeBalancer* balancer_;
  std::atomic<bool> done_{false};
  std::shared_ptr<PreviewFrame> preview_ = std::make_shared<PreviewFrame>();
};

}  // namespace framefuse
