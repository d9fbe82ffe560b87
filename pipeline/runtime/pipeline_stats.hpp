#pragma once
//! Counters a running pipeline publishes. Written by the pipeline's threads with relaxed atomics,
//! read by the daemon (metrics, /status, logs) through snapshot(): no locks on the frame path.
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace framefuse {

enum class SourceState : uint8_t { Connecting, Streaming, Stalled, Backoff, Finished, Failed };
inline constexpr std::array<const char*, 6> kSourceStateNames = {"connecting", "streaming", "stalled",
                                                                  "backoff",    "finished",  "failed"};

enum class DropReason : uint8_t { QueueFull, DecodeError, ProcessError };
inline constexpr std::array<const char*, 3> kDropReasonNames = {"queue_full", "decode_error", "process_error"};

//! Upper bounds (seconds) of the decode -> output latency histogram; +Inf is implicit.
inline constexpr std::array<double, 12> kLatencyBuckets = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                           0.05,   0.1,   0.2,   0.5,   1.0,  2.0};

struct PipelineSnapshot {
  std::string name;
  std::string device;                 //!< "cpu", "cuda:0"
  std::string source;                 //!< redacted URI
  SourceState state = SourceState::Connecting;
  uint64_t frames_decoded = 0, frames_processed = 0, decode_errors = 0, reconnects = 0;
  std::array<uint64_t, kDropReasonNames.size()> dropped{};
  int64_t queue_depth = 0;
  double last_frame_age_s = -1;       //!< seconds since the last decoded frame; -1 before the first
  double fps = 0;                     //!< processed frames per second over the last interval
  std::array<uint64_t, kLatencyBuckets.size() + 1> latency_counts{};   //!< per bucket, last = +Inf
  double latency_sum_s = 0;
  std::string frame;                  //!< "1920x1080 yuv420p bt709/limited", empty before the first
  std::string last_error;             //!< redacted
};

class PipelineStats {
 public:
  std::atomic<uint64_t> frames_decoded{0}, frames_processed{0}, decode_errors{0}, reconnects{0};
  std::array<std::atomic<uint64_t>, kDropReasonNames.size()> dropped{};
  std::atomic<int64_t> queue_depth{0};
  std::atomic<uint8_t> state{static_cast<uint8_t>(SourceState::Connecting)};
  std::atomic<int64_t> last_frame_ns{0};   //!< steady_clock time of the last decoded frame, 0 = none

  void set_state(SourceState s) { state.store(static_cast<uint8_t>(s), std::memory_order_relaxed); }
  void drop(DropReason r) { dropped[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed); }
  //! Records one decode -> output latency.
  void observe_latency(double seconds);

  //! Copies counters; `fps` is the processed rate over the last >= 1 s between snapshots.
  PipelineSnapshot snapshot();

  //! Descriptive strings, set rarely (open, re-setup, error); guarded by a mutex inside.
  void set_frame(std::string frame);
  void set_error(std::string error);

 private:
  std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> latency_counts_{};
  std::atomic<uint64_t> latency_sum_ns_{0};
  struct Text {
    std::mutex mu;
    std::string frame, error;
  };
  Text text_;
  int64_t fps_last_ns_ = 0;          // guarded by text_.mu
  uint64_t fps_last_frames_ = 0;
  double fps_ = 0;
};

}  // namespace framefuse
