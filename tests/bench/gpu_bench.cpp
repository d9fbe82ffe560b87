//! GPU benchmark of the fused chain on 1920x1080 NV12 (not a ctest): the canonical workloads
//! (classify, detect, classify + detect + thumbnail in one launch) at batch 1 and 16, timed as
//!   kernel  the fused kernel alone, parameter block already on the device;
//!   run     FusedPreprocess::run on a stream (parameter upload + kernel), launched back to back;
//!   graph   the same captured into a CUDA graph and replayed;
//!   unfused one kernel per op (tests/bench/unfused_kernels.hpp), on a stream;
//! "cold" rotates among kPoolFrames device frames and as many output sets (well past the 60 MB L2);
//! "warm" reads one frame and writes one output set. Bytes counted ("required"): every output
//! element written once + the 32-byte sectors of the source planes the chain's taps touch (counted
//! on the host by running Chain::pixel with a reader that records addresses), each once per frame.
//! The copy ceiling is a device-to-device cudaMemcpy of 1 GiB, counting bytes read + written. The
//! launch floor: empty kernels launched back to back, on the stream and as graphs of one and two
//! nodes (run's shape: upload + kernel), µs per launch or replay.
//! Usage: gpu_bench [--json FILE] [--rows 0|1|2|4] [--samples N] [--workload NAME] [--batch 1|16]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <spdlog/fmt/fmt.h>
#include <string>
#include <vector>

#include "pipeline/exec/device.hpp"
#include "pipeline/fused/fused_kernel.hpp"
#include "pipeline/fused/fused_preprocess.hpp"
#include "tests/bench/bench_stats.hpp"
#include "tests/bench/unfused_kernels.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "pipeline/workloads.hpp"

namespace framefuse::bench {
namespace {

using test::DeviceImage;
using test::DeviceOutputs;

constexpr int kPoolFrames = 128;   //!< ~470 MB of NV12 on the device
constexpr int kIters = 64;         //!< launches per timed sample

struct Options {
  std::string json;
  int rows = 0;          //!< FusedPreprocess rows_per_thread (0 = its automatic choice)
  int samples = 11;
  std::string workload;  //!< only this workload (empty = all)
  int batch = 0;         //!< only this batch size (0 = 1 and 16)
};

//! Records the 32-byte sectors of an NV12 frame (pitch `pitch`) that Chain::pixel reads.
struct TouchReader {
  int32_t pitch;
  std::vector<uint8_t>* luma;
  std::vector<uint8_t>* chroma;
  ops::Vec3 rgb(int x, int y) const {   // nearest chroma: one UV pair per 2x2 luma block
    (*luma)[(size_t(y) * pitch + x) / 32] = 1;
    (*chroma)[(size_t(y >> 1) * pitch + 2 * size_t(x >> 1)) / 32] = 1;
    return {0.f, 0.f, 0.f};
  }
};

//! Source sectors (bytes) all outputs of `plans` touch in one 1920x1080 NV12 frame.
size_t touched_source_bytes(const FrameInfo& f, std::span<const OutputPlan> plans) {
  const int32_t pitch = (f.width + 31) / 32 * 32;
  std::vector<uint8_t> luma(size_t(pitch) * f.height / 32 + 1), chroma(luma.size() / 2 + 1);
  const TouchReader reader{pitch, &luma, &chroma};
  for (const auto& plan : plans) {
    std::vector<std::byte> scratch(plan.bytes_per_frame);
    ops::Chain::Params p = plan.params;
    p.store.data = scratch.data();
    for (int y = 0; y < p.store.height; ++y)
      for (int x = 0; x < p.store.width; ++x) ops::Chain::pixel(reader, p, 0, x, y);
  }
  return 32 * (size_t(std::count(luma.begin(), luma.end(), 1)) + size_t(std::count(chroma.begin(), chroma.end(), 1)));
}

//! Median over `samples` of the mean time of kIters calls of launch(i) (µs per call), after a
//! warm-up that touches every rotation slot.
template <class Fn>
double time_us(cudaStream_t stream, int samples, Fn&& launch) {
  cuda::Event start = cuda::make_event(true), stop = cuda::make_event(true);
  int i = 0;
  for (; i < 2 * kIters; ++i) launch(i);
  cuda::check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> us;
  for (int s = 0; s < samples; ++s) {
    cuda::check(cudaEventRecord(start, stream), "event");
    for (int n = 0; n < kIters; ++n) launch(i++);
    cuda::check(cudaEventRecord(stop, stream), "event");
    cuda::check(cudaEventSynchronize(stop), "timed loop");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    us.push_back(1e3 * ms / kIters);
  }
  return median(std::move(us));
}

double copy_ceiling_gbps(cudaStream_t stream, int samples) {
  constexpr size_t kBytes = size_t(1) << 30;
  const cuda::DeviceBuffer a = cuda::alloc_device(kBytes), b = cuda::alloc_device(kBytes);
  cuda::check(cudaMemset(a.as(), 0x5A, kBytes), "memset");
  cuda::Event start = cuda::make_event(true), stop = cuda::make_event(true);
  std::vector<double> gbps;
  for (int s = 0; s < samples + 2; ++s) {
    cuda::check(cudaEventRecord(start, stream), "event");
    cuda::check(cudaMemcpyAsync(b.as(), a.as(), kBytes, cudaMemcpyDeviceToDevice, stream), "copy");
    cuda::check(cudaEventRecord(stop, stream), "event");
    cuda::check(cudaEventSynchronize(stop), "copy");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (s >= 2) gbps.push_back(2.0 * kBytes / (ms * 1e-3) / 1e9);
  }
  return median(std::move(gbps));
}

//! One batch configuration: a FusedPreprocess with its frames and outputs, plus its graph and a
//! copy of its parameter block on the device for kernel-only launches.
struct Instance {
  FusedPreprocess fused;
  std::unique_ptr<DeviceOutputs> outs;
  cuda::DeviceBuffer slots;    //!< FrameSlot[batch] for the unfused chain
  cuda::DeviceBuffer params;   //!< device copy of the per-call block, for kernel-only launches
  FusedLaunch launch{};        //!< the kernel's parameter, reading `params`
  cuda::GraphExec graph;
};

std::unique_ptr<Instance> make_instance(const FrameInfo& info, std::span<const OutputPlan> plans,
                                        std::span<const FrameSlot> frames, int rows, cudaStream_t stream) {
  auto in = std::make_unique<Instance>();
  const int batch = static_cast<int>(frames.size());
  in->fused.setup(info, plans, batch, rows);
  in->outs = std::make_unique<DeviceOutputs>(plans, batch);
  in->fused.set_batch(frames, in->outs->ptrs());
  in->slots = cuda::alloc_device(frames.size_bytes());
  cuda::check(cudaMemcpy(in->slots.as(), frames.data(), frames.size_bytes(), cudaMemcpyHostToDevice), "slots");
  in->params = cuda::alloc_device(sizeof(FusedParams));
  cuda::check(cudaMemcpy(in->params.as(), &in->fused.params(), sizeof(FusedParams), cudaMemcpyHostToDevice), "params");
  in->launch = in->fused.launch_data();
  in->launch.block = in->params.as<FusedParams>();
  in->graph = cuda::capture_graph(stream, [&](cudaStream_t st) { in->fused.run(st); }).exec;
  return in;
}

struct Row {
  std::string workload, mode, cache;
  int batch;
  double us_per_frame, gbps, of_copy;
};

struct Workload {
  const char* name;
  std::vector<OutputSpec> outputs;
};

int run(const Options& opt) {
  const CudaProbe probe = probe_cuda();
  if (probe.devices == 0) {
    std::fprintf(stderr, "gpu_bench: no CUDA device (%s)\n", probe.detail.c_str());
    return 1;
  }
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, 0), "device properties");
  const cuda::Stream stream = cuda::make_stream();
  const double copy = copy_ceiling_gbps(stream, opt.samples);
  std::printf("device: %s, %d SMs, L2 %d MB; copy ceiling (D2D cudaMemcpy, read+write): %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, copy);
  std::vector<Row> rows;
  {
    const auto empty = [&](cudaStream_t s) { cuda::check(launch_empty(s), "empty kernel"); };
    const cuda::CapturedGraph one = cuda::capture_graph(stream, empty);
    const cuda::CapturedGraph two = cuda::capture_graph(stream, [&](cudaStream_t s) {
      empty(s);
      empty(s);
    });
    const double launch = time_us(stream, opt.samples, [&](int) { empty(stream); });
    const double graph1 = time_us(stream, opt.samples, [&](int) { cuda::check(cudaGraphLaunch(one.exec, stream), "graph"); });
    const double graph2 = time_us(stream, opt.samples, [&](int) { cuda::check(cudaGraphLaunch(two.exec, stream), "graph"); });
    std::printf("launch floor (empty kernels, µs per launch/replay): stream %.2f, graph of 1 node %.2f, of 2 nodes %.2f\n",
                launch, graph1, graph2);
    rows.push_back({"floor", "kernel", "-", 1, launch, 0, 0});
    rows.push_back({"floor", "graph1", "-", 1, graph1, 0, 0});
    rows.push_back({"floor", "graph2", "-", 1, graph2, 0, 0});
  }

  // Frame pool: 8 distinct random frames, each uploaded kPoolFrames / 8 times (distinct addresses).
  std::vector<test::HostImage> images;
  for (uint32_t s = 0; s < 8; ++s) images.push_back(test::random_image(ops::PixelFormat::Nv12, 1920, 1080, 4242 + s));
  const FrameInfo info = test::frame_info(images[0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  const ops::ColorParams color = make_color_params(ColorSpec{}, info);
  std::vector<DeviceImage> pool;
  for (int i = 0; i < kPoolFrames; ++i) pool.push_back(test::upload(images[size_t(i) % images.size()]));

  const Workload workloads[] = {
      {"classify", {workloads::classify_spec()}},
      {"detect", {workloads::detect_spec()}},
      {"classify+detect+thumb", {workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()}}};
  bool mismatch = false;
  for (const auto& w : workloads) {
    if (!opt.workload.empty() && opt.workload != w.name) continue;
    std::vector<OutputPlan> plans;
    size_t out_bytes = 0;
    for (const auto& s : w.outputs) {
      plans.push_back(make_output_plan(s, info, w.name));
      out_bytes += plans.back().bytes_per_frame;
    }
    const size_t src_bytes = touched_source_bytes(info, plans);
    const double required = double(out_bytes + src_bytes);
    std::printf("%s: required bytes per frame %.3f MB = outputs %.3f MB + source sectors %.3f MB\n", w.name,
                required / 1e6, out_bytes / 1e6, src_bytes / 1e6);
    for (const int batch : {1, 16}) {
      if (opt.batch != 0 && opt.batch != batch) continue;
      const int sets = kPoolFrames / batch;
      std::vector<std::unique_ptr<Instance>> cold;
      for (int s = 0; s < sets; ++s) {
        std::vector<FrameSlot> frames;
        for (int b = 0; b < batch; ++b) frames.push_back({pool[size_t(s * batch + b)].view, color});
        cold.push_back(make_instance(info, plans, frames, opt.rows, stream));
      }
      const std::vector<FrameSlot> same(size_t(batch), FrameSlot{pool[0].view, color});
      const auto warm = make_instance(info, plans, same, opt.rows, stream);
      const int rows_used = warm->fused.rows_per_thread();
      const int32_t tiles = warm->fused.launch_data().tile_begin[kMaxOutputs];
      UnfusedPreprocess unfused;
      unfused.setup(info, plans, batch);

      const auto kernel = [&](const Instance& in) {
        cuda::check(launch_fused(info.format, rows_used, in.launch, 0, batch, stream), "kernel");
      };
      const auto pick = [&](int i) -> const Instance& { return *cold[size_t(i % sets)]; };
      const auto add = [&](const char* mode, const char* cache, double us) {
        const double gbps = required * batch / (us * 1e-6) / 1e9;
        rows.push_back({w.name, mode, cache, batch, us / batch, gbps, gbps / copy});
      };
      add("kernel", "cold", time_us(stream, opt.samples, [&](int i) { kernel(pick(i)); }));
      add("run", "cold", time_us(stream, opt.samples, [&](int i) { pick(i).fused.run(stream); }));
      add("graph", "cold", time_us(stream, opt.samples, [&](int i) {
            cuda::check(cudaGraphLaunch(pick(i).graph, stream), "graph launch");
          }));
      add("unfused", "cold", time_us(stream, opt.samples, [&](int i) {
            unfused.run(pick(i).slots.as<FrameSlot>(), batch, pick(i).outs->ptrs(), stream);
          }));
      add("kernel", "warm", time_us(stream, opt.samples, [&](int) { kernel(*warm); }));
      add("run", "warm", time_us(stream, opt.samples, [&](int) { warm->fused.run(stream); }));
      add("graph", "warm", time_us(stream, opt.samples, [&](int) {
            cuda::check(cudaGraphLaunch(warm->graph, stream), "graph launch");
          }));

      // The unfused chain must compute what the fused one does (it writes the same tensors).
      Instance& first = *cold[0];
      first.outs->poison(0xFF);
      first.fused.run(stream);
      cuda::check(cudaStreamSynchronize(stream), "fused");
      const auto fused_out = first.outs->download();
      first.outs->poison(0xFF);
      unfused.run(first.slots.as<FrameSlot>(), batch, first.outs->ptrs(), stream);
      cuda::check(cudaStreamSynchronize(stream), "unfused");
      const auto unfused_out = first.outs->download();
      for (size_t k = 0; k < plans.size(); ++k) {
        const auto r = test::matches_cpu(unfused_out[k], fused_out[k], w.outputs[k].dtype);
        if (!r) {
          mismatch = true;
          std::printf("MISMATCH %s B=%d output %s: unfused vs fused: %s\n", w.name, batch, plans[k].name.c_str(),
                      r.message());
        }
      }
      std::printf("%s B=%d: rows_per_thread %d, %d blocks, unfused %d launches\n", w.name, batch, rows_used,
                  tiles * batch, unfused.launches());
    }
  }

  const auto find = [&](const std::string& wl, int b, const char* mode, const char* cache) {
    for (const auto& r : rows)
      if (r.workload == wl && r.batch == b && r.mode == mode && r.cache == cache) return r;
    return Row{};
  };
  std::printf("\n| workload | B | kernel cold | run cold | graph cold | unfused cold | kernel warm | run warm | "
              "graph warm | GB/s kernel cold | of copy | GB/s graph cold | of copy | unfused / graph |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& w : workloads) {
    for (const int b : {1, 16}) {
      if (find(w.name, b, "graph", "cold").batch == 0) continue;
      const Row kc = find(w.name, b, "kernel", "cold"), rc = find(w.name, b, "run", "cold"),
                gc = find(w.name, b, "graph", "cold"), uc = find(w.name, b, "unfused", "cold"),
                kw = find(w.name, b, "kernel", "warm"), rw = find(w.name, b, "run", "warm"),
                gw = find(w.name, b, "graph", "warm");
      std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f%% | %.0f | %.0f%% | "
                  "%.1fx |\n",
                  w.name, b, kc.us_per_frame, rc.us_per_frame, gc.us_per_frame, uc.us_per_frame, kw.us_per_frame,
                  rw.us_per_frame, gw.us_per_frame, kc.gbps, 100 * kc.of_copy, gc.gbps, 100 * gc.of_copy,
                  uc.us_per_frame / gc.us_per_frame);
    }
  }
  std::printf("(µs per frame; copy ceiling %.0f GB/s)\n", copy);

  if (!opt.json.empty()) {
    std::ofstream js(opt.json);
    js << fmt::format("{{\"device\": \"{}\", \"copy_gbps\": {:.1f}, \"rows_per_thread_option\": {}, \"results\": [\n",
                      prop.name, copy, opt.rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      js << fmt::format("  {{\"workload\": \"{}\", \"batch\": {}, \"mode\": \"{}\", \"cache\": \"{}\", "
                        "\"us_per_frame\": {:.4f}, \"gbps\": {:.1f}, \"of_copy\": {:.4f}}}{}\n",
                        r.workload, r.batch, r.mode, r.cache, r.us_per_frame, r.gbps, r.of_copy,
                        i + 1 < rows.size() ? "," : "");
    }
    js << "]}\n";
  }
  return mismatch ? 2 : 0;
}

}  // namespace
}  // namespace framefuse::bench

int main(int argc, char** argv) {
  framefuse::bench::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      opt.json = argv[++i];
    } else if (a == "--rows" && i + 1 < argc) {
      opt.rows = std::atoi(argv[++i]);
    } else if (a == "--samples" && i + 1 < argc) {
      opt.samples = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--workload" && i + 1 < argc) {
      opt.workload = argv[++i];
    } else if (a == "--batch" && i + 1 < argc) {
      opt.batch = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: gpu_bench [--json FILE] [--rows 0|1|2|4] [--samples N] [--workload classify|detect|"
                   "classify+detect+thumb] [--batch 1|16]\n");
      return 1;
    }
  }
  try {
    return framefuse::bench::run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}
