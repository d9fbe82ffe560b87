#pragma once
//! `framefused bench`: how close the full pipeline comes to the decode ceiling on this host. Phase 1
//! decodes the clip alone (N concurrent VideoSources, frames dropped); phase 2 runs N pipelines
//! (canonical classify + detect outputs, null sink) on the same clip; then phase 1 runs once more,
//! and the ceiling is the faster of its two runs (the decode rate alone moves from run to run, e.g.
//! with the GPU's clocks: NVDEC 693-783 fps in one day's runs on the H200). The phases time from
//! start to the last stream done, opening included; each also reports its rate while every stream
//! runs (SteadyWindow), which neither the decoders' opening nor the slowest stream's tail enters: with
//! 8 NVDEC streams of 600 frames those took a third of the phase (tests/bench/RESULTS.md, session 14). With more than one stream, one pipeline runs alone
//! first (decoding as each of N does): memory per stream is (most used with N streams - most used
//! with 1) / (N - 1), which leaves out what the process takes once (CUDA context growth, module
//! loading, FFmpeg's device), and the same of the phases' medians (start-up peaks left out). Then
//! one stream's memory step by step (decoder, frames held, executor). On a CUDA device it also
//! measures the executor alone (submit-path CPU time with graph replay vs stream launches, device
//! time of the upload and the kernels, device latency) and the submit path's CUDA calls alone, and
//! optionally the most real-time streams held and the latency at 80 % of that load.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/runtime/pipeline_stats.hpp"
#include "pipeline/spec.hpp"

namespace framefuse::daemon {

struct BenchOptions {
  std::string clip;                      //!< video file decoded by every stream
  int32_t streams = 1;                   //!< concurrent sessions, >= 1
  int64_t frames = 600;                  //!< frames per stream (the clip loops), >= 1
  DecoderKind decoder = DecoderKind::Auto;
  DeviceSpec device;                     //!< unresolved (auto, cpu, cuda:N)
  std::optional<std::string> json_path;  //!< also write the results here as JSON
  //! > 0: also find the most streams (up to this many) that hold real time with the clip paced at
  //! its frame rate (`realtime: true`, as a live camera), each trial `live_seconds` long.
  int32_t live_streams = 0;
  int32_t live_seconds = 4;
  //! With live_streams: in each live trial one more source on the clip, with the streams' decoder,
  //! opens, reads kChurnFrames frames and closes, over and over, as a camera that keeps reconnecting
  //! (what its decoder's set-up and tear-down cost the other streams).
  bool churn = false;
  static constexpr int64_t kChurnFrames = 10;
  //! Hybrid decode (`decoder: auto` on a CUDA device): the streams spread over NVDEC and the cores
  //! as the daemon spreads them (DecodeBalancer, capacities below); also measures the decode
  //! ceiling with every stream on NVDEC and with every stream in software, for the ratios.
  bool hybrid = false;
  //! Hybrid decode's capacities, 1080p frames per second (config `decode.nvdec_fps`, `decode.cpu_fps`);
  //! 0: the daemon's defaults.
  double nvdec_fps = 0, cpu_fps = 0;
  bool operator==(const BenchOptions&) const = default;
};

struct PhaseResult {
  uint64_t frames = 0;                   //!< every stream together
  double seconds = 0;                    //!< wall time of the phase
  double cpu_s = 0;                      //!< process user + system CPU time over the phase
  double peak_rss_mib = 0;               //!< process peak RSS at the end of the phase (monotonic)
  std::string decoder;                   //!< decoder in use: "nvdec", "cpu", or both: "nvdec 4 + cpu 4"
  double steady_fps = 0;                 //!< every stream together while all of them ran (SteadyWindow); 0: never
  double fps() const { return seconds > 0 ? double(frames) / seconds : 0; }
  double cpu_ms_per_frame() const { return frames ? 1e3 * cpu_s / double(frames) : 0; }
};

//! A phase's rate while every stream runs: from the first moment each of the streams has done
//! kSteadyFrom frames (decoder open, first frames out) to the first moment one of them is done (before
//! the tail of the slowest). A thread of its own samples `progress` (frames done so far, and whether the
//! stream is done) every millisecond from construction until one stream is done or stop().
class SteadyWindow {
 public:
  static constexpr uint64_t kSteadyFrom = 10;
  using Progress = std::function<std::pair<uint64_t, bool>(size_t stream)>;
  SteadyWindow(size_t streams, Progress progress);
  ~SteadyWindow() { stop(); }
  SteadyWindow(const SteadyWindow&) = delete;
  SteadyWindow& operator=(const SteadyWindow&) = delete;
  //! Ends the sampling (if it has not ended) and returns the frames per second of every stream
  //! together in the window; 0 when no moment had them all running (one was done first).
  double stop();

 private:
  double fps_ = 0;   //!< written by the thread, read after it joined
  std::jthread thread_;
};

//! Memory per stream (see the header comment), or, where noted, the process' memory.
struct StreamMemory {
  double gpu_mib = -1;                   //!< cudaMemGetInfo used, -1 when not on a CUDA device
  double rss_mib = 0;                    //!< process resident set
};

//! The CUDA executor alone, one mode (graph replay or stream launches) and one frame memory kind,
//! `iterations` back to back with the ring full.
struct EngineResult {
  std::string mode;                      //!< "graph", "stream"
  std::string memory;                    //!< "device" (frames on the GPU, as NVDEC's), "pinned" (uploaded)
  std::string outputs;                   //!< "host" (downloaded, as for host sinks), "device" (left there, null sink)
  int iterations = 0;
  double submit_cpu_us = 0;              //!< thread CPU time in submit(), per frame
  double fps = 0;                        //!< frames per second of the loop (submit + complete)
  double upload_us = -1;                 //!< device time of the upload (median); -1: no upload
  double kernels_us = 0;                 //!< device time, inputs on the device -> outputs ready (median)
  double latency_p50_ms = 0, latency_p99_ms = 0;   //!< device events: start of the iteration -> outputs ready
};

//! Host CPU time of one call on the submit path, measured alone (thread CPU time over many calls
//! in a row, the timer's own cost taken off).
struct SubmitPart {
  std::string call;
  double cpu_us = 0;
};

//! One step of the memory breakdown (one stream, built step by step) and the growth it caused.
struct MemoryStep {
  std::string step;
  StreamMemory growth;
};

//! One real-time trial: `streams` paced pipelines.
struct LiveTrial {
  int32_t streams = 0;
  //! Every frame processed, no drop, no stream's last frame later than 4 frame intervals (a live
  //! source's default queue) past its due time.
  bool held = false;
  double seconds = 0;                    //!< wall time of the trial
  double late_s = 0;                     //!< the latest any stream's last frame came, past its due time
  uint64_t frames = 0, dropped = 0;
  //! Decode -> output latency of each stream's frames after its first second (start-up left
  //! out): bucket bounds as BenchResult's, and the exact mean from the histogram's sum.
  double latency_p50_s = 0, latency_p99_s = 0, latency_mean_s = 0;
  uint64_t latency_frames = 0;           //!< frames those latencies are of
  //! p99 of the frames processed once every stream had run its first second: none was still
  //! starting (decoders opening, allocations, graph captures stall the others), the steady state.
  double all_running_p99_s = 0;
  uint64_t all_running_frames = 0;       //!< frames that p99 is of (0: some stream ended first)
  double queue_wait_p99_s = 0;           //!< the part of it before the submit (queue, ring slot), bucket bound
  double submit_p99_s = 0;               //!< the part of it in the submit call, bucket bound
  double submit_cpu_us = 0;              //!< host CPU of the submit call per frame (the same frames)
  //! The most streams whose frames fell due within 1 ms of each other (each stream's last frame
  //! time modulo the frame interval): how much the streams' frames bunch up (their phases come from
  //! when each one's first frame was decoded).
  int32_t together = 0;
  StreamMemory memory;                   //!< per stream, against the 1-stream run of the pipeline phase
  std::string decoder;                   //!< as PhaseResult::decoder
  int32_t reopens = 0;                   //!< times the reconnecting source opened (BenchOptions::churn)
};

struct BenchResult {
  BenchOptions options;
  std::string device;                    //!< resolved: "cpu", "cuda:0"
  std::string frame;                     //!< the clip's frames, e.g. "320x240 yuv420p bt601/limited"
  std::string codec;                     //!< the clip's codec and profile, e.g. "h264 High"
  PhaseResult decode, pipeline;
  PhaseResult decode_again;              //!< phase 1 once more, after the pipelines
  PhaseResult single;                    //!< one pipeline alone (streams > 1), the memory reference
  PhaseResult decode_nvdec, decode_cpu;  //!< hybrid: the decode ceiling with every stream on NVDEC / in software
  //! Decode -> output latency of every pipeline frame: upper bounds of the histogram buckets
  //! (kLatencyBuckets) holding the quantile, seconds; +inf when beyond the last bound.
  double latency_p50_s = 0, latency_p99_s = 0;
  //! Host CPU per frame of the pipelines' own submit calls in the pipeline phase (not the engine
  //! rows' executor alone): what the running daemon spends launching each frame.
  double pipeline_submit_cpu_us = 0;
  StreamMemory pipeline_memory;          //!< per stream; with 1 stream: the process' growth over the phase
  StreamMemory pipeline_memory_median;   //!< the same of the phases' medians (steady state), not peaks
  //! The decode phase's growth over the process before it, / streams: the decoders alone (frames
  //! dropped at once), one-time costs included but for the warm-up's.
  StreamMemory decode_memory;
  std::vector<EngineResult> engine;      //!< CUDA devices only
  std::vector<SubmitPart> submit_parts;  //!< CUDA devices only
  double timer_us = 0;                   //!< one thread_cpu_us() reading, taken off every submit time
  //! One stream's memory, step by step after the pipeline phases (one-time growth already paid):
  //! decoder open, first frame, steady decoding, frames held as a pipeline holds them, executor.
  std::vector<MemoryStep> breakdown;
  int32_t held_frames = 0;               //!< frames held in the breakdown's "held" step
  int32_t decode_surfaces = 0;           //!< NVDEC decode surfaces (0: software)
  int32_t decoder_threads = 0;           //!< the decoder's threads in the breakdown (with N streams)
  std::vector<LiveTrial> live;           //!< in the order run; the last is at 80 % of the most held
  int32_t live_held = 0;                 //!< the most streams held (0: none, or not run)
  //! The decode ceiling: the faster of the two decode-only runs, frames per second.
  double ceiling_fps() const { return std::max(decode.fps(), decode_again.fps()); }
  double ratio() const { return ceiling_fps() > 0 ? pipeline.fps() / ceiling_fps() : 0; }
  //! The same while every stream runs (PhaseResult::steady_fps); 0 when a phase had no such moment.
  double steady_ratio() const {
    const double ceiling = std::max(decode.steady_fps, decode_again.steady_fps);
    return ceiling > 0 ? pipeline.steady_fps / ceiling : 0;
  }
};

//! The most of the streams whose frames fall due within `window_s` seconds of each other, from their
//! last frames' times (steady clock, ns) modulo the frame interval 1 / `fps` (LiveTrial::together).
int32_t due_together(std::span<const int64_t> last_ns, double fps, double window_s);

//! Runs both phases. Throws std::invalid_argument for bad usage (no such clip, nvdec on a CPU
//! device), DeviceError when the device is not available, MediaError / std::runtime_error when a
//! stream fails; messages are one line.
BenchResult run_bench(const BenchOptions& options);

//! The upper bound (seconds) of the kLatencyBuckets bucket holding quantile `q` (0..1] of the
//! histogram `counts` (last = +Inf, giving +inf); 0 for an empty histogram.
double latency_quantile(const std::array<uint64_t, kLatencyBuckets.size() + 1>& counts, double q);

//! The human-readable table, ending with "pipeline / decode ceiling = X %".
std::string format_bench_table(const BenchResult& r);
//! The same numbers as one JSON object.
std::string format_bench_json(const BenchResult& r);

}  // namespace framefuse::daemon
