//! Decoded frames of the sample clip (samples/sample_720p.mp4, made by tools/make_sample_clip)
//! through the CPU and the CUDA executor: real video statistics instead of uniform noise. Skipped
//! (exit 77 when it is the only test selected) where the clip has not been made.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "pipeline/decode/video_source.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "pipeline/workloads.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "tests/support/media_fixtures.hpp"

namespace framefuse::test {
namespace {

TEST(SampleClip, CudaMatchesCpuOnDecodedFrames) {
  const std::filesystem::path clip = sample_clip("sample_720p.mp4");
  if (!std::filesystem::exists(clip)) GTEST_SKIP() << clip << " not found (run tools/make_sample_clip)";

  constexpr int kFrames = 8;
  SourceSpec spec;
  spec.uri = clip.string();
  spec.max_frames = kFrames;
  VideoSource source(spec, "gpu-sample");
  source.open();
  std::vector<DecodedFrame> frames;
  while (auto f = source.read()) frames.push_back(std::move(*f));
  ASSERT_EQ(frames.size(), size_t(kFrames)) << clip;
  std::vector<ops::ImageView> views;
  for (const auto& f : frames) {
    ASSERT_EQ(f.info, frames[0].info) << "frame " << f.index << " changed format mid-clip";
    views.push_back(f.view);
  }
  const FrameInfo& info = frames[0].info;
  const ops::ColorParams color = make_color_params(ColorSpec{}, info);
  const std::vector<OutputSpec> specs{workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()};
  std::vector<OutputPlan> plans;
  for (const auto& s : specs) plans.push_back(make_output_plan(s, info, "sample/" + s.name));

  auto ref = poisoned_outputs(plans, kFrames), got = poisoned_outputs(plans, kFrames);
  CpuExecutor cpu(0);
  cpu.setup(info, color, plans, kFrames);
  cpu.process(views, pointers(ref));
  CudaExecutor gpu(0);
  gpu.setup(info, color, plans, kFrames);
  gpu.process(views, pointers(got));
  for (size_t k = 0; k < plans.size(); ++k)
    EXPECT_TRUE(matches_cpu(got[k], ref[k], specs[k].dtype)) << describe(info) << " output " << specs[k].name;
}

}  // namespace
}  // namespace framefuse::test
