//! Overhead of the control loops on the GPU (not a ctest): the canonical workloads on 1920x1080
//! NV12 at batch 1, one iteration captured into a CUDA graph and replayed back to back, without
//! control (parameter upload + fused kernel) and with it (the same two nodes; the fused launch
//! carries the statistics blocks and the loops, pipeline/control/fused_control.hpp). Inputs past
//! the L2: kPoolFrames device frames, one FusedPreprocess + graph each, replayed in rotation (with
//! control all of them attached to one CudaControl, so the replays are consecutive iterations).
//! Control runs every loop, with delay_frames 1 (the loops of frame n + 1 wait for frame n's
//! statistics inside frame n's launch) and 2 (they run in frame n's launch on frame n - 1's,
//! closed by its finisher block: nothing waits).
//! Per sample, kIters replays: GPU time (events, µs per frame) and host CPU time of the submitting
//! thread (CLOCK_THREAD_CPUTIME_ID around the cudaGraphLaunch loop, µs per frame); the three
//! modes' samples alternate, and each number is the median of its samples.
//! Usage: control_bench [--samples N] [--workload NAME] (NAME: that workload's row only, e.g. under a profiler)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/control/control_cuda.hpp"
#include "pipeline/control/control_engine.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/util/clock.hpp"
#include "pipeline/workloads.hpp"
#include "tests/bench/bench_stats.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace framefuse::bench {
namespace {

constexpr int kPoolFrames = 128;   //!< ~400 MB of NV12 on the device, past the 60 MB L2
constexpr int kIters = 64;         //!< graph replays per timed sample

//! One batch-1 iteration on one pool frame: its fused launch, outputs and captured graph.
struct Instance {
  FusedPreprocess fused;
  std::unique_ptr<test::DeviceOutputs> outs;
  cuda::GraphExec graph;
};

//! kPoolFrames instances of `plans`, each on its pool frame; with `control`, attached to it.
std::vector<std::unique_ptr<Instance>> make_instances(const FrameInfo& info, std::span<const OutputPlan> plans,
                                                      std::span<const FrameSlot> frames,
                                                      const control::CudaControl* control, cudaStream_t stream) {
  std::vector<std::unique_ptr<Instance>> all;
  for (const FrameSlot& frame : frames) {
    auto in = std::make_unique<Instance>();
    in->fused.setup(info, plans, 1);
    if (control) control->attach(in->fused);
    in->outs = std::make_unique<test::DeviceOutputs>(plans, 1);
    in->fused.set_batch({&frame, 1}, in->outs->ptrs());
    in->graph = cuda::capture_graph(stream, [&](cudaStream_t s) {
                  if (control) {
                    control->run(in->fused, 1, s);
                  } else {
                    in->fused.run(s);
                  }
                }).exec;
    all.push_back(std::move(in));
  }
  return all;
}

struct Timing {
  std::vector<double> gpu_us, cpu_us;   //!< per frame, one entry per sample
};

//! One sample: kIters replays rotating through `instances` from `next`.
void sample(std::span<const std::unique_ptr<Instance>> instances, size_t& next, cudaStream_t stream, Timing& t) {
  const cuda::Event start = cuda::make_event(true), stop = cuda::make_event(true);
  cuda::check(cudaEventRecord(start, stream), "event");
  const double cpu0 = thread_cpu_us();
  for (int i = 0; i < kIters; ++i, ++next)
    cuda::check(cudaGraphLaunch(instances[next % instances.size()]->graph, stream), "graph launch");
  const double cpu1 = thread_cpu_us();
  cuda::check(cudaEventRecord(stop, stream), "event");
  cuda::check(cudaEventSynchronize(stop), "timed replays");
  float ms = 0;
  cuda::check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
  t.gpu_us.push_back(1e3 * double(ms) / kIters);
  t.cpu_us.push_back((cpu1 - cpu0) / kIters);
}

int run(int samples, const std::string& only) {
  const CudaProbe probe = probe_cuda();
  if (probe.devices == 0) {
    std::fprintf(stderr, "control_bench: no CUDA device (%s)\n", probe.detail.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "device properties");
  std::printf("device: %s, %d SMs, L2 %d MB; batch 1, graph replays, %d pool frames, median of %d samples of %d\n",
              prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20, kPoolFrames, samples, kIters);
  const cuda::Stream stream = cuda::make_stream();

  std::vector<test::HostImage> images;
  for (uint32_t s = 0; s < 8; ++s) images.push_back(test::random_image(ops::PixelFormat::Nv12, 1920, 1080, 4242 + s));
  const FrameInfo info = test::frame_info(images[0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  const ops::ColorParams color = make_color_params(ColorSpec{}, info);
  std::vector<test::DeviceImage> pool;
  std::vector<FrameSlot> frames;
  for (int i = 0; i < kPoolFrames; ++i) pool.push_back(test::upload(images[size_t(i) % images.size()]));
  for (const auto& p : pool) frames.push_back({p.view, color});

  struct Workload {
    const char* name;
    std::vector<OutputSpec> outputs;
  };
  const Workload workloads[] = {
      {"classify", {workloads::classify_spec()}},
      {"detect", {workloads::detect_spec()}},
      {"classify+detect+thumb", {workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()}}};
  ControlSpec spec;   // every loop on: the most work per iteration
  spec.enabled = true;
  spec.auto_gain.enabled = true;
  spec.health.enabled = true;
  spec.roi_follow.enabled = true;
  constexpr int kDelays[] = {1, 2};
  std::printf("\n| workload | plain GPU µs/frame | d=1 GPU µs/frame | overhead | d=2 GPU µs/frame | overhead | "
              "plain host CPU µs/frame | d=1 host CPU | overhead | d=2 host CPU | overhead |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool failed = false, found = false;
  for (const Workload& w : workloads) {
    if (!only.empty() && only != w.name) continue;
    found = true;
    std::vector<OutputPlan> plans;
    for (const auto& s : w.outputs) plans.push_back(make_output_plan(s, info, w.name));
    spec.roi_follow.output = plans[0].name;
    spec.roi_follow.bounds = {0, 0, 1, 1, true};
    const auto plain = make_instances(info, plans, frames, nullptr, stream);
    control::CudaControl controls[std::size(kDelays)];
    std::vector<std::vector<std::unique_ptr<Instance>>> controlled;
    for (size_t m = 0; m < std::size(kDelays); ++m) {
      spec.delay_frames = kDelays[m];
      controls[m].setup(control::make_control_params(spec, info, plans, 30, w.name), stream);
      controlled.push_back(make_instances(info, plans, frames, &controls[m], stream));
    }
    Timing tp, tc[std::size(kDelays)], warm_up;
    size_t np = 0, nc[std::size(kDelays)] = {};
    for (int s = -2; s < samples; ++s) {   // two untimed rounds first
      sample(plain, np, stream, s < 0 ? warm_up : tp);
      for (size_t m = 0; m < std::size(kDelays); ++m) sample(controlled[m], nc[m], stream, s < 0 ? warm_up : tc[m]);
    }
    const double gp = median(tp.gpu_us), cp = median(tp.cpu_us);
    std::printf("| %s | %.2f", w.name, gp);
    for (const Timing& t : tc) std::printf(" | %.2f | %+.1f%%", median(t.gpu_us), 100 * (median(t.gpu_us) - gp) / gp);
    std::printf(" | %.2f", cp);
    for (const Timing& t : tc) std::printf(" | %.2f | %+.1f%%", median(t.cpu_us), 100 * (median(t.cpu_us) - cp) / cp);
    std::printf(" |\n");
    for (size_t m = 0; m < std::size(kDelays); ++m) {   // every replay was an iteration, the open one flushed
      controls[m].flush(stream);
      cuda::check(cudaStreamSynchronize(stream), "replays");
      const auto record = controls[m].record();
      if (!record || record->iteration + 1 != nc[m]) {
        std::printf("ERROR %s, d=%d: control completed %llu iterations, %zu were replayed\n", w.name, kDelays[m],
                    record ? static_cast<unsigned long long>(record->iteration + 1) : 0ull, nc[m]);
        failed = true;
      }
    }
  }
  if (!found) {
    std::fprintf(stderr, "control_bench: no workload '%s' (classify, detect, classify+detect+thumb)\n", only.c_str());
    return 1;
  }
  return failed ? 2 : 0;
}

}  // namespace
}  // namespace framefuse::bench

int main(int argc, char** argv) {
  int samples = 21;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--samples") == 0 && i + 1 < argc) {
      samples = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--workload") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      std::fprintf(stderr, "usage: control_bench [--samples N] [--workload NAME]\n");
      return 1;
    }
  }
  if (samples < 1) {
    std::fprintf(stderr, "control_bench: --samples must be at least 1\n");
    return 1;
  }
  try {
    return framefuse::bench::run(samples, only);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "control_bench: %s\n", e.what());
    return 1;
  }
}
