//! CPU throughput of the fused chain vs OpenCV doing the same work unfused (cvtColor, resize, ROI,
//! copyMakeBorder, split, convertTo), on 1920x1080 NV12 frames, with equal thread counts.
//!  classify: shorter side 256 -> centre crop 224 -> ImageNet normalize -> CHW f32
//!  detect:   letterbox 640x640 (pad 114) -> /255 -> CHW f16
//!  three:    classify + detect + a 320x180 area-filtered u8 HWC thumbnail, from one frame
//! Each iteration times one frame through ours and one through OpenCV (alternating which goes
//! first, on different frames); the reported time is ours, counters give both rates and the ratio
//! (of the sums), and the ratio of the per-frame medians (`median_ratio`: robust to the other
//! processes of a shared host preempting a few frames of either side).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <thread>
#include <vector>

#include "pipeline/workloads.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "tests/bench/bench_stats.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse {
namespace {

using bench::median;

constexpr int kW = 1920, kH = 1080, kFrames = 4;
constexpr float kMean[3] = {0.485f, 0.456f, 0.406f}, kStd[3] = {0.229f, 0.224f, 0.225f};

enum class Work { Classify, Detect, Three };

//! The canonical workloads; the thumbnail here is INTER_AREA, as the OpenCV chain it is compared with.
OutputSpec thumb_spec() {
  OutputSpec s = workloads::thumbnail_spec();
  s.name = "thumb";
  s.interp = ops::Interp::Area;
  return s;
}

std::vector<OutputSpec> specs(Work w) {
  switch (w) {
    case Work::Classify: return {workloads::classify_spec()};
    case Work::Detect: return {workloads::detect_spec()};
    case Work::Three: break;
  }
  return {workloads::classify_spec(), workloads::detect_spec(), thumb_spec()};
}

//! Our fused executor with its output buffers; the layout of outs is what OpenCvChain writes too.
struct Fused {
  std::vector<OutputPlan> plans;
  CpuExecutor exec;
  std::vector<std::vector<std::byte>> outs;
  std::vector<std::byte*> ptrs;

  Fused(Work w, int threads, const FrameInfo& frame) : exec(threads) {
    for (const auto& s : specs(w)) plans.push_back(make_output_plan(s, frame, "cpu_bench"));
    exec.setup(frame, make_color_params({}, frame), plans, 1);
    outs = test::poisoned_outputs(plans, 1);
    ptrs = test::pointers(outs);
  }
  void run(const ops::ImageView& v) { exec.process(std::span(&v, 1), ptrs); }
};

//! What a user writes with OpenCV for the same outputs, writing into the same tensor layouts.
struct OpenCvChain {
  Work work;
  std::vector<std::vector<std::byte>> outs;
  cv::Mat rgb, cls_resized, det_resized, det_boxed;
  std::vector<cv::Mat> cls_planes, det_planes;   // one set per output: split reuses them, no reallocation

  OpenCvChain(Work w, const std::vector<OutputPlan>& plans) : work(w), outs(test::poisoned_outputs(plans, 1)) {}

  void run(const test::HostImage& f) {
    const cv::Mat y(kH, kW, CV_8UC1, const_cast<uint8_t*>(f.planes[0].data()), f.pitch[0]);
    const cv::Mat uv(kH / 2, kW / 2, CV_8UC2, const_cast<uint8_t*>(f.planes[1].data()), f.pitch[1]);
    cv::cvtColorTwoPlane(y, uv, rgb, cv::COLOR_YUV2RGB_NV12);
    size_t k = 0;
    if (work != Work::Detect) {   // torchvision Resize(256) + CenterCrop(224) + Normalize
      cv::resize(rgb, cls_resized, cv::Size(455, 256), 0, 0, cv::INTER_LINEAR);
      cv::split(cls_resized(cv::Rect(116, 16, 224, 224)), cls_planes);
      auto* dst = reinterpret_cast<float*>(outs[k++].data());
      for (int c = 0; c < 3; ++c) {
        cv::Mat plane(224, 224, CV_32F, dst + c * 224 * 224);
        cls_planes[c].convertTo(plane, CV_32F, 1.0 / (255.0 * kStd[c]), -kMean[c] / kStd[c]);
      }
    }
    if (work != Work::Classify) {   // letterbox 640x640, /255, CHW f16
      cv::resize(rgb, det_resized, cv::Size(640, 360), 0, 0, cv::INTER_LINEAR);
      cv::copyMakeBorder(det_resized, det_boxed, 140, 140, 0, 0, cv::BORDER_CONSTANT, cv::Scalar::all(114));
      cv::split(det_boxed, det_planes);
      auto* dst = reinterpret_cast<uint16_t*>(outs[k++].data());
      for (int c = 0; c < 3; ++c) {
        cv::Mat plane(640, 640, CV_16F, dst + c * 640 * 640);
        det_planes[c].convertTo(plane, CV_16F, 1.0 / 255.0);
      }
    }
    if (work == Work::Three) {   // thumbnail straight into the output buffer
      cv::Mat thumb(180, 320, CV_8UC3, outs[k].data());
      cv::resize(rgb, thumb, thumb.size(), 0, 0, cv::INTER_AREA);
    }
  }
};

//! Largest difference between the two implementations' outputs, in 0..255 pixel units.
double max_diff_pixels(const Fused& ours, const OpenCvChain& theirs) {
  double worst = 0;
  for (size_t k = 0; k < ours.plans.size(); ++k) {
    const auto& p = ours.plans[k];
    const auto a = test::to_double(ours.outs[k], p.params.store.dtype);
    const auto b = test::to_double(theirs.outs[k], p.params.store.dtype);
    const int plane = p.width() * p.height();
    for (size_t i = 0; i < a.size(); ++i) {
      const int c = p.params.store.layout == ops::Layout::Chw ? static_cast<int>(i / plane) : static_cast<int>(i % 3);
      worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(p.params.norm.mul[c]));
    }
  }
  return worst;
}

void run_compare(benchmark::State& state, Work work, int threads) {
  std::vector<test::HostImage> frames;
  for (int i = 0; i < kFrames; ++i) frames.push_back(test::random_image(ops::PixelFormat::Nv12, kW, kH, 100u + i));
  const FrameInfo frame = test::frame_info(frames[0]);
  cv::setNumThreads(threads);
  Fused ours(work, threads, frame);
  OpenCvChain theirs(work, ours.plans);
  ours.run(frames[0].view());
  theirs.run(frames[0]);
  state.counters["max_diff_px"] = max_diff_pixels(ours, theirs);

  using Clock = std::chrono::steady_clock;
  double t_ours = 0, t_cv = 0;
  std::vector<double> each_ours, each_cv;
  int64_t i = 0;
  for (auto _ : state) {
    const test::HostImage& a = frames[i % kFrames];
    const test::HostImage& b = frames[(i + kFrames / 2) % kFrames];
    double dt_ours = 0, dt_cv = 0;
    for (int turn = 0; turn < 2; ++turn) {
      const auto t0 = Clock::now();
      if ((turn == 0) == (i % 2 == 0)) {
        ours.run(a.view());
        dt_ours = std::chrono::duration<double>(Clock::now() - t0).count();
      } else {
        theirs.run(b);
        dt_cv = std::chrono::duration<double>(Clock::now() - t0).count();
      }
    }
    state.SetIterationTime(dt_ours);
    t_ours += dt_ours;
    t_cv += dt_cv;
    each_ours.push_back(dt_ours);
    each_cv.push_back(dt_cv);
    ++i;
  }
  benchmark::DoNotOptimize(ours.outs[0].data());
  benchmark::DoNotOptimize(theirs.outs[0].data());
  state.counters["threads"] = threads;
  state.counters["ours_fps"] = double(i) / t_ours;
  state.counters["opencv_fps"] = double(i) / t_cv;
  state.counters["ours_over_opencv"] = t_cv / t_ours;   // > 1: fused is faster
  state.counters["median_ratio"] = median(each_cv) / median(each_ours);
}

void register_all() {
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> thread_counts{1};
  if (all > 1) thread_counts.push_back(all);
  const std::pair<Work, const char*> works[] = {
      {Work::Classify, "classify"}, {Work::Detect, "detect"}, {Work::Three, "three_outputs"}};
  for (const auto& [work, name] : works) {
    for (const int t : thread_counts) {
      benchmark::RegisterBenchmark(("fused_vs_opencv/" + std::string(name) + "/threads:" + std::to_string(t)).c_str(),
                                   [work = work, t](benchmark::State& s) { run_compare(s, work, t); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(2.0);
    }
  }
}

}  // namespace
}  // namespace framefuse

int main(int argc, char** argv) {
  framefuse::register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
