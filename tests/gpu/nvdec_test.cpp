//! NVDEC against software decoding of the sample clips (samples/, made by tools/make_sample_clip):
//! for each clip (H.264 and HEVC, 8-bit NV12 and 10-bit P010, with B-frames and camera-style) the
//! same pixels (decoding is exact) with the fewest surfaces its parameter sets allow, and the same
//! tensors through the CUDA executor (NVDEC frames read in place vs pinned pool frames vs staged host
//! frames). On the 720p H.264 clip: frames submitted as they are read, one shared CUDA context for
//! every decoder of a GPU, a looped clip that keeps its decoder, a consumer holding more frames than
//! NVDEC has surfaces. And a change of resolution mid-stream (H.264; HEVC from 8 to 10 bits). Skipped
//! where the clips have not been made.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <memory>
#include <ostream>
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

//! P010 planes as yuv420p10 planes: little-endian u16 samples moved to the low 10 bits, U and V
//! de-interleaved.
Planes p010_as_yuv420p10(const Planes& p010) {
  Planes out(3);
  const auto put = [](std::vector<uint8_t>& plane, const std::vector<uint8_t>& from, size_t i) {
    const unsigned v = unsigned(from[i] | from[i + 1] << 8) >> 6;
    plane.push_back(uint8_t(v));
    plane.push_back(uint8_t(v >> 8));
  };
  for (size_t i = 0; i + 1 < p010[0].size(); i += 2) put(out[0], p010[0], i);
  for (size_t i = 0; i + 3 < p010[1].size(); i += 4) {
    put(out[1], p010[1], i);
    put(out[2], p010[1], i + 2);
  }
  return out;
}

//! Whether the NVDEC frame `gpu` has the pixels of the software-decoded frame `cpu`: NV12 against
//! yuv420p (8-bit), P010 against yuv420p10 (10-bit).
bool same_pixels(const DecodedFrame& gpu, const DecodedFrame& cpu) {
  const Planes planes = tight_planes(to_host(gpu));
  if (gpu.info.format == ops::PixelFormat::Nv12 && cpu.info.format == ops::PixelFormat::Yuv420p)
    return nv12_as_yuv420p(planes) == tight_planes(cpu);
  if (gpu.info.format == ops::PixelFormat::P010 && cpu.info.format == ops::PixelFormat::Yuv420p10)
    return p010_as_yuv420p10(planes) == tight_planes(cpu);
  return false;
}

//! Reads the open NVDEC source `gpu` to its end and, frame by frame beside it, `spec` decoded in
//! software: each NVDEC frame must have the software frame's pixels. `check(i, frame, reference)`
//! sees each pair first and may keep the frame. `read` counts the NVDEC frames.
template <class Check>
void read_beside_software(VideoSource& gpu, const SourceSpec& spec, int& read, Check&& check) {
  VideoSource cpu(spec, "cpu-reference", software());
  cpu.open();
  while (auto f = gpu.read()) {
    const auto reference = cpu.read();
    ASSERT_TRUE(reference.has_value()) << "frame " << read;
    const bool same = same_pixels(*f, *reference);
    check(read, *f, *reference);
    EXPECT_TRUE(same) << "frame " << read;
    ++read;
  }
}

//! The runtime's primary context is active (with its default flags) before any decoder opens, as
//! in the daemon, where executors may start first.
void start_cuda() {
  av_log_set_level(AV_LOG_ERROR);
  cuda::check(cudaSetDevice(0), "cudaSetDevice");
  cuda::check(cudaFree(nullptr), "cudaFree");
}

class Nvdec : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { start_cuda(); }
  void SetUp() override {
    clip = sample_clip("sample_720p.mp4");
    if (!std::filesystem::exists(clip)) GTEST_SKIP() << clip << " not found (run tools/make_sample_clip)";
  }
  std::filesystem::path clip;
};

//! A sample clip and what NVDEC must make of it.
struct ClipCase {
  const char* file;
  ops::PixelFormat nvdec_format;      //!< NVDEC's surfaces
  ops::PixelFormat software_format;   //!< what software decoding hands the ops
  int surfaces;                       //!< decode surfaces: the SPS's decoded picture buffer + 2
  int frames;                         //!< in the whole clip
};

void PrintTo(const ClipCase& c, std::ostream* os) { *os << c.file; }

class NvdecClips : public ::testing::TestWithParam<ClipCase> {
 protected:
  static void SetUpTestSuite() { start_cuda(); }
  void SetUp() override {
    clip = sample_clip(GetParam().file);
    if (!std::filesystem::exists(clip)) GTEST_SKIP() << clip << " not found (run tools/make_sample_clip)";
  }
  std::filesystem::path clip;
};

TEST_P(NvdecClips, WholeClipHasTheSoftwarePixelsWithTheFewestSurfaces) {
  // Too few surfaces would not fail: NVIDIA's parser would overwrite a reference, and frames would
  // decode wrong. So every frame, with the frames a pipeline holds (its queue and ring) held here.
  const ClipCase& c = GetParam();
  SourceSpec spec;
  spec.uri = clip.string();
  VideoSource gpu(spec, "nvdec-clip", nvdec());
  gpu.open();
  EXPECT_EQ(gpu.decode_surfaces(), c.surfaces);
  std::deque<DecodedFrame> held;
  int read = 0;
  read_beside_software(gpu, spec, read, [&](int i, DecodedFrame& f, const DecodedFrame& reference) {
    EXPECT_EQ(f.memory, FrameMemory::Device) << "frame " << i;
    EXPECT_EQ(f.info.format, c.nvdec_format) << "frame " << i;
    EXPECT_EQ(reference.info.format, c.software_format) << "frame " << i;
    FrameInfo same = f.info;
    same.format = reference.info.format;
    EXPECT_EQ(same, reference.info) << "frame " << i << ": size and colour metadata";
    held.push_back(std::move(f));
    if (held.size() > 7) held.pop_front();
  });
  EXPECT_EQ(read, c.frames);
  EXPECT_EQ(gpu.decode_errors(), 0u);
  EXPECT_EQ(gpu.decoder(), DecoderKind::Nvdec);
}

TEST_P(NvdecClips, TensorsMatchSoftwareDecodeThroughTheCudaExecutor) {
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

// Surfaces: H.264 from max_dec_frame_buffering (720p: 4, its references with reordering; camera: 1),
// HEVC from sps_max_dec_pic_buffering_minus1 + 1 (720p with B-frames: 5; camera: 3); + 2 each.
INSTANTIATE_TEST_SUITE_P(
    Clips, NvdecClips,
    ::testing::Values(ClipCase{"sample_720p.mp4", ops::PixelFormat::Nv12, ops::PixelFormat::Yuv420p, 6, 90},
                      ClipCase{"sample_camera_1080p.mp4", ops::PixelFormat::Nv12, ops::PixelFormat::Yuv420p, 3, 60},
                      ClipCase{"sample_hevc_720p.mp4", ops::PixelFormat::Nv12, ops::PixelFormat::Yuv420p, 7, 90},
                      ClipCase{"sample_hevc10_camera_1080p.mp4", ops::PixelFormat::P010, ops::PixelFormat::Yuv420p10, 5, 60}),
    [](const ::testing::TestParamInfo<ClipCase>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.'));
      return name;
    });

TEST_F(Nvdec, FramesSubmittedAsTheyAreReadGiveTheSameTensors) {
  // As a pipeline runs: each frame is submitted as soon as it is read (two in flight), with no
  // event: read() returned it once its copy was done; against the same frames decoded first and
  // processed in one batch.
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
  auto batch = poisoned_outputs(plans, kFrames);
  {
    CudaExecutor gpu(0);
    gpu.setup(info, make_color_params(ColorSpec{}, info), plans, kFrames);
    gpu.process_frames(views, memory, pointers(batch));
  }

  SourceSpec spec;
  spec.uri = clip.string();
  spec.max_frames = kFrames;
  VideoSource source(spec, "nvdec-stream", nvdec());
  source.open();
  CudaExecutor gpu(0, {.in_flight = 2});
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
        << "frame " << b << ": the same pixels";
    for (size_t k = 0; k < plans.size(); ++k) {
      const size_t bytes = plans[k].bytes_per_frame;
      EXPECT_TRUE(same_bytes(got[size_t(b)][k], std::span(batch[k]).subspan(size_t(b) * bytes, bytes)))
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
  int setups = -1;   // after the first frame: NVDEC's decoder asks as it opens and per sequence
  while (auto f = source.read()) {
    if (setups < 0) setups = source.decoder_setups();
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
  EXPECT_EQ(source.decoder_setups(), setups) << "the decoder was set up again at a loop";
  for (size_t i = 1; i < pts.size(); ++i) EXPECT_NEAR(pts[i] - pts[i - 1], 1.0 / 30, 1e-3) << "frame " << i;
}

TEST_F(Nvdec, HeldFramesNeverRunTheDecoderOutOfSurfaces) {
  // A consumer that holds many frames at once (a deep queue, a batch group): each holds a copy,
  // not one of the decoder's surfaces, so it may hold more frames than NVDEC has surfaces (32;
  // FFmpeg 5.1's hwaccel ran dry with 12 held: "No decoder surfaces left", then frames without data).
  constexpr size_t kHeld = 40;
  constexpr int kRead = 80;
  SourceSpec spec;
  spec.uri = clip.string();
  spec.max_frames = kRead;
  VideoSource source(spec, "nvdec-held", nvdec());
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
  // The clip's SPS: max_dec_frame_buffering 4 (its 4 references, reordering included); + the one being
  // decoded + 1 spare. (Every frame above equals software decoding with these 6.)
  EXPECT_EQ(source.decode_surfaces(), 6);
}

TEST_F(Nvdec, AResolutionOrBitDepthChangeMidStreamDecodesBoth) {
  // 720p, then 1080p in one MPEG-TS (each segment with its own parameter sets): NVDEC sets itself
  // up again for the new sequence, in a frames pool of its size and format, and every frame equals
  // software. H.264 staying 8-bit; HEVC going from Main (NV12) to Main 10 (P010).
  struct Splice {
    const char* first;
    const char* second;
    ops::PixelFormat after;   //!< NVDEC's format in the second segment (NV12 in the first)
  };
  const Splice splices[] = {{"sample_720p.mp4", "sample_1080p.mp4", ops::PixelFormat::Nv12},
                            {"sample_hevc_720p.mp4", "sample_hevc10_camera_1080p.mp4", ops::PixelFormat::P010}};
  constexpr int kEach = 10;
  TempDir dir("framefuse_nvdec_splice");
  for (const Splice& s : splices) {
    SCOPED_TRACE(std::string(s.first) + " then " + s.second);
    const std::filesystem::path first = sample_clip(s.first), second = sample_clip(s.second);
    if (!std::filesystem::exists(first) || !std::filesystem::exists(second))
      GTEST_SKIP() << s.first << " or " << s.second << " not found (run tools/make_sample_clip)";
    const std::filesystem::path spliced = dir.path / (std::string(s.first) + "+" + s.second + ".ts");
    concat_as_mpegts(std::vector<std::filesystem::path>{first, second}, spliced, kEach);
    SourceSpec spec;
    spec.uri = spliced.string();
    VideoSource gpu(spec, "nvdec-splice", nvdec());
    gpu.open();
    int read = 0;
    read_beside_software(gpu, spec, read, [&](int i, const DecodedFrame& f, const DecodedFrame& reference) {
      EXPECT_EQ(f.memory, FrameMemory::Device) << "frame " << i;
      EXPECT_EQ(f.info.width, i < kEach ? 1280 : 1920) << "frame " << i;
      EXPECT_EQ(f.info.format, i < kEach ? ops::PixelFormat::Nv12 : s.after) << "frame " << i;
      EXPECT_EQ(f.info.width, reference.info.width) << "frame " << i;
      EXPECT_EQ(f.info.height, reference.info.height) << "frame " << i;
    });
    EXPECT_EQ(read, 2 * kEach);
    EXPECT_EQ(gpu.decode_errors(), 0u);
    EXPECT_EQ(gpu.decoder(), DecoderKind::Nvdec);
  }
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
