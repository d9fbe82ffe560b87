#include "daemon/metrics/prometheus.hpp"

#include <cmath>
#include <initializer_list>
#include <spdlog/fmt/fmt.h>
#include <utility>

#include "pipeline/util/text_escape.hpp"

namespace framefuse::daemon {
namespace {

using Label = std::pair<const char*, std::string_view>;

//! Go's ParseFloat spelling of special values; shortest round-trip digits otherwise.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}
std::string number(uint64_t v) { return fmt::format("{}", v); }
std::string number(int64_t v) { return fmt::format("{}", v); }

class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  template <class T>
  void sample(std::string_view name, std::initializer_list<Label> labels, T value) {
    out_ += name;
    if (labels.size() > 0) {
      char sep = '{';
      for (const auto& [key, val] : labels) {
        fmt::format_to(std::back_inserter(out_), "{}{}=\"{}\"", sep, key, prometheus_label_value(val));
        sep = ',';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += number(value);
    out_ += '\n';
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

//! One histogram family, the `field` of every pipeline.
void render_histogram(Exposition& e, std::span<const PipelineSnapshot> pipelines, const char* name, const char* help,
                      LatencyHistogram PipelineSnapshot::*field) {
  e.family(name, "histogram", help);
  for (const auto& p : pipelines) {
    const LatencyHistogram& h = p.*field;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
      cumulative += h.counts[i];
      e.sample(fmt::format("{}_bucket", name), {{"pipeline", p.name}, {"le", number(kLatencyBuckets[i])}},
               cumulative);
    }
    cumulative += h.counts.back();
    e.sample(fmt::format("{}_bucket", name), {{"pipeline", p.name}, {"le", "+Inf"}}, cumulative);
    e.sample(fmt::format("{}_sum", name), {{"pipeline", p.name}}, h.sum_s);
    e.sample(fmt::format("{}_count", name), {{"pipeline", p.name}}, cumulative);
  }
}

//! Control statistics and loops (pipelines with `control:`); the families appear only when some
//! pipeline reports control.
void render_control(Exposition& e, std::span<const PipelineSnapshot> pipelines) {
  bool any = false;
  for (const auto& p : pipelines) any |= p.control.has_value();
  if (!any) return;
  const auto per_pipeline = [&](const char* name, const char* help, auto value) {
    e.family(name, "gauge", help);
    for (const auto& p : pipelines)
      if (p.control) e.sample(name, {{"pipeline", p.name}}, value(*p.control));
  };
  per_pipeline("framefuse_frame_luma_mean", "Mean luma (0..1) of the last controlled frame, on its 128x72 thumbnail.",
               [](const ControlSnapshot& c) { return c.mean_luma; });
  per_pipeline("framefuse_frame_motion", "Mean absolute luma change (0..1) of the last controlled frame against the one before.",
               [](const ControlSnapshot& c) { return c.motion; });
  const auto per_output = [&](const char* name, const char* help, auto value) {
    e.family(name, "gauge", help);
    for (const auto& p : pipelines)
      if (p.control)
        for (const auto& o : p.control->outputs) e.sample(name, {{"pipeline", p.name}, {"output", o.name}}, value(o));
  };
  using Out = ControlSnapshot::Output;
  per_output("framefuse_output_gain", "Gain auto_gain applies to the output's pixels (1 = none).",
             [](const Out& o) { return o.gain; });
  per_output("framefuse_output_luma_mean", "Mean luma (0..1) of the output's crop window times its gain.",
             [](const Out& o) { return o.mean_luma; });
  per_output("framefuse_output_roi_x_pixels", "Left edge of the output's crop window in the frame.",
             [](const Out& o) { return int64_t{o.x}; });
  per_output("framefuse_output_roi_y_pixels", "Top edge of the output's crop window in the frame.",
             [](const Out& o) { return int64_t{o.y}; });
  per_output("framefuse_output_roi_width_pixels", "Width of the output's crop window.",
             [](const Out& o) { return int64_t{o.w}; });
  per_output("framefuse_output_roi_height_pixels", "Height of the output's crop window.",
             [](const Out& o) { return int64_t{o.h}; });
  const auto per_condition = [&](const char* name, const char* type, const char* help, auto value) {
    e.family(name, type, help);
    for (const auto& p : pipelines)
      if (p.control)
        for (size_t c = 0; c < control::Health::kConditions; ++c)
          e.sample(name, {{"pipeline", p.name}, {"condition", control::kHealthNames[c]}}, value(*p.control, c));
  };
  per_condition("framefuse_health", "gauge", "1 while the picture-health condition is raised, else 0.",
                [](const ControlSnapshot& c, size_t i) { return uint64_t{c.health[i]}; });
  per_condition("framefuse_health_events_total", "counter", "Times the picture-health condition was raised.",
                [](const ControlSnapshot& c, size_t i) { return c.health_events[i]; });
}

//! The process itself, under the names Prometheus client libraries give it (dashboards and alerts
//! written for any exporter read them).
void render_process(Exposition& e, const ProcessStats& p) {
  e.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
  e.sample("process_cpu_seconds_total", {}, p.cpu_seconds);
  e.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  e.sample("process_resident_memory_bytes", {}, p.resident_bytes);
  e.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  e.sample("process_virtual_memory_bytes", {}, p.virtual_bytes);
  e.family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
  e.sample("process_start_time_seconds", {}, p.start_time_unix_s);
  e.family("process_open_fds", "gauge", "Number of open file descriptors.");
  e.sample("process_open_fds", {}, p.open_fds);
  if (p.max_fds > 0) {
    e.family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
    e.sample("process_max_fds", {}, p.max_fds);
  }
}

//! Memory of the CUDA devices in use; the families appear only when there are some.
void render_gpus(Exposition& e, std::span<const GpuMemory> gpus) {
  if (gpus.empty()) return;
  const auto per_gpu = [&](const char* name, const char* help, auto value) {
    e.family(name, "gauge", help);
    for (const auto& g : gpus) e.sample(name, {{"device", fmt::format("cuda:{}", g.device)}}, value(g));
  };
  per_gpu("framefuse_gpu_memory_used_bytes", "Device memory in use (all processes), bytes.",
          [](const GpuMemory& g) { return g.used_bytes; });
  per_gpu("framefuse_gpu_memory_total_bytes", "Device memory in all, bytes.",
          [](const GpuMemory& g) { return g.total_bytes; });
}

//! Hybrid decode: what the cores and each GPU's NVDEC carry.
void render_decode(Exposition& e, std::span<const DecodeLoad> loads) {
  if (loads.empty()) return;
  const auto per_decoder = [&](const char* name, const char* help, auto value) {
    e.family(name, "gauge", help);
    for (const auto& l : loads) e.sample(name, {{"decoder", l.decoder}, {"device", l.device}}, value(l));
  };
  per_decoder("framefuse_decode_capacity_fps",
              "What the decoder decodes (config decode:), 1080p H.264 frames per second.",
              [](const DecodeLoad& l) { return l.capacity_fps; });
  per_decoder("framefuse_decode_paced_fps",
              "What its paced streams (cameras, realtime files) need of it, 1080p H.264 frames per second "
              "(other codecs at their cost there).",
              [](const DecodeLoad& l) { return l.paced_fps; });
  per_decoder("framefuse_decode_unpaced_streams", "Files it decodes as fast as it can.",
              [](const DecodeLoad& l) { return uint64_t(l.unpaced_streams); });
}

//! Batch groups (`batching:`); the families appear only when there are some.
void render_batch_groups(Exposition& e, std::span<const BatchGroupSnapshot> groups) {
  if (groups.empty()) return;
  const auto per_group = [&](const char* name, const char* type, const char* help, auto value) {
    e.family(name, type, help);
    for (const auto& g : groups) e.sample(name, {{"group", g.name}}, value(g));
  };
  using G = BatchGroupSnapshot;
  per_group("framefuse_batch_launches_total", "counter", "Batches the group submitted, each one fused launch over its members' frames.",
            [](const G& g) { return g.batches; });
  per_group("framefuse_batch_frames_total", "counter", "Frames in the group's batches.",
            [](const G& g) { return g.frames; });
  per_group("framefuse_batch_fill_ratio", "gauge", "Mean frames per batch over max_batch since the group started (0 before a batch).",
            [](const G& g) { return g.mean_fill(); });
  per_group("framefuse_batch_wait_timeouts_total", "counter", "Batches that left short of max_batch because max_wait ran out.",
            [](const G& g) { return g.wait_timeouts; });
  per_group("framefuse_batch_max_frames", "gauge", "Frames a batch of the group holds at most (max_batch).",
            [](const G& g) { return int64_t{g.max_batch}; });
  per_group("framefuse_batch_queue_depth", "gauge", "Frames waiting in the group for a batch.",
            [](const G& g) { return g.queue_depth; });
  per_group("framefuse_batch_members", "gauge", "Pipelines attached to the group.",
            [](const G& g) { return g.members; });
}

}  // namespace

std::string render_metrics(const DaemonSnapshot& d, std::span<const PipelineSnapshot> pipelines) {
  Exposition e;
  e.family("framefuse_build_info", "gauge", "Build of the running framefused; the value is always 1.");
  e.sample("framefuse_build_info", {{"version", d.version}}, uint64_t{1});
  e.family("framefuse_uptime_seconds", "gauge", "Seconds since the daemon started.");
  e.sample("framefuse_uptime_seconds", {}, d.uptime_s);
  render_process(e, d.process);
  e.family("framefuse_ready", "gauge", "1 when the daemon reports ready (as /readyz), else 0.");
  e.sample("framefuse_ready", {}, uint64_t{d.ready});
  e.family("framefuse_config_reloads_total", "counter", "Configuration reloads by result.");
  e.sample("framefuse_config_reloads_total", {{"result", "success"}}, d.reloads_ok);
  e.sample("framefuse_config_reloads_total", {{"result", "failure"}}, d.reloads_failed);
  e.family("framefuse_config_last_reload_success", "gauge", "1 when the last configuration (re)load was applied.");
  e.sample("framefuse_config_last_reload_success", {}, uint64_t{d.last_reload_ok});
  e.family("framefuse_config_last_reload_timestamp_seconds", "gauge",
           "Unix time of the last configuration (re)load attempt.");
  e.sample("framefuse_config_last_reload_timestamp_seconds", {}, d.last_reload_unix_s);

  // One family per block: the exposition format wants a family's samples together.
  const auto per_pipeline = [&](const char* name, const char* type, const char* help, auto value) {
    e.family(name, type, help);
    for (const auto& p : pipelines) e.sample(name, {{"pipeline", p.name}}, value(p));
  };
  per_pipeline("framefuse_frames_decoded_total", "counter", "Frames decoded from the source.",
               [](const PipelineSnapshot& p) { return p.frames_decoded; });
  per_pipeline("framefuse_frames_processed_total", "counter", "Frames run through every output and handed to the sink.",
               [](const PipelineSnapshot& p) { return p.frames_processed; });

  e.family("framefuse_frames_dropped_total", "counter", "Frames dropped, by reason.");
  for (const auto& p : pipelines)
    for (size_t r = 0; r < kDropReasonNames.size(); ++r)
      e.sample("framefuse_frames_dropped_total", {{"pipeline", p.name}, {"reason", kDropReasonNames[r]}}, p.dropped[r]);

  per_pipeline("framefuse_decode_errors_total", "counter", "Packets or frames the decoder rejected.",
               [](const PipelineSnapshot& p) { return p.decode_errors; });
  per_pipeline("framefuse_source_reconnects_total", "counter", "Times the source was reopened after a failure or stall.",
               [](const PipelineSnapshot& p) { return p.reconnects; });

  e.family("framefuse_source_state", "gauge", "Source state: 1 for the current state, 0 for the others.");
  for (const auto& p : pipelines)
    for (size_t s = 0; s < kSourceStateNames.size(); ++s)
      e.sample("framefuse_source_state", {{"pipeline", p.name}, {"state", kSourceStateNames[s]}},
               uint64_t{static_cast<size_t>(p.state) == s});

  per_pipeline("framefuse_queue_depth", "gauge", "Decoded frames waiting to be processed.",
               [](const PipelineSnapshot& p) { return p.queue_depth; });

  e.family("framefuse_last_frame_age_seconds", "gauge",
           "Seconds since the last decoded frame; absent before the first frame.");
  for (const auto& p : pipelines)
    if (p.last_frame_age_s >= 0) e.sample("framefuse_last_frame_age_seconds", {{"pipeline", p.name}}, p.last_frame_age_s);

  per_pipeline("framefuse_frames_per_second", "gauge", "Processed frames per second over the last interval.",
               [](const PipelineSnapshot& p) { return p.fps; });
  per_pipeline("framefuse_pool_frames_in_use", "gauge", "Decode frame pool slots currently leased.",
               [](const PipelineSnapshot& p) { return p.pool_in_use; });
  per_pipeline("framefuse_pool_frames", "gauge", "Decode frame pool slots at most (capacity).",
               [](const PipelineSnapshot& p) { return p.pool_capacity; });
  per_pipeline("framefuse_nvdec_fallbacks_total", "counter", "Times `decoder: auto` gave NVDEC up for software decoding.",
               [](const PipelineSnapshot& p) { return p.nvdec_fallbacks; });
  e.family("framefuse_decoder", "gauge", "Decoder in use: 1 for the current one, 0 for the other (both 0 before the source opened).");
  for (const auto& p : pipelines)
    for (const char* kind : {"nvdec", "cpu"})
      e.sample("framefuse_decoder", {{"pipeline", p.name}, {"decoder", kind}}, uint64_t{p.decoder == kind});
  e.family("framefuse_source_codec_info", "gauge",
           "The stream's codec and profile, e.g. hevc Main 10; always 1, once the source opened.");
  for (const auto& p : pipelines)
    if (!p.codec.empty())
      e.sample("framefuse_source_codec_info", {{"pipeline", p.name}, {"codec", p.codec}}, uint64_t{1});
  e.family("framefuse_nvdec_sessions", "gauge", "Pipelines currently decoding with NVDEC.");
  e.sample("framefuse_nvdec_sessions", {}, nvdec_sessions(pipelines));
  render_gpus(e, d.gpus);
  render_decode(e, d.decode);
  render_batch_groups(e, d.batch_groups);
  render_histogram(e, pipelines, "framefuse_decode_to_output_seconds",
                   "Time from a frame leaving the decoder to its outputs being written.", &PipelineSnapshot::latency);
  render_histogram(e, pipelines, "framefuse_queue_wait_seconds",
                   "Part of decode_to_output before the frame's processing was enqueued (waiting in the queue "
                   "and for a free executor slot).",
                   &PipelineSnapshot::queue_wait);
  render_histogram(e, pipelines, "framefuse_submit_seconds",
                   "Part of decode_to_output in the call that enqueued the frame's processing (host time launching "
                   "it: a tail here means the launch blocked, e.g. in the GPU driver).",
                   &PipelineSnapshot::submit);
  per_pipeline("framefuse_submit_cpu_seconds_total", "counter",
               "Host CPU time (the submitting thread's) of the calls counted in framefuse_submit_seconds; a "
               "batch's call is shared among its frames. Divided by framefuse_submit_seconds_count: CPU per frame.",
               [](const PipelineSnapshot& p) { return p.submit_cpu_s; });
  render_control(e, pipelines);
  return e.take();
}

}  // namespace framefuse::daemon
