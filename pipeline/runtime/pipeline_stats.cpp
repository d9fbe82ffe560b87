#include "pipeline/runtime/pipeline_stats.hpp"

#include <chrono>
#include <mutex>

namespace framefuse {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void PipelineStats::observe_latency(double seconds) {
  size_t i = 0;
  while (i < kLatencyBuckets.size() && seconds > kLatencyBuckets[i]) ++i;
  latency_counts_[i].fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void PipelineStats::set_frame(std::string frame) {
  std::lock_guard lock(text_.mu);
  text_.frame = std::move(frame);
}

void PipelineStats::set_error(std::string error) {
  std::lock_guard lock(text_.mu);
  text_.error = std::move(error);
}

PipelineSnapshot PipelineStats::snapshot() {
  PipelineSnapshot s;
  s.state = static_cast<SourceState>(state.load(std::memory_order_relaxed));
  s.frames_decoded = frames_decoded.load(std::memory_order_relaxed);
  s.frames_processed = frames_processed.load(std::memory_order_relaxed);
  s.decode_errors = decode_errors.load(std::memory_order_relaxed);
  s.reconnects = reconnects.load(std::memory_order_relaxed);
  for (size_t i = 0; i < dropped.size(); ++i) s.dropped[i] = dropped[i].load(std::memory_order_relaxed);
  s.queue_depth = queue_depth.load(std::memory_order_relaxed);
  const int64_t now = now_ns();
  const int64_t last = last_frame_ns.load(std::memory_order_relaxed);
  s.last_frame_age_s = last > 0 ? double(now - last) * 1e-9 : -1.0;
  for (size_t i = 0; i < latency_counts_.size(); ++i) s.latency_counts[i] = latency_counts_[i].load(std::memory_order_relaxed);
  s.latency_sum_s = double(latency_sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  {
    std::lock_guard lock(text_.mu);
    s.frame = text_.frame;
    s.last_error = text_.error;
    if (now - fps_last_ns_ >= 1'000'000'000) {   // refresh at most once a second, whoever asks
      if (fps_last_ns_ > 0) fps_ = double(s.frames_processed - fps_last_frames_) / (double(now - fps_last_ns_) * 1e-9);
      fps_last_ns_ = now;
      fps_last_frames_ = s.frames_processed;
    }
    s.fps = fps_;
  }
  return s;
}

}  // namespace framefuse
