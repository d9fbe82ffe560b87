#include "daemon/bench.hpp"

#include <spdlog/fmt/fmt.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "config/schema.hpp"
#include "daemon/process_stats.hpp"
#include "pipeline/util/clock.hpp"
#include "pipeline/util/text_escape.hpp"
#include "pipeline/decode/video_source.hpp"
#include "pipeline/memory/frame_pool.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/runtime/pipeline_runner.hpp"
#include "pipeline/workloads.hpp"

#if FRAMEFUSE_HAVE_CUDA
#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#endif

namespace framefuse::daemon {

namespace {

//! Frames a paced stream may end late before it counts as not holding real time: a live source's
//! default queue (PipelineSpec::queue_depth).
constexpr double kLiveSlackFrames = 4;

//! Iterations in flight in the executor-alone runs: enough to keep the device busy.
constexpr int kEngineInFlight = 3;

//! Stream `i` of the benchmark as a pipeline: the clip looped up to `frames`, null sink (on CUDA its
//! outputs stay in device memory: make_executor()).
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

//! The software file decoders that `streams` bench streams share the host's cores among, as their
//! runners would (1 when NVDEC decodes): decode_options()'s `software_decoders`.
int shared_decoders(const BenchOptions& o, const DeviceSpec& device, int streams) {
  return decodes_file_in_software(bench_pipeline(o, 0), device) ? streams : 1;
}

//! `o` with every stream on `decoder`.
BenchOptions with_decoder(BenchOptions o, DecoderKind decoder) {
  o.decoder = decoder;
  return o;
}

//! The decoders streams used ("nvdec" or "cpu" each): "nvdec" when all used NVDEC, "nvdec 4 + cpu 4"
//! when hybrid decode spread them.
std::string decoder_mix(const std::vector<std::string>& used) {
  const auto nvdec = std::count(used.begin(), used.end(), "nvdec");
  const auto cpu = std::ssize(used) - nvdec;
  if (cpu == 0 || nvdec == 0) return cpu == 0 ? "nvdec" : "cpu";
  return fmt::format("nvdec {} + cpu {}", nvdec, cpu);
}

//! The `q` quantile of `v` (nearest rank below), 0 for none.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * double(v.size())))];
}

//! The process' resident set now, MiB, 0 where unreadable.
double rss_mib_now() { return double(resident_bytes()) / (1024.0 * 1024.0); }

//! GPU memory in use (cudaMemGetInfo, device `gpu` when >= 0) and the process RSS now.
StreamMemory memory_now(int gpu) {
  StreamMemory m;
  m.rss_mib = rss_mib_now();
  if (gpu >= 0) {
    const int32_t d = gpu;
    const auto g = gpu_memory(std::span(&d, 1));
    if (!g.empty()) m.gpu_mib = double(g[0].used_bytes) / (1024.0 * 1024.0);
  }
  return m;
}

//! Samples memory_now() every 20 ms from construction until stop(); then peak() is the most seen
//! and median() the median of the samples (GPU and RSS each): the steady state, where the peak
//! may be a moment of start-up. The heap's free pages go back to the system first, so what earlier
//! phases freed (a larger trial's pipelines) is not counted in this one.
class MemorySampler {
 public:
  explicit MemorySampler(int gpu) : gpu_(gpu) {
    release_free_heap();
    samples_.push_back(memory_now(gpu));
    thread_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        samples_.push_back(memory_now(gpu_));
      }
    });
  }
  StreamMemory peak() {
    stop();
    StreamMemory m = samples_.front();
    for (const auto& s : samples_) {
      m.gpu_mib = std::max(m.gpu_mib, s.gpu_mib);
      m.rss_mib = std::max(m.rss_mib, s.rss_mib);
    }
    return m;
  }
  StreamMemory median() {
    stop();
    std::vector<double> gpu, rss;
    for (const auto& s : samples_) {
      gpu.push_back(s.gpu_mib);
      rss.push_back(s.rss_mib);
    }
    return {quantile(gpu, 0.5), quantile(rss, 0.5)};
  }

 private:
  void stop() {
    if (!thread_.joinable()) return;
    thread_.request_stop();
    thread_.join();
  }
  const int gpu_;
  std::vector<StreamMemory> samples_;   // written by the thread until joined
  std::jthread thread_;
};

//! What per-stream memory is measured against: the most seen with `streams` streams (1: one
//! pipeline alone; 0: the process before any pipeline ran).
struct MemoryReference {
  StreamMemory memory;
  int streams = 0;
};

//! (`peak` with `streams` streams - the reference) / (`streams` - its streams): with a 1-stream
//! reference, memory per stream without what the process takes once.
StreamMemory per_stream(const StreamMemory& peak, const MemoryReference& ref, int streams) {
  const double n = std::max(1, streams - ref.streams);
  StreamMemory m;
  if (peak.gpu_mib >= 0 && ref.memory.gpu_mib >= 0) m.gpu_mib = (peak.gpu_mib - ref.memory.gpu_mib) / n;
  m.rss_mib = (peak.rss_mib - ref.memory.rss_mib) / n;
  return m;
}

//! Seconds of each paced stream whose latencies are left out: its pipeline sets up (executor,
//! graphs) while its first frames queue.
constexpr double kLatencySettleS = 1.0;

//! What N pipelines did, summed over them.
struct PipelinesRun {
  uint64_t frames = 0, dropped = 0;
  //! Decode -> output latencies, their waits before the submit and their submit calls; of paced
  //! runs only those after the first kLatencySettleS.
  LatencyHistogram latency, queue_wait, submit;
  //! Paced runs: decode -> output latencies of the frames processed once every stream had run
  //! kLatencySettleS, so no stream was still starting (opening its decoder, allocating, capturing
  //! graphs, which stalls the others' launches): the steady state of that many streams.
  LatencyHistogram latency_all_running;
  double submit_cpu_s = 0;   //!< host CPU of the submit calls of the frames in `submit`
  double steady_fps = 0;     //!< PhaseResult::steady_fps
  //! That per frame, microseconds (0 without frames).
  double submit_cpu_us() const { return 1e6 * submit.per_observation(submit_cpu_s).value_or(0); }
  std::string decoder, frame, codec;
  bool all_frames = true;   //!< every pipeline processed max_frames frames
  //! Paced sources: the most any stream's last frame came after its due time (first frame +
  //! (frames - 1) / fps), seconds; the first frame is seen by polling every 10 ms.
  double late_s = 0;
  int32_t together = 0;     //!< paced sources: LiveTrial::together
};

//! Runs `specs` (file sources, max_frames set) to their end, in parallel. Throws when one fails.
//! `fps` > 0: also measures how late paced streams ended (PipelinesRun::late_s), and leaves out
//! the latencies of each stream's first kLatencySettleS of frames (all count when a stream ends
//! before).
//! Software decoders of files share the host's cores among the members of `share` (the runners'
//! own share when null), as the daemon's pipelines do; with `balancer`, hybrid decode as the daemon's.
PipelinesRun run_pipelines(const std::vector<PipelineSpec>& specs, const DeviceSpec& device, double fps = 0,
                           DecoderShare* share = nullptr, DecodeBalancer* balancer = nullptr) {
  DecoderShare own;
  std::vector<std::unique_ptr<PipelineRunner>> runners;
  for (const auto& spec : specs)
    runners.push_back(std::make_unique<PipelineRunner>(spec, device, 0, nullptr, share ? share : &own, balancer));
  for (auto& runner : runners) runner->start();
  SteadyWindow window(runners.size(), [&](size_t i) {
    return std::pair{runners[i]->stats().frames_processed.load(std::memory_order_relaxed), runners[i]->done()};
  });
  std::vector<int64_t> first_ns(runners.size(), 0);
  // Each runner's counters once it processed its settling frames, and all runners' once every one
  // had (or had ended).
  std::vector<std::optional<PipelineSnapshot>> settled(runners.size()), all_running(runners.size());
  bool all_settled = false;
  const auto settle_frames = static_cast<uint64_t>(std::llround(fps * kLatencySettleS));
  for (bool all_done = false; fps > 0 && !all_done;) {
    all_done = true;
    bool every_settled = true;
    for (size_t i = 0; i < runners.size(); ++i) {
      PipelineStats& stats = runners[i]->stats();
      if (!first_ns[i] && stats.frames_decoded.load(std::memory_order_relaxed) > 0) first_ns[i] = steady_now_ns();
      if (!settled[i] && !runners[i]->done() && stats.frames_processed.load(std::memory_order_relaxed) >= settle_frames)
        settled[i] = stats.snapshot();
      every_settled = every_settled && (settled[i] || runners[i]->done());
      all_done = all_done && runners[i]->done();
    }
    if (every_settled && !all_settled) {
      all_settled = true;
      for (size_t i = 0; i < runners.size(); ++i)
        if (!runners[i]->done()) all_running[i] = runners[i]->stats().snapshot();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  PipelinesRun run;
  std::vector<int64_t> last_ns;
  std::vector<std::string> decoders;
  for (size_t i = 0; i < runners.size(); ++i) {
    PipelineRunner& runner = *runners[i];
    runner.join();   // file sources end after max_frames; join returns once the queue drained
    last_ns.push_back(runner.stats().last_frame_ns.load());
    const PipelineSnapshot s = runner.stats().snapshot();
    if (s.state == SourceState::Failed)
      throw std::runtime_error(fmt::format("pipeline '{}': {}", runner.spec().name, s.last_error));
    run.frames += s.frames_processed;
    for (const uint64_t d : s.dropped) run.dropped += d;
    const int64_t want = runner.spec().source.max_frames;
    if (int64_t(s.frames_processed) != want) run.all_frames = false;
    if (fps > 0 && first_ns[i]) {
      const double span = 1e-9 * double(runner.stats().last_frame_ns.load() - first_ns[i]);
      run.late_s = std::max(run.late_s, span - double(want - 1) / fps);
    }
    run.latency += settled[i] ? s.latency.since(settled[i]->latency) : s.latency;
    if (all_running[i]) run.latency_all_running += s.latency.since(all_running[i]->latency);
    run.queue_wait += settled[i] ? s.queue_wait.since(settled[i]->queue_wait) : s.queue_wait;
    run.submit += settled[i] ? s.submit.since(settled[i]->submit) : s.submit;
    run.submit_cpu_s += s.submit_cpu_s - (settled[i] ? settled[i]->submit_cpu_s : 0);
    decoders.push_back(s.decoder);
    run.frame = s.frame;
    run.codec = s.codec;
  }
  run.decoder = decoder_mix(decoders);
  if (fps > 0) run.together = due_together(last_ns, fps, 1e-3);
  run.steady_fps = window.stop();
  return run;
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
//! of the runner's default size, hybrid decode with `balancer`); frames are dropped as soon as they
//! are read.
uint64_t decode_only(const BenchOptions& o, const DeviceSpec& device, PhaseResult& r,
                     DecodeBalancer* balancer = nullptr) {
  const int streams = o.streams;
  std::vector<std::atomic<uint64_t>> frames(streams);
  std::vector<std::atomic<bool>> ended(streams);
  std::vector<std::exception_ptr> errors(streams);
  std::vector<std::string> used(streams);
  SteadyWindow window(size_t(streams), [&](size_t i) {
    return std::pair{frames[i].load(std::memory_order_relaxed), ended[i].load(std::memory_order_relaxed)};
  });
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < streams; ++i) {
      threads.emplace_back([&, i] {
        try {
          const PipelineSpec spec = bench_pipeline(o, i);
          DecodeOptions decode = decode_options(spec, device, shared_decoders(o, device, streams));
          decode.balancer = balancer;
          VideoSource source(spec.source, spec.name, decode);
          source.open();
          while (source.read()) frames[i].fetch_add(1, std::memory_order_relaxed);
          used[i] = decoder_name(source.decoder());
        } catch (...) {
          errors[i] = std::current_exception();
        }
        ended[i].store(true, std::memory_order_relaxed);
      });
    }
  }
  r.steady_fps = window.stop();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  r.decoder = decoder_mix(used);
  uint64_t total = 0;
  for (const auto& n : frames) total += n.load();
  return total;
}

#if FRAMEFUSE_HAVE_CUDA
//! Host CPU time of one thread_cpu_us() reading (the median of 11 runs of 2000 in a row): what
//! timing one call adds to it, taken off the per-submit times.
double timer_cost_us() {
  constexpr int kReadings = 2000;
  std::vector<double> runs;
  for (int r = 0; r < 11; ++r) {
    const double t0 = thread_cpu_us();
    double t = t0;
    for (int i = 0; i < kReadings; ++i) t = thread_cpu_us();
    runs.push_back((t - t0) / kReadings);
  }
  return quantile(runs, 0.5);
}

//! The executor alone on `frames` (all of one memory kind), `iterations` submits with the ring
//! full, each frame with an owner as the runner gives them, outputs left in the executor
//! (complete({})); CPU time counted inside submit() only, less `timer_us` (the reading's own cost).
//! `record_times`: also the device time of the upload and of the kernels (an event node between
//! them).
EngineResult engine_run(const DeviceSpec& device, const FrameInfo& info, const PipelineSpec& spec,
                        const std::vector<ops::ImageView>& frames, FrameMemory memory, bool host_outputs, bool graphs,
                        int iterations, bool record_times, double timer_us) {
  constexpr int kWarmup = 50;
  CudaExecutor exec(device.index, {.in_flight = kEngineInFlight,
                                   .graphs = graphs,
                                   .record_times = record_times,
                                   .host_outputs = host_outputs});
  const auto plans = make_output_plans(spec, info);
  exec.setup(info, make_color_params(spec.color, info), plans, 1);
  std::vector<IterationTimes> times;
  std::vector<double> latency_ms;
  int completed = 0;
  const auto complete = [&] {
    const Completion done = exec.complete({});
    if (completed++ >= kWarmup) {
      if (done.device_seconds) latency_ms.push_back(1e3 * *done.device_seconds);
      if (const auto t = exec.last_times()) times.push_back(*t);
    }
  };
  double cpu_us = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kWarmup + iterations; ++i) {
    if (i == kWarmup) t0 = std::chrono::steady_clock::now();
    if (exec.in_flight() == exec.max_in_flight()) complete();
    const ops::ImageView& view = frames[size_t(i) % frames.size()];
    const std::shared_ptr<const void> owner = std::make_shared<int>(i);
    const double before = thread_cpu_us();
    exec.submit({&view, 1}, {&memory, 1}, {&owner, 1});
    if (i >= kWarmup) cpu_us += thread_cpu_us() - before;
  }
  while (exec.in_flight() > 0) complete();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  EngineResult r;
  r.mode = graphs ? "graph" : "stream";
  r.memory = memory == FrameMemory::Device ? "device" : "pinned";
  r.outputs = host_outputs ? "host" : "device";
  r.iterations = iterations;
  r.submit_cpu_us = cpu_us / iterations - timer_us;
  r.fps = iterations / seconds;
  r.latency_p50_ms = quantile(latency_ms, 0.50);
  r.latency_p99_ms = quantile(latency_ms, 0.99);
  std::vector<double> upload_us, kernels_us;
  for (const auto& t : times) {
    if (t.uploaded) upload_us.push_back(1e3 * (t.input_ready - t.input_begin));
    kernels_us.push_back(1e3 * (t.ready - t.input_ready));
  }
  if (!upload_us.empty()) r.upload_us = quantile(upload_us, 0.5);
  r.kernels_us = quantile(kernels_us, 0.5);
  return r;
}

//! Graph replay vs stream launches of the same iteration, on frames of the clip in device memory
//! ("device": as NVDEC sources hand them on, finished) and in pinned memory (uploaded per frame, as software decoding leaves them).
std::vector<EngineResult> engine_bench(const BenchOptions& o, const DeviceSpec& device, double timer_us) {
  constexpr int kFrames = 8, kIterations = 2000, kTimed = 500;
  PipelineSpec spec = bench_pipeline(o, 0);
  spec.source.max_frames = kFrames;
  DecodeOptions decode;
  decode.decoder = DecoderKind::Cpu;
  decode.threads = 1;   // frame threads would hold pool slots
  decode.pool = FramePool::create(kFrames + 20, device.index);
  VideoSource source(spec.source, spec.name, decode);
  source.open();
  std::vector<DecodedFrame> decoded;
  while (auto f = source.read()) decoded.push_back(std::move(*f));
  if (decoded.empty()) throw std::runtime_error(fmt::format("{}: no frame decoded", o.clip));
  const FrameInfo info = decoded.front().info;
  std::vector<ops::ImageView> pinned, on_device;
  std::vector<cuda::DeviceBuffer> device_planes;
  for (const auto& f : decoded) {
    if (f.memory != FrameMemory::Pinned || !(f.info == info)) continue;
    pinned.push_back(f.view);
    ops::ImageView v = f.view;
    for (int i = 0; i < ops::plane_count(info.format); ++i) {
      const auto shape = ops::plane_shape(info.format, info.width, info.height, i);
      device_planes.push_back(cuda::alloc_device(size_t(f.view.pitch[i]) * shape.rows));
      const cuda::DeviceBuffer& plane = device_planes.back();
      cuda::check(cudaMemcpy(plane.as(), f.view.data[i], plane.size(), cudaMemcpyHostToDevice), "upload bench frame");
      v.data[i] = device_planes.back().as<const uint8_t>();
    }
    on_device.push_back(v);
  }
  if (pinned.empty()) throw std::runtime_error(fmt::format("{}: frames did not decode into the pinned pool", o.clip));
  std::vector<EngineResult> results;
  // Frames and outputs: NVDEC frames for a host sink, software-decoded frames for one, NVDEC frames
  // for the null sink (outputs left in device memory).
  constexpr std::pair<FrameMemory, bool> kCases[] = {
      {FrameMemory::Device, true}, {FrameMemory::Pinned, true}, {FrameMemory::Device, false}};
  for (const bool graphs : {true, false}) {
    for (const auto& [memory, host_outputs] : kCases) {
      const auto& frames = memory == FrameMemory::Device ? on_device : pinned;
      EngineResult r =
          engine_run(device, info, spec, frames, memory, host_outputs, graphs, kIterations, false, timer_us);
      const EngineResult timed =
          engine_run(device, info, spec, frames, memory, host_outputs, graphs, kTimed, true, timer_us);
      r.upload_us = timed.upload_us;
      r.kernels_us = timed.kernels_us;
      r.latency_p50_ms = timed.latency_p50_ms;
      r.latency_p99_ms = timed.latency_p99_ms;
      results.push_back(r);
    }
  }
  return results;
}

//! Host CPU time per call of each CUDA call a submit is made of, alone: 20 chunks of 100 calls in a
//! row (the device drained between chunks, untimed). Graphs: a memset node (device work whose
//! launch costs what a kernel node's does) with and without the event nodes a submit's graph has.
std::vector<SubmitPart> submit_parts(const DeviceSpec& device) {
  cuda::check(cudaSetDevice(device.index), "cudaSetDevice");
  const cuda::Stream stream = cuda::make_stream();
  const cuda::Event plain = cuda::make_event(), waited = cuda::make_event();
  cudaEvent_t raw{};
  cuda::check(cudaEventCreateWithFlags(&raw, cudaEventDisableTiming | cudaEventBlockingSync), "cudaEventCreate");
  const cuda::Event blocking(raw);
  const cuda::DeviceBuffer scratch = cuda::alloc_device(256);
  cuda::check(cudaEventRecord(waited, cudaStreamLegacy), "cudaEventRecord");
  const auto work = [&](cudaStream_t s) { cuda::check(cudaMemsetAsync(scratch.as(), 1, 256, s), "cudaMemsetAsync"); };
  const auto record = [&](cudaEvent_t e) {
    return [&, e](cudaStream_t s) {
      work(s);
      cuda::check(cudaEventRecordWithFlags(e, s, cudaEventRecordExternal), "cudaEventRecord");
    };
  };
  const cuda::CapturedGraph one = cuda::capture_graph(stream, work);
  const cuda::CapturedGraph ready_blocking = cuda::capture_graph(stream, record(blocking));
  const cuda::CapturedGraph ready_plain = cuda::capture_graph(stream, record(plain));
  const cuda::CapturedGraph waits = cuda::capture_graph(stream, [&](cudaStream_t s) {
    cuda::check(cudaStreamWaitEvent(s, waited, cudaEventWaitExternal), "cudaStreamWaitEvent");
    work(s);
  });
  const auto per_call = [&](auto&& call) {
    constexpr int kChunks = 20, kChunk = 100;
    double cpu = 0;
    for (int c = 0; c < kChunks; ++c) {
      const double t0 = thread_cpu_us();
      for (int i = 0; i < kChunk; ++i) call();
      cpu += thread_cpu_us() - t0;
      cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
    return cpu / (kChunks * kChunk);
  };
  const auto launch = [&](const cuda::CapturedGraph& g) {
    return [&] { cuda::check(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch"); };
  };
  int current = 0;
  return {
      {"cudaGetDevice", per_call([&] { cuda::check(cudaGetDevice(&current), "cudaGetDevice"); })},
      {"cudaEventRecord, legacy stream",
       per_call([&] { cuda::check(cudaEventRecord(plain, cudaStreamLegacy), "cudaEventRecord"); })},
      {"cudaEventRecord, non-blocking stream", per_call([&] { cuda::check(cudaEventRecord(plain, stream), "r"); })},
      {"cudaStreamWaitEvent", per_call([&] { cuda::check(cudaStreamWaitEvent(stream, waited, 0), "wait"); })},
      {"cudaEventQuery, done", per_call([&] { cuda::check(cudaEventQuery(waited), "cudaEventQuery"); })},
      {"cudaGraphLaunch, memset node", per_call(launch(one))},
      {"cudaGraphLaunch, memset + record node (blocking-sync event)", per_call(launch(ready_blocking))},
      {"cudaGraphLaunch, memset + record node (plain event, as `ready`)", per_call(launch(ready_plain))},
      {"cudaGraphLaunch, wait node (external event) + memset", per_call(launch(waits))},
  };
}
#endif

//! One stream's memory built step by step on this thread (after the pipeline phases, so one-time
//! growth is paid): the decoder's open, first frame and steady state, the frames a runner holds
//! (its queue, the executor's ring, the preview frame, the one being decoded) and the executor.
void memory_breakdown(const BenchOptions& o, const DeviceSpec& device, BenchResult& result) {
  const int gpu = device.kind == DeviceKind::Cuda ? device.index : -1;
  PipelineSpec spec = bench_pipeline(o, 0);
  spec.source.max_frames = -1;
  StreamMemory last = memory_now(gpu);
  const auto step = [&](std::string what) {
    const StreamMemory now = memory_now(gpu);
    StreamMemory growth;
    if (gpu >= 0) growth.gpu_mib = now.gpu_mib - last.gpu_mib;
    growth.rss_mib = now.rss_mib - last.rss_mib;
    result.breakdown.push_back({std::move(what), growth});
    last = now;
  };
  result.held_frames = spec.queue_depth + kFramesHeldBeyondQueue + 1;   // + the one being decoded
  {
    VideoSource source(spec.source, spec.name, decode_options(spec, device, shared_decoders(o, device, o.streams)));
    source.open();
    step("open: demuxer, decoder context");
    std::optional<DecodedFrame> frame = source.read();
    if (!frame) throw std::runtime_error(fmt::format("{}: no frame decoded", o.clip));
    step("first frame: the decoder set up (NVDEC: surfaces, frames pool; software: frame threads)");
    result.decode_surfaces = source.decode_surfaces();
    result.decoder_threads = source.decoder_threads();
    frame.reset();
    for (int i = 0; i < 60 && source.read(); ++i) {
    }
    step("60 frames more, each dropped at once: the decoder's steady state");
    std::vector<DecodedFrame> held;
    while (int(held.size()) < result.held_frames) {
      std::optional<DecodedFrame> f = source.read();
      if (!f) throw std::runtime_error(fmt::format("{}: the looped clip ended", o.clip));
      held.push_back(std::move(*f));
    }
    step(fmt::format("{} frames held (queue {}, executor ring {}, preview, being decoded)", result.held_frames,
                     spec.queue_depth, kExecutorRing));
#if FRAMEFUSE_HAVE_CUDA
    if (device.kind == DeviceKind::Cuda) {
      CudaExecutor exec(device.index);
      const FrameInfo info = held.front().info;
      exec.setup(info, make_color_params(spec.color, info), make_output_plans(spec, info), 1);
      step(fmt::format("executor set up for a host sink ({} ring slots: device + pinned outputs, parameters, tap "
                       "tables, graphs)",
                       exec.max_in_flight()));
      for (const DecodedFrame& f : held) {
        if (exec.in_flight() == exec.max_in_flight()) exec.complete({});
        exec.submit({&f.view, 1}, {&f.memory, 1}, {&f.owner, 1});
      }
      while (exec.in_flight() > 0) exec.complete({});
      step("executor, after its first iterations (an upload buffer for host frames)");
    }
#endif
  }
  step("all of it released");
}

//! A camera that keeps reconnecting, until `stop`: the clip opened with the bench streams' decoder,
//! BenchOptions::kChurnFrames frames read, closed again; `reopens` counts the opens. An error ends it.
void reconnect_churn(const BenchOptions& o, const DeviceSpec& device, std::stop_token stop,
                     std::atomic<int32_t>& reopens) {
  PipelineSpec spec = bench_pipeline(o, 0);
  spec.name = "reconnecting";
  spec.source.loop = false;
  spec.source.max_frames = BenchOptions::kChurnFrames;
  try {
    while (!stop.stop_requested()) {
      VideoSource source(spec.source, spec.name, decode_options(spec, device));
      source.open();
      ++reopens;
      while (!stop.stop_requested() && source.read()) {
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench: the reconnecting source stopped: {}\n", e.what());
  }
}

//! `streams` pipelines on the clip paced at `fps` (realtime: true) for o.live_seconds, beside a
//! reconnecting source when o.churn.
LiveTrial live_trial(const BenchOptions& o, const DeviceSpec& device, int streams, double fps,
                     const MemoryReference& reference, DecodeBalancer* balancer) {
  std::vector<PipelineSpec> specs;
  const int64_t frames = std::max<int64_t>(2, std::llround(o.live_seconds * fps));
  for (int i = 0; i < streams; ++i) {
    PipelineSpec p = bench_pipeline(o, i);
    p.name = fmt::format("live-{}", i);
    p.source.realtime = true;
    p.source.max_frames = frames;
    specs.push_back(std::move(p));
  }
  LiveTrial t;
  t.streams = streams;
  MemorySampler memory(device.kind == DeviceKind::Cuda ? device.index : -1);
  std::atomic<int32_t> reopens = 0;
  std::optional<std::jthread> churn;
  if (o.churn) churn.emplace([&](std::stop_token stop) { reconnect_churn(o, device, stop, reopens); });
  const auto t0 = std::chrono::steady_clock::now();
  const PipelinesRun run = run_pipelines(specs, device, fps, nullptr, balancer);
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  churn.reset();   // stops and joins it
  t.reopens = reopens;
  t.memory = per_stream(memory.peak(), reference, streams);
  t.frames = run.frames;
  t.dropped = run.dropped;
  t.late_s = run.late_s;
  t.latency_p50_s = latency_quantile(run.latency.counts, 0.50);
  t.latency_p99_s = latency_quantile(run.latency.counts, 0.99);
  t.queue_wait_p99_s = latency_quantile(run.queue_wait.counts, 0.99);
  t.submit_p99_s = latency_quantile(run.submit.counts, 0.99);
  t.submit_cpu_us = run.submit_cpu_us();
  t.together = run.together;
  t.latency_frames = run.latency.count();
  t.all_running_p99_s = latency_quantile(run.latency_all_running.counts, 0.99);
  t.all_running_frames = run.latency_all_running.count();
  t.latency_mean_s = run.latency.mean_s().value_or(0);
  t.decoder = run.decoder;
  // A live source queues kLiveSlackFrames frames before it drops: later than that would have
  // dropped. (Latency is reported, not judged.)
  t.held = run.all_frames && run.dropped == 0 && run.late_s <= kLiveSlackFrames / fps;
  fmt::print(stderr, "bench: {} real-time stream(s): {} ({} frames, {} dropped, {:.1f} ms late; {})\n", streams,
             t.held ? "held" : "not held", t.frames, t.dropped, 1e3 * t.late_s, t.decoder);
  return t;
}

//! The most streams (<= o.live_streams) that hold: doubling from 8, then bisecting to within
//! ~10 %; then one trial at 80 % of that for the latency at that load. Hybrid decode with `balancer`.
void live_search(const BenchOptions& o, const DeviceSpec& device, double fps, const MemoryReference& reference,
                 BenchResult& result, DecodeBalancer* balancer) {
  int held = 0, failed = o.live_streams + 1;
  for (int n = std::min(8, o.live_streams);;) {
    result.live.push_back(live_trial(o, device, n, fps, reference, balancer));
    if (!result.live.back().held) {
      failed = n;
      break;
    }
    held = n;
    if (n == o.live_streams) break;
    n = std::min(2 * n, int(o.live_streams));
  }
  while (failed - held > std::max(1, held / 10)) {
    const int n = (held + failed) / 2;
    result.live.push_back(live_trial(o, device, n, fps, reference, balancer));
    (result.live.back().held ? held : failed) = n;
  }
  result.live_held = held;
  if (held > 0)
    result.live.push_back(live_trial(o, device, std::max(1, int(std::lround(0.8 * held))), fps, reference, balancer));
}

}  // namespace

SteadyWindow::SteadyWindow(size_t streams, Progress progress)
    : thread_([this, streams, progress = std::move(progress)](std::stop_token stop) {
        using Clock = std::chrono::steady_clock;
        std::optional<std::pair<Clock::time_point, uint64_t>> begin;   // when all ran, and their frames then
        while (!stop.stop_requested()) {
          uint64_t frames = 0;
          bool all_running = true, one_done = false;
          for (size_t i = 0; i < streams; ++i) {
            const auto [n, done] = progress(i);
            frames += n;
            all_running = all_running && n >= kSteadyFrom;
            one_done = one_done || done;
          }
          const Clock::time_point now = Clock::now();
          if (one_done) {
            const double seconds = begin ? std::chrono::duration<double>(now - begin->first).count() : 0;
            if (seconds > 0) fps_ = double(frames - begin->second) / seconds;
            return;
          }
          if (!begin && all_running) begin = std::pair{now, frames};
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }) {}

double SteadyWindow::stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  return fps_;
}

int32_t due_together(std::span<const int64_t> last_ns, double fps, double window_s) {
  const double period_ns = 1e9 / fps;
  std::vector<double> phase;
  for (const int64_t t : last_ns) phase.push_back(std::fmod(double(t), period_ns));
  int32_t most = 0;
  for (const double a : phase) {
    int32_t n = 0;
    for (const double b : phase) {
      const double d = std::fabs(a - b);
      n += std::min(d, period_ns - d) <= 0.5e9 * window_s ? 1 : 0;
    }
    most = std::max(most, n);
  }
  return most;
}

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
  if (o.hybrid && (device.kind != DeviceKind::Cuda || o.decoder != DecoderKind::Auto))
    throw std::invalid_argument(fmt::format("--hybrid needs --decoder auto on a CUDA device, the device is {}",
                                            result.device));
  // Hybrid decode as the daemon does it, with its default `decode:` capacities unless given.
  const config::DecodeConfig defaults;
  const auto balancer = o.hybrid ? std::make_unique<DecodeBalancer>(decode_capacity(
                                       o.nvdec_fps > 0 ? o.nvdec_fps : defaults.nvdec_fps, o.cpu_fps))
                                 : nullptr;

  // Untimed warm-up: the process's CUDA context, NVDEC and FFmpeg start-up would otherwise land in
  // whichever phase runs first.
  double fps = 0;   // the clip's frame rate, for the real-time trials
  {
    const PipelineSpec spec = bench_pipeline(o, 0);
    VideoSource source(spec.source, spec.name, decode_options(spec, device));
    source.open();
    for (int i = 0; i < 8 && source.read(); ++i) {
    }
    fps = source.frame_rate() > 0 ? source.frame_rate() : 30;
  }
  const int gpu = device.kind == DeviceKind::Cuda ? device.index : -1;
  release_free_heap();   // as every MemorySampler does
  const StreamMemory base = memory_now(gpu);
  result.decode = measure([&](PhaseResult& r) {
    MemorySampler memory(gpu);
    const uint64_t frames = decode_only(o, device, r, balancer.get());
    result.decode_memory = per_stream(memory.peak(), {base, 0}, o.streams);
    return frames;
  });

  // One pipeline alone: the memory reference for the per-stream figures. It decodes as each of the
  // N streams does: software decoders share the host's cores among the members of a DecoderShare,
  // so N - 1 more runners join it, never started, while it runs.
  MemoryReference reference{base, 0}, median_reference{base, 0};
  if (o.streams > 1) {
    result.single = measure([&](PhaseResult& r) {
      DecoderShare share;
      std::vector<std::unique_ptr<PipelineRunner>> unstarted;
      for (int i = 1; i < o.streams; ++i)
        unstarted.push_back(std::make_unique<PipelineRunner>(bench_pipeline(o, i), device, 0, nullptr, &share));
      MemorySampler memory(gpu);
      const PipelinesRun run = run_pipelines({bench_pipeline(o, 0)}, device, 0, &share, balancer.get());
      reference = {memory.peak(), 1};
      median_reference = {memory.median(), 1};
      r.decoder = run.decoder;
      r.steady_fps = run.steady_fps;
      return run.frames;
    });
  }
  LatencyHistogram latency;
  result.pipeline = measure([&](PhaseResult& r) {
    std::vector<PipelineSpec> specs;
    for (int i = 0; i < o.streams; ++i) specs.push_back(bench_pipeline(o, i));
    MemorySampler memory(gpu);
    const PipelinesRun run = run_pipelines(specs, device, 0, nullptr, balancer.get());
    result.pipeline_memory = per_stream(memory.peak(), reference, o.streams);
    result.pipeline_memory_median = per_stream(memory.median(), median_reference, o.streams);
    latency = run.latency;
    result.pipeline_submit_cpu_us = run.submit_cpu_us();
    r.decoder = run.decoder;
    r.steady_fps = run.steady_fps;
    result.frame = run.frame;
    result.codec = run.codec;
    return run.frames;
  });
  result.decode_again = measure([&](PhaseResult& r) { return decode_only(o, device, r, balancer.get()); });
  if (o.hybrid) {
    result.decode_nvdec = measure([&](PhaseResult& r) { return decode_only(with_decoder(o, DecoderKind::Nvdec), device, r); });
    result.decode_cpu = measure([&](PhaseResult& r) { return decode_only(with_decoder(o, DecoderKind::Cpu), device, r); });
  }
  result.latency_p50_s = latency_quantile(latency.counts, 0.50);
  result.latency_p99_s = latency_quantile(latency.counts, 0.99);
#if FRAMEFUSE_HAVE_CUDA
  if (device.kind == DeviceKind::Cuda) {
    result.timer_us = timer_cost_us();
    result.engine = engine_bench(o, device, result.timer_us);
    result.submit_parts = submit_parts(device);
  }
#endif
  memory_breakdown(o, device, result);
  if (o.live_streams > 0) live_search(o, device, fps, reference, result, balancer.get());
  return result;
}

namespace {

std::string latency_text(double seconds) {
  if (std::isinf(seconds)) return fmt::format("> {:g} ms", 1e3 * kLatencyBuckets.back());
  return fmt::format("<= {:g} ms", 1e3 * seconds);
}

std::string phase_row(const char* name, const PhaseResult& p, int streams) {
  return fmt::format("{:<16}{:>8}{:>10.3f}{:>12.1f}{:>12.1f}{:>14.1f}{:>14.2f}{:>15.1f}  {}\n", name, p.frames,
                     p.seconds, p.fps(), p.fps() / streams, p.steady_fps, p.cpu_ms_per_frame(), p.peak_rss_mib,
                     p.decoder);
}

std::string memory_text(const char* what, const StreamMemory& m) {
  return fmt::format("{} memory per stream: GPU {}, RSS {:.1f} MiB\n", what,
                     m.gpu_mib < 0 ? std::string("-") : fmt::format("{:.1f} MiB", m.gpu_mib), m.rss_mib);
}

std::string memory_json(const StreamMemory& m) {
  const std::string gpu = m.gpu_mib < 0 ? std::string("null") : json_number(m.gpu_mib);
  return fmt::format(R"({{"gpu_mib": {}, "rss_mib": {}}})", gpu, json_number(m.rss_mib));
}

std::string phase_json(const PhaseResult& p, int streams) {
  return fmt::format(R"({{"frames": {}, "seconds": {}, "fps": {}, "fps_per_stream": {}, "steady_fps": {}, )"
                     R"("cpu_ms_per_frame": {}, "peak_rss_mib": {}, "decoder": {})",
                     p.frames, json_number(p.seconds), json_number(p.fps()), json_number(p.fps() / streams),
                     json_number(p.steady_fps), json_number(p.cpu_ms_per_frame()), json_number(p.peak_rss_mib),
                     json_string(p.decoder));
}

}  // namespace

std::string format_bench_table(const BenchResult& r) {
  const int n = r.options.streams;
  std::string out = fmt::format(
      "framefused bench: {} ({}, {}), {} stream(s) x {} frames, device {}\n"
      "outputs: classify (shorter side 256, center crop 224, ImageNet mean/std, CHW f32) + "
      "detect (letterbox 640x640, /255, CHW f16), null sink (CUDA: outputs left in GPU memory)\n\n",
      r.options.clip, r.codec, r.frame, n, r.options.frames, r.device);
  out += fmt::format("{:<16}{:>8}{:>10}{:>12}{:>12}{:>14}{:>14}{:>15}  {}\n", "phase", "frames", "seconds", "fps total",
                     "fps/stream", "all running", "CPU ms/frame", "peak RSS MiB", "decoder");
  out += phase_row("decode ceiling", r.decode, n);
  if (r.single.frames) out += phase_row("pipeline, 1 st", r.single, 1);
  out += phase_row("pipeline", r.pipeline, n);
  out += phase_row("decode again", r.decode_again, n);
  if (r.options.hybrid) {
    out += phase_row("decode, nvdec", r.decode_nvdec, n);
    out += phase_row("decode, cpu", r.decode_cpu, n);
    out += fmt::format("hybrid decode ceiling {:.1f} fps = {:.2f}x the NVDEC-only ceiling, {:.2f}x the software-only one\n",
                       r.ceiling_fps(), r.ceiling_fps() / r.decode_nvdec.fps(), r.ceiling_fps() / r.decode_cpu.fps());
  }
  out += fmt::format("pipeline latency, decode -> output (histogram bucket bounds): p50 {}, p99 {}; submit CPU "
                     "{:.2f} us/frame (the pipelines' own submit calls)\n",
                     latency_text(r.latency_p50_s), latency_text(r.latency_p99_s), r.pipeline_submit_cpu_us);
  out += memory_text(n > 1 ? "pipeline (N streams - 1 stream) / (N - 1):" : "pipeline (process growth):",
                     r.pipeline_memory);
  out += memory_text(n > 1 ? "  the same of the phases' medians:" : "  the same of the phase's median:",
                     r.pipeline_memory_median);
  out += memory_text("decode alone (growth / N):", r.decode_memory);
  if (!r.engine.empty()) {
    out += fmt::format("\nexecutor alone ({} iterations, {} in flight, outputs not copied out; submit = thread CPU "
                       "time in submit(); device times from a run with event times; frames device: in GPU memory, "
                       "finished, as NVDEC sources hand them on; outputs host: downloaded for a host sink, device: "
                       "left in GPU memory, as for the null sink):\n",
                       r.engine.front().iterations, kEngineInFlight);
    out += fmt::format("{:<8}{:<8}{:<8}{:>14}{:>10}{:>12}{:>12}{:>26}\n", "mode", "frames", "outputs", "submit us/fr",
                       "fps", "upload us", "kernels us", "latency p50/p99 ms");
    for (const auto& e : r.engine)
      out += fmt::format("{:<8}{:<8}{:<8}{:>14.2f}{:>10.0f}{:>12}{:>12.1f}{:>26}\n", e.mode, e.memory, e.outputs,
                         e.submit_cpu_us, e.fps,
                         e.upload_us < 0 ? std::string("-") : fmt::format("{:.1f}", e.upload_us), e.kernels_us,
                         fmt::format("{:.3f} / {:.3f}", e.latency_p50_ms, e.latency_p99_ms));
  }
  if (!r.submit_parts.empty()) {
    out += fmt::format("\nsubmit path, host CPU per call alone (one timer reading, {:.2f} us, is taken off each "
                       "submit above):\n",
                       r.timer_us);
    for (const auto& p : r.submit_parts) out += fmt::format("  {:<74}{:>8.2f} us\n", p.call, p.cpu_us);
  }
  if (!r.breakdown.empty()) {
    out += fmt::format("\nmemory of one stream, step by step (decoder threads {}, NVDEC decode surfaces {}):\n",
                       r.decoder_threads, r.decode_surfaces);
    out += fmt::format("  {:<86}{:>10}{:>10}\n", "step", "GPU MiB", "RSS MiB");
    for (const auto& m : r.breakdown)
      out += fmt::format("  {:<86}{:>10}{:>10.1f}\n", m.step,
                         r.device == "cpu" ? std::string("-") : fmt::format("{:.1f}", m.growth.gpu_mib),
                         m.growth.rss_mib);
  }
  if (!r.live.empty()) {
    out += fmt::format("\nreal time ({} s trials, clip paced at its frame rate; together: the most streams whose "
                       "frames fell due within 1 ms; latency of each stream's frames after its first {:g} s, bucket "
                       "bounds, and the exact mean; all running: of the frames after every stream's first {:g} s, "
                       "when none was still starting):\n",
                       r.options.live_seconds, kLatencySettleS, kLatencySettleS);
    if (r.options.churn)
      out += fmt::format("beside a source that reopens the clip after every {} frames (reopens: how often; the "
                         "memory per stream includes it)\n",
                         BenchOptions::kChurnFrames);
    out += fmt::format("{:>8}{:>6}{:>10}{:>9}{:>10}{:>10}{:>30}{:>10}{:>26}{:>16}{:>16}{:>14}{:>12}{:>12}{:>9}  {}\n",
                       "streams", "held", "frames", "dropped", "late ms", "together", "latency p50 / p99", "mean ms",
                       "p99 all running (frames)", "wait p99", "submit p99", "submit CPU us", "GPU MiB/st",
                       "RSS MiB/st", "reopens", "decoder");
    for (const auto& t : r.live)
      out += fmt::format(
          "{:>8}{:>6}{:>10}{:>9}{:>10.1f}{:>10}{:>30}{:>10.3f}{:>26}{:>16}{:>16}{:>14.1f}{:>12}{:>12.1f}{:>9}  {}\n",
          t.streams, t.held ? "yes" : "no", t.frames, t.dropped, 1e3 * t.late_s, t.together,
          latency_text(t.latency_p50_s) + " / " + latency_text(t.latency_p99_s), 1e3 * t.latency_mean_s,
          fmt::format("{} ({})", latency_text(t.all_running_p99_s), t.all_running_frames),
          latency_text(t.queue_wait_p99_s), latency_text(t.submit_p99_s), t.submit_cpu_us,
          t.memory.gpu_mib < 0 ? std::string("-") : fmt::format("{:.1f}", t.memory.gpu_mib), t.memory.rss_mib,
          r.options.churn ? std::to_string(t.reopens) : std::string("-"), t.decoder);
    out += fmt::format("most streams held: {}\n", r.live_held);
  }
  out += fmt::format("\npipeline / decode ceiling = {:.1f} % (while every stream runs: {:.1f} %)\n", 100 * r.ratio(),
                     100 * r.steady_ratio());
  return out;
}

std::string format_bench_json(const BenchResult& r) {
  const int n = r.options.streams;
  std::string engine, live;
  for (const auto& e : r.engine)
    engine += fmt::format(R"({}{{"mode": {}, "frames": {}, "outputs": {}, "iterations": {}, "submit_cpu_us": {}, )"
                          R"("fps": {}, "upload_us": {}, "kernels_us": {}, )"
                          R"("latency_p50_ms": {}, "latency_p99_ms": {}}})",
                          engine.empty() ? "" : ", ", json_string(e.mode), json_string(e.memory),
                          json_string(e.outputs), e.iterations,
                          json_number(e.submit_cpu_us), json_number(e.fps),
                          e.upload_us < 0 ? std::string("null") : json_number(e.upload_us), json_number(e.kernels_us),
                          json_number(e.latency_p50_ms), json_number(e.latency_p99_ms));
  std::string parts, breakdown;
  for (const auto& p : r.submit_parts)
    parts += fmt::format(R"({}{{"call": {}, "cpu_us": {}}})", parts.empty() ? "" : ", ", json_string(p.call),
                         json_number(p.cpu_us));
  for (const auto& m : r.breakdown)
    breakdown += fmt::format(R"({}{{"step": {}, "gpu_mib": {}, "rss_mib": {}}})", breakdown.empty() ? "" : ", ",
                             json_string(m.step),
                             r.device == "cpu" ? std::string("null") : json_number(m.growth.gpu_mib),
                             json_number(m.growth.rss_mib));
  for (const auto& t : r.live)
    live += fmt::format(R"({}{{"streams": {}, "held": {}, "seconds": {}, "frames": {}, "dropped": {}, "late_ms": {}, )"
                        R"("due_together": {}, )"
                        R"("latency_p50_ms": {}, "latency_p99_ms": {}, "latency_mean_ms": {}, "latency_frames": {}, )"
                        R"("all_running_p99_ms": {}, "all_running_frames": {}, )"
                        R"("queue_wait_p99_ms": {}, "submit_p99_ms": {}, "submit_cpu_us": {}, "memory_per_stream": {}, )"
                        R"("decoder": {}, "reopens": {}}})",
                        live.empty() ? "" : ", ", t.streams, t.held ? "true" : "false", json_number(t.seconds),
                        t.frames, t.dropped, json_number(1e3 * t.late_s), t.together, json_number(1e3 * t.latency_p50_s),
                        json_number(1e3 * t.latency_p99_s), json_number(1e3 * t.latency_mean_s), t.latency_frames,
                        json_number(1e3 * t.all_running_p99_s), t.all_running_frames,
                        json_number(1e3 * t.queue_wait_p99_s), json_number(1e3 * t.submit_p99_s),
                        json_number(t.submit_cpu_us), memory_json(t.memory), json_string(t.decoder),
                        r.options.churn ? std::to_string(t.reopens) : std::string("null"));
  return fmt::format(
      "{{\"clip\": {}, \"codec\": {}, \"frame\": {}, \"streams\": {}, \"frames_per_stream\": {}, \"device\": {}, "
      "\"outputs\": [\"classify\", \"detect\"], \"sink\": \"null\",\n"
      " \"decode\": {}}},\n \"decode_again\": {}}},\n"
      " \"single_stream\": {}}},\n"
      " \"hybrid\": {}, \"decode_nvdec\": {}}}, \"decode_cpu\": {}}},\n"
      " \"pipeline\": {}, \"latency_p50_ms\": {}, \"latency_p99_ms\": {}, \"submit_cpu_us\": {}, "
      "\"latency_resolution\": \"histogram bucket upper bound; null = above {} ms\"}},\n"
      " \"memory_per_stream\": {}, \"memory_per_stream_median\": {},\n \"decode_memory_per_stream\": {},\n"
      " \"engine\": [{}],\n \"submit_parts\": [{}], \"timer_us\": {},\n"
      " \"memory_breakdown\": {{\"decoder_threads\": {}, \"decode_surfaces\": {}, \"held_frames\": {}, "
      "\"steps\": [{}]}},\n"
      " \"live\": {{\"held\": {}, \"trials\": [{}]}},\n"
      " \"ratio\": {}, \"steady_ratio\": {}}}\n",
      json_string(r.options.clip), json_string(r.codec), json_string(r.frame), n, r.options.frames,
      json_string(r.device),
      phase_json(r.decode, n), phase_json(r.decode_again, n), phase_json(r.single, 1),
      r.options.hybrid ? "true" : "false", phase_json(r.decode_nvdec, n), phase_json(r.decode_cpu, n),
      phase_json(r.pipeline, n), json_number(1e3 * r.latency_p50_s),
      json_number(1e3 * r.latency_p99_s), json_number(r.pipeline_submit_cpu_us), 1e3 * kLatencyBuckets.back(), memory_json(r.pipeline_memory),
      memory_json(r.pipeline_memory_median), memory_json(r.decode_memory), engine, parts, json_number(r.timer_us),
      r.decoder_threads, r.decode_surfaces,
      r.held_frames, breakdown, r.live_held, live, json_number(r.ratio()), json_number(r.steady_ratio()));
}

}  // namespace framefuse::daemon
