#include "pipeline/runtime/pipeline_stats.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>

namespace framefuse {

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const uint64_t c : counts) n += c;
  return n;
}

std::optional<double> LatencyHistogram::per_observation(double total) const {
  const uint64_t n = count();
  if (n == 0) return std::nullopt;
  return total / double(n);
}

LatencyHistogram LatencyHistogram::since(const LatencyHistogram& earlier) const {
  LatencyHistogram d;
  for (size_t i = 0; i < counts.size(); ++i) d.counts[i] = counts[i] - earlier.counts[i];
  d.sum_s = sum_s - earlier.sum_s;
  return d;
}

LatencyHistogram& LatencyHistogram::operator+=(const LatencyHistogram& other) {
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  sum_s += other.sum_s;
  return *this;
}

namespace {
//! Non-negative seconds as the nanoseconds the atomic sums count.
uint64_t to_ns(double seconds) { return static_cast<uint64_t>(std::max(seconds, 0.0) * 1e9); }
}  // namespace

void PipelineStats::AtomicHistogram::observe(double seconds) {
  size_t i = 0;
  while (i < kLatencyBuckets.size() && seconds > kLatencyBuckets[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(to_ns(seconds), std::memory_order_relaxed);
}

LatencyHistogram PipelineStats::AtomicHistogram::load() const {
  LatencyHistogram h;
  for (size_t i = 0; i < counts_.size(); ++i) h.counts[i] = counts_[i].load(std::memory_order_relaxed);
  h.sum_s = double(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return h;
}

void PipelineStats::observe_latency(double decode_to_output_s, double queue_wait_s, double submit_s,
                                    double submit_cpu_s) {
  latency_.observe(decode_to_output_s);
  queue_wait_.observe(queue_wait_s);
  submit_.observe(submit_s);
  submit_cpu_ns_.fetch_add(to_ns(submit_cpu_s), std::memory_order_relaxed);
}

void PipelineStats::observe_frame(std::chrono::steady_clock::time_point decoded_at, const SubmitCall& call,
                                  std::optional<double> device_seconds) {
  using Seconds = std::chrono::duration<double>;
  const auto now = std::chrono::steady_clock::now();
  observe_latency(device_seconds ? Seconds(call.returned - decoded_at).count() + *device_seconds
                                 : Seconds(now - decoded_at).count(),
                  Seconds(call.begun - decoded_at).count(), Seconds(call.returned - call.begun).count(), call.cpu_s);
  last_output_ns_.store(steady_ns(now), std::memory_order_relaxed);
}

void PipelineStats::set_frame(std::string frame) {
  std::lock_guard lock(text_.mu);
  text_.frame = std::move(frame);
}

void PipelineStats::set_error(std::string error) {
  std::lock_guard lock(text_.mu);
  text_.error = std::move(error);
}

void PipelineStats::set_control_outputs(std::vector<std::string> names) {
  std::lock_guard lock(control_.mu);
  if (control_.record) {
    for (size_t c = 0; c < control_.events_before.size(); ++c) control_.events_before[c] += control_.record->health_events[c];
  }
  control_.names = std::move(names);
  control_.record.reset();
}

void PipelineStats::set_control(const control::ControlRecord& record) {
  std::lock_guard lock(control_.mu);
  control_.record = record;
}

void PipelineStats::set_decoder(std::string decoder) {
  std::lock_guard lock(text_.mu);
  text_.decoder = std::move(decoder);
}

void PipelineStats::set_codec(std::string codec) {
  std::lock_guard lock(text_.mu);
  text_.codec = std::move(codec);
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
  s.pool_in_use = pool_in_use.load(std::memory_order_relaxed);
  s.pool_capacity = pool_capacity.load(std::memory_order_relaxed);
  s.nvdec_fallbacks = nvdec_fallbacks.load(std::memory_order_relaxed);
  const int64_t now = steady_now_ns();
  const int64_t last = last_frame_ns.load(std::memory_order_relaxed);
  s.last_frame_age_s = last > 0 ? double(now - last) * 1e-9 : -1.0;
  const int64_t first = first_frame_ns.load(std::memory_order_relaxed);
  const int64_t output = last_output_ns_.load(std::memory_order_relaxed);
  s.active_s = first > 0 && output > first ? double(output - first) * 1e-9 : 0.0;
  s.queue_wait = queue_wait_.load();   // first: observe_latency() adds to latency_ first, so the
  s.submit = submit_.load();           // parts never show more frames than the latency
  s.submit_cpu_s = double(submit_cpu_ns_.load(std::memory_order_relaxed)) * 1e-9;
  s.latency = latency_.load();
  {
    std::lock_guard lock(text_.mu);
    s.frame = text_.frame;
    s.last_error = text_.error;
    s.decoder = text_.decoder;
    s.codec = text_.codec;
    if (now - fps_last_ns_ >= 1'000'000'000) {   // refresh at most once a second, whoever asks
      fps_ = double(s.frames_processed - fps_last_frames_) / (double(now - fps_last_ns_) * 1e-9);
      fps_last_ns_ = now;
      fps_last_frames_ = s.frames_processed;
    }
    s.fps = fps_;
  }
  std::lock_guard lock(control_.mu);
  if (const auto& r = control_.record) {
    ControlSnapshot c;
    c.frames = r->iteration + 1;
    c.mean_luma = r->mean_luma;
    c.luma_variance = r->variance;
    c.motion = r->motion;
    c.black_fraction = r->black_fraction;
    c.white_fraction = r->white_fraction;
    c.scene_distance = r->scene_distance;
    for (size_t i = 0; i < c.health.size(); ++i) {
      c.health[i] = (r->health_flags >> i) & 1u;
      c.health_events[i] = control_.events_before[i] + r->health_events[i];
    }
    for (size_t k = 0; k < control_.names.size() && k < size_t(r->num_outputs); ++k) {
      const auto& o = r->out[k];
      c.outputs.push_back({control_.names[k], o.gain, o.mean_luma, o.motion, o.x, o.y, o.w, o.h});
    }
    s.control = std::move(c);
  }
  return s;
}

}  // namespace framefuse
