#pragma once
//! Counters a running pipeline publishes. Written by the pipeline's threads with relaxed atomics,
//! read by the daemon (metrics, /status, logs) through snapshot(): no locks on the frame path.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/util/clock.hpp"

#include "pipeline/control/control_step.hpp"

namespace framefuse {

enum class SourceState : uint8_t { Connecting, Streaming, Stalled, Backoff, Finished, Failed };
inline constexpr std::array<const char*, 6> kSourceStateNames = {"connecting", "streaming", "stalled",
                                                                  "backoff",    "finished",  "failed"};

//! PoolExhausted: a live source's frame pool had no free slot, so the oldest queued frame went.
//! GroupFull: a live member's batch group (runtime/batch_group.hpp) had no room, so its oldest frame there went.
//! Shutdown: still queued when a stop could wait no longer (the daemon's drain_timeout).
enum class DropReason : uint8_t { QueueFull, DecodeError, ProcessError, PoolExhausted, GroupFull, Shutdown };
inline constexpr std::array<const char*, 6> kDropReasonNames = {"queue_full",     "decode_error", "process_error",
                                                                "pool_exhausted", "group_full",   "shutdown"};

//! Upper bounds (seconds) of the decode -> output latency histogram; +Inf is implicit. Fine below
//! 5 ms, where a GPU pipeline's frames land (0.1-0.3 ms unloaded) and where real-time targets lie
//! (1-5 ms): a quantile there is known to 0.1-1 ms.
inline constexpr std::array<double, 22> kLatencyBuckets = {
    0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004,
    0.005,  0.01,   0.02,   0.05,   0.1,     0.2,   0.5,    1.0,   2.0,    5.0,   10.0};

//! Frames per bucket of kLatencyBuckets (the last: above them all) and the sum of their times.
struct LatencyHistogram {
  std::array<uint64_t, kLatencyBuckets.size() + 1> counts{};
  double sum_s = 0;
  uint64_t count() const;
  //! `total` (sum_s, or anything summed over the same observations) per observation; none without any.
  std::optional<double> per_observation(double total) const;
  //! The mean observed time, seconds; none without observations.
  std::optional<double> mean_s() const { return per_observation(sum_s); }
  //! What was observed after `earlier` (a snapshot of the same counters taken before).
  LatencyHistogram since(const LatencyHistogram& earlier) const;
  LatencyHistogram& operator+=(const LatencyHistogram& other);
};

//! One submit call of a frame's (or a batch's) processing: when it began and returned, and the
//! host CPU it used (the calling thread's), seconds.
struct SubmitCall {
  std::chrono::steady_clock::time_point begun, returned;
  double cpu_s = 0;
  //! Calls `submit()` and times it; its exceptions pass through.
  template <class F>
  static SubmitCall time(F&& submit) {
    SubmitCall c;
    c.begun = std::chrono::steady_clock::now();
    const double cpu_before_us = thread_cpu_us();
    submit();
    c.cpu_s = 1e-6 * (thread_cpu_us() - cpu_before_us);
    c.returned = std::chrono::steady_clock::now();
    return c;
  }
};

//! The control loops' view of the latest frame they completed (pipelines with `control:`).
struct ControlSnapshot {
  uint64_t frames = 0;                //!< control iterations since the last (re)setup
  double mean_luma = 0, luma_variance = 0, motion = 0, black_fraction = 0, white_fraction = 0;   //!< whole frame
  double scene_distance = 0;          //!< histogram distance behind scene-change detection
  //! Per control::Health condition (control::kHealthNames): raised now / rises since the pipeline started.
  std::array<bool, control::Health::kConditions> health{};
  std::array<uint64_t, control::Health::kConditions> health_events{};
  struct Output {
    std::string name;
    double gain = 1, mean_luma = 0, motion = 0;
    int32_t x = 0, y = 0, w = 0, h = 0;   //!< crop window, frame pixels
  };
  std::vector<Output> outputs;
};

struct PipelineSnapshot {
  std::string name;
  std::string device;                 //!< "cpu", "cuda:0"
  std::string source;                 //!< redacted URI
  SourceState state = SourceState::Connecting;
  uint64_t frames_decoded = 0, frames_processed = 0, decode_errors = 0, reconnects = 0;
  std::array<uint64_t, kDropReasonNames.size()> dropped{};
  int64_t queue_depth = 0;
  int64_t pool_in_use = 0, pool_capacity = 0;   //!< decode frame pool slots leased / at most
  std::string decoder;                //!< "nvdec", "cpu"; empty before the source opened
  std::string codec;                  //!< "hevc Main 10" (VideoSource::codec()); empty before the source opened
  uint64_t nvdec_fallbacks = 0;       //!< times `decoder: auto` gave NVDEC up for software
  double last_frame_age_s = -1;       //!< seconds since the last decoded frame; -1 before the first
  double fps = 0;                     //!< processed frames per second over the last interval
  //! Seconds from the first decoded frame to the last output written (0 before an output): the
  //! window a whole-run rate divides by, whenever the pipeline started and however long it then ran.
  double active_s = 0;
  LatencyHistogram latency;           //!< decode -> outputs written
  //! decode -> submit: the part of `latency` a frame waited on the host (in the queue, and for a
  //! free slot of the executor's ring) before its processing was enqueued.
  LatencyHistogram queue_wait;
  //! The submit call that enqueued it (its batch's, in a batch group): the part of `latency` the
  //! host spent launching the frame's processing (graph launch, driver).
  LatencyHistogram submit;
  //! Host CPU time (the submitting thread's) of those submit calls, summed over the frames counted
  //! in `submit`, seconds; a batch's call is shared among its frames. Per frame: / submit.count().
  double submit_cpu_s = 0;
  std::string frame;                  //!< "1920x1080 yuv420p bt709/limited", empty before the first
  std::string last_error;             //!< redacted
  std::optional<ControlSnapshot> control;   //!< set once a control iteration completed
  std::vector<std::string> outputs;   //!< output names, in spec order (set by the owner of the spec)
  std::string sink_type;              //!< "npy", "shm", "null" (set by the owner of the spec)
  std::string sink_target;            //!< where the sink writes (sink_target()); empty for null
};

class PipelineStats {
 public:
  std::atomic<uint64_t> frames_decoded{0}, frames_processed{0}, decode_errors{0}, reconnects{0};
  std::array<std::atomic<uint64_t>, kDropReasonNames.size()> dropped{};
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> pool_in_use{0}, pool_capacity{0};
  std::atomic<uint64_t> nvdec_fallbacks{0};
  std::atomic<uint8_t> state{static_cast<uint8_t>(SourceState::Connecting)};
  std::atomic<int64_t> last_frame_ns{0};   //!< steady_clock time of the last decoded frame, 0 = none
  std::atomic<int64_t> first_frame_ns{0};  //!< steady_clock time of the first decoded frame, 0 = none

  void set_state(SourceState s) { state.store(static_cast<uint8_t>(s), std::memory_order_relaxed); }
  void drop(DropReason r) { dropped[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed); }
  //! Records one frame's decode -> output latency, the part of it before its submit and the
  //! submit call's, and the host CPU time of that call (its share of a batch's), seconds.
  void observe_latency(double decode_to_output_s, double queue_wait_s, double submit_s, double submit_cpu_s);
  //! observe_latency() of a frame decoded at `decoded_at` and enqueued by `call` (whose cpu_s is
  //! the frame's share of a batch's): the latency runs until the submit returned plus
  //! `device_seconds` where the executor measured them (from the iteration's start to its
  //! outputs), else until now on the host's clock.
  void observe_frame(std::chrono::steady_clock::time_point decoded_at, const SubmitCall& call,
                     std::optional<double> device_seconds);

  //! Copies counters; `fps` is the processed rate over the last >= 1 s between snapshots.
  PipelineSnapshot snapshot();

  //! Descriptive strings, set rarely (open, re-setup, error); guarded by a mutex inside.
  void set_frame(std::string frame);
  void set_error(std::string error);
  void set_decoder(std::string decoder);
  void set_codec(std::string codec);

  //! At (re)setup: the names of the controlled outputs, or none when the pipeline has no control.
  //! Health event totals carry over re-setups.
  void set_control_outputs(std::vector<std::string> names);
  //! Per frame: the latest control record (a copy under a mutex of its own).
  void set_control(const control::ControlRecord& record);

 private:
  //! LatencyHistogram's atomic counterpart: observe() from the process thread, load() from any.
  class AtomicHistogram {
   public:
    void observe(double seconds);
    LatencyHistogram load() const;

   private:
    std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> counts_{};
    std::atomic<uint64_t> sum_ns_{0};
  };
  AtomicHistogram latency_, queue_wait_, submit_;
  std::atomic<uint64_t> submit_cpu_ns_{0};
  std::atomic<int64_t> last_output_ns_{0};   //!< steady_clock time of the last observe_frame(), 0 = none
  struct Text {
    std::mutex mu;
    std::string frame, error, decoder, codec;
  };
  Text text_;
  struct Control {
    std::mutex mu;
    std::vector<std::string> names;
    std::optional<control::ControlRecord> record;
    std::array<uint64_t, control::Health::kConditions> events_before{};   //!< totals of earlier setups
  };
  Control control_;
  int64_t fps_last_ns_ = steady_now_ns();   // fps window starts at construction; guarded by text_.mu
  uint64_t fps_last_frames_ = 0;
  double fps_ = 0;
};

}  // namespace framefuse
