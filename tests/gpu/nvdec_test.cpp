//! NVDEC against software decoding of the sample clip (samples/sample_720p.mp4, made by
//! tools/make_sample_clip): the same pixels (H.264 decoding is exact), the same tensors through the
//! CUDA executor (NVDEC surfaces read in place vs pinned pool frames vs staged host frames; frames
//! copied on the executor's own stream vs the legacy default stream), one shared CUDA context
//! for every decoder of a GPU, a looped clip that keeps its decoder, and a decoder with surfaces
//! for the frames its consumer holds. Skipped (exit 77 when only these run) where the
//! clip has not been made.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/decode/cuda_device_context.hpp"
#include "pipeline/decode/video_source.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "pipeline/exec/device.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "pipeline/workloads.hpp"
#include "tests/support/media_fixtures.hpp"

extern "C" {
#include <libavutil/buffer.h>
#include <libavutil/log.h>
}

namespace framefuse::test {
namespace {

constexpr int kFrames = 8;

std::filesystem::path sample_clip() {
  const char* root = std::getenv("FRAMEFUSE_SOURCE_DIR");
  return std::filesystem::path(root ? root : ".") / "samples" / "sample_720p.mp4";
}

DecodeOptions nvdec() {
  DecodeOptions o;
  o.decoder = DecoderKind::Nvdec;
  o.cuda_device = 0;
  return o;
}

DecodeOptions software(std::shared_ptr<FramePool> pool = nullptr) {
  DecodeOptions o;
  o.decoder = DecoderKind::Cpu;
  o.pool = std::move(pool);
  return o;
}

//! The first kFrames frames of `clip`, decoded as `options` says.
std::vector<DecodedFrame> decode(const std::filesystem::path& clip, DecodeOptions options) {
  SourceSpec spec;
  spec.uri = clip.string();
  spec.max_frames = kFrames;
  VideoSource source(spec, "nvdec", std::move(options));
  source.open();
  std::vector<DecodedFrame> frames;
  while (auto f = source.read()) frames.push_back(std::move(*f));
  return frames;
}

//! NV12 planes as yuv420p planes (U and V de-interleaved).
Planes nv12_as_yuv420p(const Planes& nv12) {
  Planes out{nv12[0], {}, {}};
  for (size_t i = 0; i + 1 < nv12[1].size(); i += 2) {
    out[1].push_back(nv12[1][i]);
    out[2].push_back(nv12[1][i + 1]);
  }
  return out;
}

class Nvdec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    av_log_set_level(AV_LOG_ERROR);
    // The runtime's primary context is active (with its default flags) before any decoder opens,
    // as in the daemon, where executors may start first.
    cuda::check(cudaSetDevice(0), "cudaSetDevice");
    cuda::check(cudaFree(nullptr), "cudaFree");
  }
  void SetUp() override {
    clip = sample_clip();
    if (!std::filesystem::exists(clip)) GTEST_SKIP() << clip << " not found (run tools/make_sample_clip)";
  }
  std::filesystem::path clip;
};

TEST_F(Nvdec, DecodesTheSamePixelsAsSoftware) {
  const auto gpu = decode(clip, nvdec());
  const auto cpu = decode(clip, software());
  ASSERT_EQ(gpu.size(), size_t(kFrames));
  ASSERT_EQ(cpu.size(), size_t(kFrames));
  for (int b = 0; b < kFrames; ++b) {
    EXPECT_EQ(gpu[b].memory, FrameMemory::Device);
    EXPECT_EQ(gpu[b].info.format, ops::PixelFormat::Nv12);
    EXPECT_EQ(cpu[b].info.format, ops::PixelFormat::Yuv420p);
    FrameInfo same = gpu[b].info;
    same.format = cpu[b].info.format;
    EXPECT_EQ(same, cpu[b].info) << "size and colour metadata";
    const DecodedFrame host = to_host(gpu[b]);
    EXPECT_EQ(host.memory, FrameMemory::Host);
    EXPECT_TRUE(nv12_as_yuv420p(tight_planes(host)) == tight_planes(cpu[b])) << "frame " << b;
  }
}

TEST_F(Nvdec, TensorsMatchSoftwareDecodeThroughTheCudaExecutor) {
  auto pool = FramePool::create(default_pool_frames(kFrames, 0, true), 0);
  ASSERT_EQ(pool->memory(), FrameMemory::Pinned);
  const auto pinned = decode(clip, software(pool));
  const auto surfaces = decode(clip, nvdec());
  ASSERT_EQ(pinned.size(), size_t(kFrames));
  ASSERT_EQ(surfaces.size(), size_t(kFrames));
  std::vector<ops::ImageView> pinned_views, surface_views;
  std::vector<FrameMemory> pinned_memory, surface_memory;
  for (int b = 0; b < kFrames; ++b) {
    ASSERT_EQ(pinned[b].memory, FrameMemory::Pinned);
    ASSERT_EQ(surfaces[b].memory, FrameMemory::Device);
    pinned_views.push_back(pinned[b].view);
    pinned_memory.push_back(pinned[b].memory);
    surface_views.push_back(surfaces[b].view);
    surface_memory.push_back(surfaces[b].memory);
  }
  const FrameInfo& sw_info = pinned[0].info;
  const FrameInfo& hw_info = surfaces[0].info;
  const std::vector<OutputSpec> specs{workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()};
  std::vector<OutputPlan> plans;
  for (const auto& s : specs) plans.push_back(make_output_plan(s, sw_info, "nvdec/" + s.name));

  auto staged = poisoned_outputs(plans, kFrames), direct = poisoned_outputs(plans, kFrames),
       in_place = poisoned_outputs(plans, kFrames);
  CudaExecutor gpu(0);
  gpu.setup(sw_info, make_color_params(ColorSpec{}, sw_info), plans, kFrames);
  gpu.process(pinned_views, pointers(staged));   // read as Host: staged through the executor's buffer
  gpu.process_frames(pinned_views, pinned_memory, pointers(direct));   // DMA straight from the slots
  gpu.setup(hw_info, make_color_params(ColorSpec{}, hw_info), plans, kFrames);
  gpu.process_frames(surface_views, surface_memory, pointers(in_place));   // NVDEC surfaces, no copy
  for (size_t k = 0; k < plans.size(); ++k) {
    EXPECT_TRUE(same_bytes(direct[k], staged[k])) << "output " << specs[k].name << ": pinned vs staged upload";
    EXPECT_TRUE(matches_cpu(in_place[k], staged[k], specs[k].dtype)) << "output " << specs[k].name << ": NVDEC";
  }
}

TEST_F(Nvdec, FramesCopiedOnTheExecutorsStreamGiveTheSameTensors) {
  // As a pipeline runs: the decoder copies its frames on the executor's frames stream, and each
  // frame is submitted as soon as it is read (two in flight), with no event; against the shared
  // context's frames (legacy default stream, one batch after decoding).
  const auto surfaces = decode(clip, nvdec());
  ASSERT_EQ(surfaces.size(), size_t(kFrames));
  const FrameInfo& info = surfaces[0].info;
  const std::vector<OutputSpec> specs{workloads::classify_spec(), workloads::detect_spec()};
  std::vector<OutputPlan> plans;
  for (const auto& s : specs) plans.push_back(make_output_plan(s, info, "nvdec/" + s.name));
  std::vector<ops::ImageView> views;
  std::vector<FrameMemory> memory;
  for (const auto& f : surfaces) {
    views.push_back(f.view);
    memory.push_back(f.memory);
  }
  auto legacy = poisoned_outputs(plans, kFrames);
  {
    CudaExecutor gpu(0);
    gpu.setup(info, make_color_params(ColorSpec{}, info), plans, kFrames);
    gpu.process_frames(views, memory, pointers(legacy));
  }

  const std::shared_ptr<CUstream_st> stream = make_frames_stream(DeviceSpec{DeviceKind::Cuda, 0});
  DecodeOptions options = nvdec();
  options.cuda_stream = stream;
  SourceSpec spec;
  spec.uri = clip.string();
  spec.max_frames = kFrames;
  VideoSource source(spec, "nvdec-stream", options);
  source.open();
  CudaExecutor gpu(0, {.in_flight = 2, .frames_stream = stream.get()});
  gpu.setup(info, make_color_params(ColorSpec{}, info), plans, 1);
  std::vector<std::vector<std::vector<std::byte>>> got;
  std::vector<DecodedFrame> decoded;
  const auto complete_one = [&] {
    got.push_back(poisoned_outputs(plans, 1));
    gpu.complete(pointers(got.back()));
  };
  while (auto f = source.read()) {
    ASSERT_EQ(f->memory, FrameMemory::Device);
    if (gpu.in_flight() == gpu.max_in_flight()) complete_one();
    gpu.submit({&f->view, 1}, {&f->memory, 1}, {&f->owner, 1});
    decoded.push_back(std::move(*f));
  }
  while (gpu.in_flight() > 0) complete_one();
  ASSERT_EQ(got.size(), size_t(kFrames));
  for (int b = 0; b < kFrames; ++b) {
    EXPECT_TRUE(tight_planes(to_host(decoded[size_t(b)])) == tight_planes(to_host(surfaces[size_t(b)])))
        << "frame " << b << ": the same pixels, transferred on the frames stream";
    for (size_t k = 0; k < plans.size(); ++k) {
      const size_t bytes = plans[k].bytes_per_frame;
      EXPECT_TRUE(same_bytes(got[size_t(b)][k], std::span(legacy[k]).subspan(size_t(b) * bytes, bytes)))
          << "frame " << b << " output " << specs[k].name;
    }
  }
}

TEST_F(Nvdec, LoopedClipKeepsItsDecoder) {
  // A looped file goes on with the same NVDEC decoder (no flush at the loop, which would make
  // FFmpeg re-create it and free its surfaces every pass): each pass gives the first pass's
  // pixels, timestamps go on at the clip's rate.
  SourceSpec spec;
  spec.uri = clip.string();
  spec.loop = true;
  spec.max_frames = 200;
  VideoSource source(spec, "nvdec-loop", nvdec());
  source.open();
  std::vector<Planes> first_pass;
  std::vector<double> pts;
  int64_t pass_frames = 0;
  while (auto f = source.read()) {
    ASSERT_EQ(f->memory, FrameMemory::Device);
    pts.push_back(f->pts_seconds);
    const int64_t i = f->index;
    if (i > 0 && pass_frames == 0 && tight_planes(to_host(*f)) == first_pass.front()) pass_frames = i;
    if (pass_frames == 0) {
      first_pass.push_back(tight_planes(to_host(*f)));
    } else {
      EXPECT_TRUE(tight_planes(to_host(*f)) == first_pass[size_t(i % pass_frames)]) << "frame " << i;
    }
  }
  ASSERT_EQ(pts.size(), 200u);
  EXPECT_GT(pass_frames, 0) << "no frame equal to the first one came back";
  EXPECT_LT(pass_frames, 100) << "the clip is shorter than two passes of 200 frames";
  EXPECT_EQ(source.decoder(), DecoderKind::Nvdec);
  EXPECT_EQ(source.decoder_setups(), 1) << "the decoder was set up again at a loop";
  for (size_t i = 1; i < pts.size(); ++i) EXPECT_NEAR(pts[i] - pts[i - 1], 1.0 / 30, 1e-3) << "frame " << i;
}

TEST_F(Nvdec, HeldFramesGetSurfacesOfTheirOwn) {
  // A consumer that holds many frames at once (a deep queue, a batch group): each keeps one of
  // the decoder's surfaces, so the decoder must get that many more (FFmpeg 5.1's default pool ran
  // dry with 12 held: "No decoder surfaces left", then frames without data).
  constexpr size_t kHeld = 16;   // + the clip's own 11 surfaces: within NVDEC's 32
  constexpr int kRead = 80;
  DecodeOptions options = nvdec();
  options.held_frames = int(kHeld);
  SourceSpec spec;
  spec.uri = clip.string();
  spec.max_frames = kRead;
  VideoSource source(spec, "nvdec-held", options);
  source.open();
  const auto reference = decode(clip, software());   // the first kFrames frames
  std::deque<DecodedFrame> held;
  int read = 0;
  while (auto f = source.read()) {
    ASSERT_EQ(f->memory, FrameMemory::Device) << "frame " << read;
    if (read < kFrames) {
      EXPECT_TRUE(nv12_as_yuv420p(tight_planes(to_host(*f))) == tight_planes(reference[size_t(read)])) << "frame " << read;
    }
    held.push_back(std::move(*f));
    if (held.size() > kHeld) held.pop_front();
    ++read;
  }
  EXPECT_EQ(read, kRead);
  EXPECT_EQ(source.decode_errors(), 0u);
  EXPECT_EQ(source.decoder(), DecoderKind::Nvdec);
  EXPECT_GE(source.decode_surfaces(), int(kHeld));
}

TEST_F(Nvdec, DecodersShareOneContextPerGpu) {
  AVBufferRef* a = cuda_decode_device(0);
  AVBufferRef* b = cuda_decode_device(0);
  EXPECT_EQ(a->data, b->data) << "one AVHWDeviceContext per GPU";
  av_buffer_unref(&a);
  av_buffer_unref(&b);

  constexpr int kStreams = 8;
  constexpr size_t kMiB = size_t(1) << 20;
  size_t free_before = 0, free_after = 0, total = 0;
  cuda::check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
  std::vector<std::unique_ptr<VideoSource>> sources;
  std::vector<DecodedFrame> frames;
  for (int i = 0; i < kStreams; ++i) {
    SourceSpec spec;
    spec.uri = clip.string();
    sources.push_back(std::make_unique<VideoSource>(spec, "stream" + std::to_string(i), nvdec()));
    sources.back()->open();
    auto f = sources.back()->read();   // the NVDEC decoder is created at the first frame
    ASSERT_TRUE(f.has_value()) << "stream " << i;
    EXPECT_EQ(f->memory, FrameMemory::Device);
    EXPECT_EQ(sources.back()->decoder(), DecoderKind::Nvdec);
    frames.push_back(std::move(*f));
  }
  cuda::check(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
  const double used_mib = double(int64_t(free_before) - int64_t(free_after)) / double(kMiB);
  const double per_stream_mib = used_mib / kStreams;
  std::printf("nvdec: %d open 720p streams took %.1f MiB of device memory, %.1f MiB each\n", kStreams, used_mib,
              per_stream_mib);
  EXPECT_LT(per_stream_mib, 200.0) << "a CUDA context per stream costs ~600 MiB each";
}

}  // namespace
}  // namespace framefuse::test
