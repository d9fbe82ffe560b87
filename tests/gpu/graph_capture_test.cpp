//! FusedPreprocess::run captured once into a CUDA graph and replayed with different set_batch
//! contents: the graph's staging kernel re-reads the parameter block from pinned memory, so new
//! frames, output tensors and batch sizes take effect without re-capture.
#include <gtest/gtest.h>

#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/fused/fused_preprocess.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "pipeline/workloads.hpp"

namespace framefuse::test {
namespace {

TEST(GraphCapture, ReplaysWithNewBatchContents) {
  constexpr int kMax = 3, kFrames = 6;
  std::vector<HostImage> images;
  std::vector<DeviceImage> dev;
  for (int i = 0; i < kFrames; ++i) {
    images.push_back(random_image(ops::PixelFormat::Nv12, 640, 360, 900u + i));
    dev.push_back(upload(images.back()));
  }
  const FrameInfo info = frame_info(images[0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  const ops::ColorParams color = make_color_params(ColorSpec{}, info);
  OutputSpec gray = workloads::thumbnail_spec();
  gray.channels = ChannelOrder::Gray;
  const std::vector<OutputSpec> specs{workloads::classify_spec(), workloads::detect_spec(), gray};
  std::vector<OutputPlan> plans;
  for (const auto& s : specs) plans.push_back(make_output_plan(s, info, "graph/" + s.name));

  DeviceOutputs out_a(plans, kMax), out_b(plans, kMax);
  FusedPreprocess fused;
  fused.setup(info, plans, kMax);
  const auto slots_of = [&](std::vector<int> idx) {
    std::vector<FrameSlot> s;
    for (const int i : idx) s.push_back({dev[size_t(i)].view, color});
    return s;
  };
  fused.set_batch(slots_of({0, 1, 2}), out_a.ptrs());

  const cuda::Stream stream = cuda::make_stream();
  const cuda::CapturedGraph captured = cuda::capture_graph(stream, [&](cudaStream_t s) { fused.run(s); });
  EXPECT_EQ(captured.nodes, 2u) << "expected the parameter staging kernel and the one fused kernel";
  const cuda::GraphExec& exec = captured.exec;

  struct Replay {
    std::vector<int> frames;
    DeviceOutputs* outs;
  };
  const Replay replays[] = {{{0, 1, 2}, &out_a}, {{3, 4}, &out_b}, {{5, 0, 3}, &out_a}, {{2}, &out_b}};
  CpuExecutor cpu(0);
  cpu.setup(info, color, plans, kMax);
  for (const auto& r : replays) {
    SCOPED_TRACE("replay of " + std::to_string(r.frames.size()) + " frame(s), first " + std::to_string(r.frames[0]));
    const int n = static_cast<int>(r.frames.size());
    std::vector<ops::ImageView> views;
    for (const int i : r.frames) views.push_back(images[size_t(i)].view());
    auto ref = poisoned_outputs(plans, n);
    cpu.process(views, pointers(ref));

    r.outs->poison(0xFF);
    fused.set_batch(slots_of(r.frames), r.outs->ptrs());
    cuda::check(cudaGraphLaunch(exec, stream), "graph launch");
    cuda::check(cudaStreamSynchronize(stream), "graph replay");
    const auto got = r.outs->download();
    for (size_t k = 0; k < plans.size(); ++k) {
      const size_t used = plans[k].bytes_per_frame * size_t(n);
      const std::span<const std::byte> all(got[k]);
      EXPECT_TRUE(matches_cpu(all.first(used), ref[k], specs[k].dtype)) << "output " << specs[k].name;
      // Frames past the batch's num_frames must stay untouched.
      const std::vector<std::byte> poison(all.size() - used, std::byte{0xFF});
      EXPECT_TRUE(same_bytes(all.subspan(used), poison)) << "output " << specs[k].name << " past the batch";
    }
  }
}

}  // namespace
}  // namespace framefuse::test
