//! NVDEC on damaged streams, as a camera or a broken recording sends them: seeded random damage
//! to the media data (the mdat box) of the sample clips (flipped bytes, zeroed runs, one stretch
//! copied over another, truncation), decoded by NVDEC (`decoder: nvdec`, no fallback) and run
//! through the CUDA executor with classify (f32) and detect (f16) outputs. Properties: the only
//! errors are MediaError (a stream NVDEC cannot go on with) and ConfigError (a frame the outputs
//! cannot be planned for), never a CUDA error; every f32 and f16 value written is finite (outputs
//! poisoned with NaN before each frame); NVDEC decodes frames of most damaged clips (the test runs
//! its decode path, not only its refusals); afterwards the device has no sticky error and its free
//! memory is back within one decoder's worth. FRAMEFUSE_GPU_DAMAGE_CASES: cases per clip (default
//! 40; the lane's memcheck runs 6). Skipped (exit 77 when only these run) where the clips were not made.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/workloads.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "tests/support/media_fixtures.hpp"
#include "tests/support/test_images.hpp"

extern "C" {
#include <libavutil/log.h>
}

namespace framefuse::test {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxFrames = 240;   //!< more than either clip has: damage anywhere reaches the decoder
constexpr size_t kOneDecoder = size_t(48) << 20;   //!< more than one 1080p NVDEC decoder's set-up (41.4 MiB)

int cases_per_clip() {
  const char* env = std::getenv("FRAMEFUSE_GPU_DAMAGE_CASES");
  return env ? std::max(1, std::atoi(env)) : 40;
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

//! The byte range [first, last) of the payload of the top-level `mdat` box of an MP4 file.
std::pair<size_t, size_t> mdat_payload(const std::vector<uint8_t>& mp4) {
  for (size_t at = 0; at + 8 <= mp4.size();) {
    uint64_t size = be32(&mp4[at]);
    size_t header = 8;
    if (size == 1 && at + 16 <= mp4.size()) {
      size = uint64_t(be32(&mp4[at + 8])) << 32 | be32(&mp4[at + 12]);
      header = 16;
    } else if (size == 0) {
      size = mp4.size() - at;
    }
    if (size < header) break;
    const size_t end = size_t(std::min<uint64_t>(at + size, mp4.size()));
    if (std::equal(&mp4[at + 4], &mp4[at + 8], "mdat")) return {at + header, end};
    at = end;
  }
  return {0, 0};
}

//! `clip` with one seeded kind of damage inside [first, last): what the test decodes.
std::vector<uint8_t> damaged(std::vector<uint8_t> clip, size_t first, size_t last, std::mt19937& rng) {
  const auto at = [&](size_t span) { return std::uniform_int_distribution<size_t>(first, last - span)(rng); };
  switch (rng() % 4) {
    case 0:   // bit errors
      for (int n = 1 + int(rng() % 32); n > 0; --n) clip[at(1)] ^= uint8_t(1 + rng() % 255);
      break;
    case 1: {   // a lost stretch (zeros)
      const size_t span = 16 + rng() % 8192;
      std::fill_n(clip.begin() + ptrdiff_t(at(span)), span, uint8_t{0});
      break;
    }
    case 2: {   // a stretch of the stream where another should be
      const size_t span = 64 + rng() % 16384;
      const size_t from = at(span), to = at(span);
      const std::vector<uint8_t> stretch(clip.begin() + ptrdiff_t(from), clip.begin() + ptrdiff_t(from + span));
      std::copy(stretch.begin(), stretch.end(), clip.begin() + ptrdiff_t(to));
      break;
    }
    default:   // a recording cut short
      clip.resize(at(1));
      break;
  }
  return clip;
}

//! Every element of `bytes` (dtype f32 or f16) is finite. (to_double would copy every frame's
//! 1.4 M output values into a new vector: ~10 ms a frame.)
bool all_finite(std::span<const std::byte> bytes, ops::DType dtype) {
  if (dtype == ops::DType::F16) {
    for (size_t i = 0; i + 2 <= bytes.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i, sizeof h);
      if ((h & 0x7C00u) == 0x7C00u) return false;   // exponent all ones: inf or NaN
    }
    return true;
  }
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    float f;
    std::memcpy(&f, bytes.data() + i, sizeof f);
    if (!std::isfinite(f)) return false;
  }
  return true;
}

struct CaseResult {
  int nvdec_frames = 0;     //!< frames NVDEC decoded and the executor processed
  std::string stopped_by;   //!< the MediaError or ConfigError that ended the case, if any
};

//! The CUDA executor with classify (f32) and detect (f16) outputs, kept from clip to clip and set up
//! again whenever a frame's size or format differs from the last one it was set up for.
struct GpuOutputs {
  const std::vector<OutputSpec> specs{workloads::classify_spec(), workloads::detect_spec()};
  CudaExecutor gpu{0};
  std::optional<FrameInfo> set_up_for;   //!< empty until a set-up succeeded
  std::vector<OutputPlan> plans;
  std::vector<std::vector<std::byte>> outs;

  //! Runs `f` with the outputs poisoned (0xFF: NaN in f32 and f16); fails the test on a
  //! non-finite value. Throws ConfigError for a frame the outputs cannot be planned for.
  void process(const DecodedFrame& f, int index) {
    if (set_up_for != f.info) {
      set_up_for.reset();
      plans.clear();
      for (const auto& s : specs) plans.push_back(make_output_plan(s, f.info, "damaged/" + s.name));
      gpu.setup(f.info, make_color_params(ColorSpec{}, f.info), plans, 1);
      set_up_for = f.info;
      outs = poisoned_outputs(plans, 1);
    }
    for (auto& o : outs) std::fill(o.begin(), o.end(), std::byte{0xFF});
    const FrameMemory memory[1] = {f.memory};
    gpu.process_frames({&f.view, 1}, memory, pointers(outs));
    for (size_t k = 0; k < plans.size(); ++k)
      EXPECT_TRUE(all_finite(outs[k], specs[k].dtype)) << "output " << specs[k].name << ", frame " << index;
  }
};

//! Decodes `file` with NVDEC (to its end) and runs each frame through `outputs`.
CaseResult run_case(const fs::path& file, GpuOutputs& outputs) {
  SourceSpec spec;
  spec.uri = file.string();
  spec.max_frames = kMaxFrames;
  DecodeOptions options;
  options.decoder = DecoderKind::Nvdec;
  options.cuda_device = 0;
  VideoSource source(spec, "damaged", options);
  CaseResult result;
  try {
    source.open();
    while (const auto f = source.read()) {
      EXPECT_EQ(f->memory, FrameMemory::Device) << "an NVDEC frame outside GPU memory";
      outputs.process(*f, result.nvdec_frames);
      ++result.nvdec_frames;
    }
  } catch (const MediaError& e) {
    result.stopped_by = e.what();
  } catch (const ConfigError& e) {
    result.stopped_by = e.what();
  }
  return result;
}

class NvdecDamage : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    av_log_set_level(AV_LOG_QUIET);   // damaged streams make FFmpeg log every broken slice
    cuda::check(cudaSetDevice(0), "cudaSetDevice");
    cuda::check(cudaFree(nullptr), "cudaFree");
  }
  void SetUp() override {
    clip = sample_clip(GetParam());
    if (!fs::exists(clip)) GTEST_SKIP() << clip << " not found (run tools/make_sample_clip)";
  }
  fs::path clip;
};

TEST_P(NvdecDamage, BrokenStreamsEndInMediaErrorsNeverInCudaErrors) {
  const std::vector<uint8_t> original = read_file(clip);
  const auto [first, last] = mdat_payload(original);
  ASSERT_GT(last, first + 65536) << clip << ": no mdat box to damage";
  const TempDir scratch("framefuse_nvdec_damage");
  const fs::path file = scratch.path / "clip.mp4";
  const auto write = [&](const std::vector<uint8_t>& bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };

  size_t baseline_free = 0, total = 0;
  {
    // The undamaged clip first: all its frames through NVDEC; the memory then in use (the shared
    // decode context, the CUDA runtime) is the baseline.
    GpuOutputs outputs;
    write(original);
    const CaseResult clean = run_case(file, outputs);
    ASSERT_TRUE(clean.stopped_by.empty()) << clean.stopped_by;
    ASSERT_GE(clean.nvdec_frames, 60);
  }
  cuda::check(cudaMemGetInfo(&baseline_free, &total), "cudaMemGetInfo");

  const int cases = cases_per_clip();
  int decoded = 0, frames = 0, stopped = 0;
  const auto began = std::chrono::steady_clock::now();
  {
    GpuOutputs outputs;
    std::mt19937 rng(20261202u + uint32_t(std::hash<std::string>{}(GetParam()) % 1000));
    for (int c = 0; c < cases && !HasFailure(); ++c) {
      write(damaged(original, first, last, rng));
      // A failing clip is kept for replay.
      const fs::path kept =
          fs::temp_directory_path() / ("framefuse-nvdec-damage-" + std::to_string(c) + "-" + GetParam());
      SCOPED_TRACE("damaged clip " + std::to_string(c) + " (kept as " + kept.string() + " if it fails)");
      try {
        const CaseResult r = run_case(file, outputs);
        decoded += r.nvdec_frames > 0;
        frames += r.nvdec_frames;
        stopped += !r.stopped_by.empty();
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      if (HasFailure()) fs::copy_file(file, kept, fs::copy_options::overwrite_existing);
    }
  }
  const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - began;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "a sticky CUDA error after the damaged streams";
  size_t after_free = 0;
  cuda::check(cudaMemGetInfo(&after_free, &total), "cudaMemGetInfo");
  std::printf("  %s: %d damaged clips (%.0f ms each), %d decoded frames through NVDEC (%d frames), %d stopped by an "
              "error; free GPU memory %+.1f MiB against the undamaged run\n",
              GetParam(), cases, took.count() / cases, decoded, frames, stopped,
              (double(after_free) - double(baseline_free)) / (1 << 20));
  EXPECT_GE(decoded * 2, cases) << "NVDEC decoded no frame of most damaged clips: the test did not run its decode path";
  EXPECT_GE(after_free + kOneDecoder, baseline_free) << "GPU memory not returned after the damaged streams";
}

// H.264 and HEVC with B-frames, and as IP cameras send them (one reference, no B-frames; the HEVC
// one 10-bit).
INSTANTIATE_TEST_SUITE_P(Clips, NvdecDamage,
                         ::testing::Values("sample_720p.mp4", "sample_camera_1080p.mp4", "sample_hevc_720p.mp4",
                                           "sample_hevc10_camera_1080p.mp4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('.'));
                           return name;
                         });

}  // namespace
}  // namespace framefuse::test
