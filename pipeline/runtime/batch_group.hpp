#pragma once
//! Cross-stream batching: one executor and one process thread for several pipelines on one device
//! with the same outputs and colour (`batching:` groups). Members keep their decode thread, queue,
//! supervision, stats and sink; their process thread hands frames to the group (Member::push),
//! which forms batches of up to max_batch frames of one FrameInfo from any members, each batch one
//! executor submit ([B, C, H, W] outputs), and hands every frame's slice to its member's sink in
//! that member's frame order.
//!
//! Batching: a batch leaves when max_batch frames of the oldest queued frame's FrameInfo are
//! queued, when every member is live and has a frame in it (cameras: one frame per camera and
//! frame period, so waiting longer only adds latency), or max_wait after that oldest frame was
//! queued, whichever comes first. Frames of another
//! FrameInfo go to later batches, and so do the frames queued behind them of the same member
//! (frame order). A change of FrameInfo between batches re-plans after the batches in flight complete.
//!
//! Backpressure: at most queue_depth frames wait in the group. A full group makes file members
//! wait; a live member drops its own oldest waiting frame (or, with none waiting, the new one),
//! counted as DropReason::GroupFull. Failures: a sink or plan failure fails the members it hit
//! (their waiting frames are dropped as ProcessError); an executor failure fails the members of
//! the batches in flight; the others continue.
//!
//! Lifetime (RAII): the owner destroys the group after its members stopped feeding it; the
//! destructor stops it: frames still waiting and in flight are processed and delivered (or
//! dropped, counted, if processing fails), so every frame's owner is released before it returns.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/runtime/pipeline_stats.hpp"
#include "pipeline/sinks/sink.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

//! A group's counters, as the daemon exports them.
struct BatchGroupSnapshot {
  std::string name;
  std::string device;                //!< "cpu", "cuda:0"
  int32_t max_batch = 0;
  uint64_t batches = 0;              //!< executor submits
  uint64_t frames = 0;               //!< frames in those batches
  uint64_t wait_timeouts = 0;        //!< batches that left short of max_batch because max_wait ran out
  int64_t queue_depth = 0;           //!< frames waiting now
  int64_t members = 0;               //!< pipelines attached now
  //! Mean frames per batch over max_batch, in (0, 1]; 0 before the first batch.
  double mean_fill() const { return batches ? double(frames) / (double(batches) * max_batch) : 0.0; }
};

class BatchGroup {
 public:
  //! A member's sink, made for outputs planned as `plans` at its first frame and at each change of
  //! its frames' FrameInfo (after the previous sink was flushed).
  using SinkFactory = std::function<std::unique_ptr<Sink>(std::span<const OutputPlan> plans)>;

  class Member;

  //! `device` is already resolved (Cpu or Cuda:N); the executor is made by the process thread,
  //! which starts here. `cpu_threads` 0 = all hardware threads. Throws ConfigError for max_batch
  //! outside 1..kMaxBatch or a negative queue_depth or max_wait.
  BatchGroup(BatchGroupSpec spec, DeviceSpec device, int cpu_threads = 0);
  //! stop(), then joins.
  ~BatchGroup();
  BatchGroup(const BatchGroup&) = delete;
  BatchGroup& operator=(const BatchGroup&) = delete;

  //! Attaches a pipeline: its frames go through this group's executor, its outputs to the sinks
  //! `make_sink` makes (default: make_sink(spec.sink, plans, spec.name, device)), and `stats` (which must
  //! outlive the returned Member) counts them as a PipelineRunner does. Live sources
  //! (SourceKind::Rtsp) get the drop-oldest policy. Throws ConfigError when `spec` has control
  //! enabled, or outputs or colour other than the members attached now.
  std::unique_ptr<Member> attach(const PipelineSpec& spec, PipelineStats& stats, SinkFactory make_sink = {});

  //! Takes no more frames (Member::push returns false), processes what is waiting and in flight,
  //! and ends the process thread. Idempotent; returns at once (the destructor waits).
  void stop();

  const BatchGroupSpec& spec() const { return spec_; }
  const DeviceSpec& device() const { return device_; }
  BatchGroupSnapshot snapshot() const;
  //! The most frames of one member the group holds at once: its queue full of them, and the
  //! executor's batches in flight (a member's decode pool is sized for them too).
  int frames_held_per_member() const;

 private:
  struct Shared;   // state the members share with the process thread; outlives the group if they do
  BatchGroupSpec spec_;
  DeviceSpec device_;
  std::shared_ptr<Shared> shared_;
};

//! One pipeline's handle on its group, used by that pipeline's process thread only. Destroying it
//! detaches: its waiting frames are dropped (ProcessError) and the call waits for its frames in
//! flight. May outlive the group.
class BatchGroup::Member {
 public:
  ~Member();
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;

  //! Hands a frame (of this member's stream, in order) to the group. Files wait while the group
  //! is full; live sources never wait (see the header comment). Returns false, and drops the
  //! frame (counted as ProcessError), once this member failed or the group stopped.
  bool push(DecodedFrame frame);
  //! No more frames: waits until every pushed frame was delivered or dropped, then flushes the
  //! sink. Throws std::runtime_error with the reason when this member failed (its frames then
  //! counted as dropped) or a push was refused because the group stopped (after the flush), and
  //! SinkError when the flush fails.
  void finish();

  struct State;   // the member as the process thread sees it

 private:
  friend class BatchGroup;
  Member(std::shared_ptr<Shared> group, std::shared_ptr<State> state);
  std::shared_ptr<Shared> group_;
  std::shared_ptr<State> state_;
};

}  // namespace framefuse
