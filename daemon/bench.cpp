#include "daemon/bench.hpp"

#include <spdlog/fmt/fmt.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "pipeline/util/text_escape.hpp"
#include "pipeline/decode/video_source.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/runtime/pipeline_runner.hpp"
#include "pipeline/workloads.hpp"

namespace framefuse::daemon {

namespace {

//! Stream `i` of the benchmark as a pipeline: the clip looped up to `frames`, null sink.
PipelineSpec bench_pipeline(const BenchOptions& o, int i) {
  PipelineSpec p;
  p.name = fmt::format("bench-{}", i);
  p.source.uri = o.clip;
  p.source.loop = true;
  p.source.max_frames = o.frames;
  p.decoder = o.decoder;
  p.outputs = {workloads::classify_spec(), workloads::detect_spec()};
  p.sink.kind = SinkKind::Null;
  return p;
}

//! Process CPU time (user + system, seconds) and peak RSS (MiB) so far.
struct Usage {
  double cpu_s = 0, peak_rss_mib = 0;
};

Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return {seconds(u.ru_utime) + seconds(u.ru_stime), double(u.ru_maxrss) / 1024.0};   // ru_maxrss: KiB
}

//! Runs `phase` (which returns the frames it handled) and times it: wall, CPU, peak RSS.
template <class F>
PhaseResult measure(F&& phase) {
  const Usage before = usage_now();
  const auto t0 = std::chrono::steady_clock::now();
  PhaseResult r;
  r.frames = phase(r);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Usage after = usage_now();
  r.cpu_s = after.cpu_s - before.cpu_s;
  r.peak_rss_mib = after.peak_rss_mib;
  return r;
}

//! Phase 1: each stream a VideoSource decoding as its runner would (decoder, device, a frame pool
//! of the runner's default size); frames are dropped as soon as they are read.
uint64_t decode_only(const BenchOptions& o, const DeviceSpec& device, PhaseResult& r) {
  const int streams = o.streams;
  std::vector<uint64_t> frames(streams, 0);
  std::vector<std::exception_ptr> errors(streams);
  std::vector<DecoderKind> used(streams, DecoderKind::Cpu);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < streams; ++i) {
      threads.emplace_back([&, i] {
        try {
          const PipelineSpec spec = bench_pipeline(o, i);
          VideoSource source(spec.source, spec.name, decode_options(spec, device));
          source.open();
          while (source.read()) ++frames[i];
          used[i] = source.decoder();
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  r.decoder = used[0] == DecoderKind::Nvdec ? "nvdec" : "cpu";
  uint64_t total = 0;
  for (const uint64_t n : frames) total += n;
  return total;
}

}  // namespace

double latency_quantile(const std::array<uint64_t, kLatencyBuckets.size() + 1>& counts, double q) {
  uint64_t total = 0;
  for (const uint64_t c : counts) total += c;
  if (total == 0) return 0;
  const auto rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * double(total))));
  uint64_t seen = 0;
  for (size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    seen += counts[i];
    if (seen >= rank) return kLatencyBuckets[i];
  }
  return std::numeric_limits<double>::infinity();
}

BenchResult run_bench(const BenchOptions& o) {
  if (!std::filesystem::is_regular_file(o.clip))
    throw std::invalid_argument(fmt::format("--clip: '{}': no such file", o.clip));
  BenchResult result;
  result.options = o;
  const DeviceSpec device = resolve_device(o.device, probe_cuda());
  result.device = to_string(device);
  if (o.decoder == DecoderKind::Nvdec && device.kind != DeviceKind::Cuda)
    throw std::invalid_argument(fmt::format("--decoder nvdec needs a CUDA device, the device is {}", result.device));

  // Untimed warm-up: the process's CUDA context, NVDEC and FFmpeg start-up would otherwise land in
  // whichever phase runs first.
  {
    const PipelineSpec spec = bench_pipeline(o, 0);
    VideoSource source(spec.source, spec.name, decode_options(spec, device));
    source.open();
    for (int i = 0; i < 8 && source.read(); ++i) {
    }
  }
  result.decode = measure([&](PhaseResult& r) { return decode_only(o, device, r); });

  std::array<uint64_t, kLatencyBuckets.size() + 1> latency{};
  result.pipeline = measure([&](PhaseResult& r) {
    std::vector<std::unique_ptr<PipelineRunner>> runners;
    for (int i = 0; i < o.streams; ++i)
      runners.push_back(std::make_unique<PipelineRunner>(bench_pipeline(o, i), device));
    for (auto& runner : runners) runner->start();
    uint64_t total = 0;
    for (auto& runner : runners) {
      runner->join();   // file sources end after max_frames; join returns once the queue drained
      const PipelineSnapshot s = runner->stats().snapshot();
      if (s.state == SourceState::Failed)
        throw std::runtime_error(fmt::format("pipeline '{}': {}", runner->spec().name, s.last_error));
      total += s.frames_processed;
      for (size_t b = 0; b < latency.size(); ++b) latency[b] += s.latency_counts[b];
      r.decoder = s.decoder;
      result.frame = s.frame;
    }
    return total;
  });
  result.latency_p50_s = latency_quantile(latency, 0.50);
  result.latency_p99_s = latency_quantile(latency, 0.99);
  return result;
}

namespace {

std::string latency_text(double seconds) {
  if (std::isinf(seconds)) return fmt::format("> {:g} ms", 1e3 * kLatencyBuckets.back());
  return fmt::format("<= {:g} ms", 1e3 * seconds);
}

std::string phase_row(const char* name, const PhaseResult& p, int streams) {
  return fmt::format("{:<16}{:>8}{:>10.3f}{:>12.1f}{:>12.1f}{:>14.2f}{:>15.1f}  {}\n", name, p.frames, p.seconds,
                     p.fps(), p.fps() / streams, p.cpu_ms_per_frame(), p.peak_rss_mib, p.decoder);
}

std::string phase_json(const PhaseResult& p, int streams) {
  return fmt::format(R"({{"frames": {}, "seconds": {}, "fps": {}, "fps_per_stream": {}, "cpu_ms_per_frame": {}, )"
                     R"("peak_rss_mib": {}, "decoder": {})",
                     p.frames, json_number(p.seconds), json_number(p.fps()), json_number(p.fps() / streams),
                     json_number(p.cpu_ms_per_frame()), json_number(p.peak_rss_mib), json_string(p.decoder));
}

}  // namespace

std::string format_bench_table(const BenchResult& r) {
  const int n = r.options.streams;
  std::string out = fmt::format(
      "framefused bench: {} ({}), {} stream(s) x {} frames, device {}\n"
      "outputs: classify (shorter side 256, center crop 224, ImageNet mean/std, CHW f32) + "
      "detect (letterbox 640x640, /255, CHW f16), null sink\n\n",
      r.options.clip, r.frame, n, r.options.frames, r.device);
  out += fmt::format("{:<16}{:>8}{:>10}{:>12}{:>12}{:>14}{:>15}  {}\n", "phase", "frames", "seconds", "fps total",
                     "fps/stream", "CPU ms/frame", "peak RSS MiB", "decoder");
  out += phase_row("decode ceiling", r.decode, n);
  out += phase_row("pipeline", r.pipeline, n);
  out += fmt::format("pipeline latency, decode -> output (histogram bucket bounds): p50 {}, p99 {}\n",
                     latency_text(r.latency_p50_s), latency_text(r.latency_p99_s));
  out += fmt::format("\npipeline / decode ceiling = {:.1f} %\n", 100 * r.ratio());
  return out;
}

std::string format_bench_json(const BenchResult& r) {
  const int n = r.options.streams;
  return fmt::format(
      "{{\"clip\": {}, \"frame\": {}, \"streams\": {}, \"frames_per_stream\": {}, \"device\": {}, "
      "\"outputs\": [\"classify\", \"detect\"], \"sink\": \"null\",\n"
      " \"decode\": {}}},\n"
      " \"pipeline\": {}, \"latency_p50_ms\": {}, \"latency_p99_ms\": {}, "
      "\"latency_resolution\": \"histogram bucket upper bound; null = above {} ms\"}},\n"
      " \"ratio\": {}}}\n",
      json_string(r.options.clip), json_string(r.frame), n, r.options.frames, json_string(r.device),
      phase_json(r.decode, n), phase_json(r.pipeline, n), json_number(1e3 * r.latency_p50_s),
      json_number(1e3 * r.latency_p99_s), 1e3 * kLatencyBuckets.back(), json_number(r.ratio()));
}

}  // namespace framefuse::daemon
