//! The fused CUDA chain against the CPU executor (the oracle), over a table of input formats, chroma
//! modes, interpolations, aspect policies, channel orders, layouts, dtypes and batch sizes. Each
//! case checks CudaExecutor (host in, host out) and FusedPreprocess::run on device buffers for every
//! rows-per-thread choice, twice with different poison, so an unwritten element cannot pass.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "pipeline/fused/fused_preprocess.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "pipeline/workloads.hpp"

namespace framefuse::test {
namespace {

using ops::DType;
using ops::Interp;
using ops::Layout;
using ops::PixelFormat;

struct GpuCase {
  std::string name;
  PixelFormat format;
  int32_t width, height;
  ops::ColorMatrix matrix;
  ops::ColorRange range;
  ops::ChromaUpsample upsample;
  ops::ChromaLocation location;
  int batch;
  std::vector<OutputSpec> outputs;
};

std::ostream& operator<<(std::ostream& os, const GpuCase& c) { return os << c.name; }

//! An output resized to w x h (0 x 0 = no resize) with the given read, aspect and write choices.
OutputSpec out(int32_t w, int32_t h, Interp interp, AspectMode aspect, ChannelOrder ch, Layout layout, DType dtype) {
  OutputSpec s;
  s.name = "out" + std::to_string(w) + "x" + std::to_string(h);
  s.resize.width = w;
  s.resize.height = h;
  s.interp = interp;
  s.aspect = aspect;
  s.channels = ch;
  s.layout = layout;
  s.dtype = dtype;
  if (dtype == DType::U8) s.scale = 1.f;   // keep pixel units; u8 of 0..1 would be all 0/1
  return s;
}

OutputSpec with_crop(OutputSpec s, RectSpec r) {
  s.crop = r;
  return s;
}

OutputSpec with_norm(OutputSpec s, std::array<float, 3> mean, std::array<float, 3> std) {
  s.mean = mean;
  s.std = std;
  return s;
}

std::vector<GpuCase> cases() {
  using enum AspectMode;
  using enum ChannelOrder;
  const auto bt601 = ops::ColorMatrix::Bt601, bt709 = ops::ColorMatrix::Bt709;
  const auto limited = ops::ColorRange::Limited, full = ops::ColorRange::Full;
  const auto nearest = ops::ChromaUpsample::Nearest, linear = ops::ChromaUpsample::Linear;
  const auto left = ops::ChromaLocation::Left, center = ops::ChromaLocation::Center,
             top_left = ops::ChromaLocation::TopLeft;

  OutputSpec area_shorter = out(0, 0, Interp::Area, Stretch, Rgb, Layout::Hwc, DType::F16);
  area_shorter.resize.shorter_side = 64;
  area_shorter.center_crop = std::array<int32_t, 2>{56, 48};
  OutputSpec u8_pad = out(64, 96, Interp::Linear, Letterbox, Rgb, Layout::Chw, DType::U8);
  u8_pad.pad_value = {0.f, 128.f, 255.f};

  return {
      {"nv12_classify_b1", PixelFormat::Nv12, 1920, 1080, bt709, limited, nearest, left, 1, {workloads::classify_spec()}},
      {"nv12_three_outputs_b16", PixelFormat::Nv12, 1920, 1080, bt709, limited, linear, left, 16,
       {workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()}},
      {"p010_b3", PixelFormat::P010, 1280, 720, bt709, limited, linear, center, 3,
       {workloads::detect_spec(), out(160, 90, Interp::Nearest, Stretch, Gray, Layout::Hwc, DType::U8),
        out(200, 120, Interp::Area, Stretch, Bgr, Layout::Chw, DType::F32)}},
      {"yuv420p10_b2", PixelFormat::Yuv420p10, 1280, 720, bt709, limited, nearest, left, 2,
       {workloads::classify_spec(), out(160, 90, Interp::Area, Letterbox, Rgb, Layout::Hwc, DType::U8)}},
      {"yuv422p_mjpeg_b2", PixelFormat::Yuv422p, 1280, 720, bt601, full, linear, center, 2,
       {workloads::detect_spec(), out(160, 90, Interp::Area, Stretch, Rgb, Layout::Hwc, DType::U8)}},
      {"yuv420p_odd_b3", PixelFormat::Yuv420p, 333, 199, bt601, full, nearest, left, 3,
       {out(97, 61, Interp::Area, Stretch, Bgr, Layout::Chw, DType::F32),
        out(500, 301, Interp::Area, Stretch, Rgb, Layout::Hwc, DType::U8),
        out(128, 128, Interp::Linear, CenterCropFill, Gray, Layout::Chw, DType::F16)}},
      {"rgb24_b16", PixelFormat::Rgb24, 320, 240, bt601, limited, nearest, left, 16,
       {with_crop(out(100, 75, Interp::Nearest, Stretch, Bgr, Layout::Hwc, DType::F32), {40, 30, 200, 150, false}),
        u8_pad}},
      {"bgr24_b1", PixelFormat::Bgr24, 257, 129, bt601, limited, nearest, left, 1,
       {area_shorter, with_crop(out(0, 0, Interp::Linear, Stretch, Gray, Layout::Hwc, DType::F32),
                                {0.25, 0.25, 0.5, 0.5, true})}},
      {"nv12_odd_upscale_b3", PixelFormat::Nv12, 641, 359, bt601, limited, linear, top_left, 3,
       {with_crop(out(800, 600, Interp::Linear, Stretch, Rgb, Layout::Chw, DType::F32), {0.1, 0.2, 0.5, 0.6, true}),
        with_crop(out(400, 100, Interp::Area, Stretch, Bgr, Layout::Hwc, DType::F16), {0.0, 0.0, 0.5, 0.6, true})}},
      {"nv12_fill_b16", PixelFormat::Nv12, 1280, 720, bt601, full, nearest, left, 16,
       {with_norm(out(224, 224, Interp::Linear, CenterCropFill, Rgb, Layout::Chw, DType::F32), {0.5f, 0.5f, 0.5f},
                  {0.25f, 0.25f, 0.25f}),
        out(64, 64, Interp::Nearest, Stretch, Gray, Layout::Chw, DType::U8)}},
      {"yuv420p_eight_outputs_b3", PixelFormat::Yuv420p, 640, 360, bt709, limited, linear, center, 3,
       {out(200, 50, Interp::Linear, Letterbox, Rgb, Layout::Chw, DType::F32),
        out(33, 47, Interp::Nearest, CenterCropFill, Bgr, Layout::Hwc, DType::U8),
        out(160, 90, Interp::Area, Stretch, Gray, Layout::Chw, DType::F16),
        out(700, 400, Interp::Area, Letterbox, Rgb, Layout::Hwc, DType::F32),
        out(1, 1, Interp::Linear, Stretch, Rgb, Layout::Chw, DType::F32),
        out(0, 0, Interp::Nearest, Stretch, Bgr, Layout::Chw, DType::U8),
        out(300, 20, Interp::Linear, CenterCropFill, Gray, Layout::Hwc, DType::F16),
        out(64, 360, Interp::Area, Letterbox, Bgr, Layout::Chw, DType::F32)}},
  };
}

//! A case's seeded frames, its plans and the CPU executor's outputs (the reference).
class FusedVsCpu : public ::testing::TestWithParam<GpuCase> {
 protected:
  void SetUp() override {
    const GpuCase& c = GetParam();
    for (int b = 0; b < c.batch; ++b) {
      const uint32_t seed = 1000u * uint32_t(c.format) + 17u * uint32_t(b) + 5u;
      images_.push_back(random_image(c.format, c.width, c.height, seed, 3 + b % 5));
      views_.push_back(images_.back().view());
    }
    info_ = frame_info(images_[0], c.matrix, c.range);
    info_.chroma_location = c.location;
    ColorSpec color_spec;
    color_spec.chroma_upsample = c.upsample;
    color_ = make_color_params(color_spec, info_);
    for (const auto& o : c.outputs) plans_.push_back(make_output_plan(o, info_, c.name + "/" + o.name));
    ref_ = poisoned_outputs(plans_, c.batch);
    CpuExecutor cpu(0);
    cpu.setup(info_, color_, plans_, c.batch);
    cpu.process(views_, pointers(ref_));
  }

  //! Every output of `got` against the reference; `report`: print the margin of passing outputs.
  void expect_matches(const std::vector<std::vector<std::byte>>& got, const std::string& what, bool report) const {
    for (size_t k = 0; k < plans_.size(); ++k) {
      const auto r = matches_cpu(got[k], ref_[k], GetParam().outputs[k].dtype);
      EXPECT_TRUE(r) << what << " output " << plans_[k].name;
      if (r && report) std::printf("  %s %s: %s\n", what.c_str(), plans_[k].name.c_str(), r.message());
    }
  }

  std::vector<HostImage> images_;
  std::vector<ops::ImageView> views_;
  FrameInfo info_;
  ops::ColorParams color_{};
  std::vector<OutputPlan> plans_;
  std::vector<std::vector<std::byte>> ref_;
};

// Defined first so it runs before the executor test: a device fault there is sticky.
TEST_P(FusedVsCpu, FusedPreprocessOnDeviceBuffers) {
  const GpuCase& c = GetParam();
  const DeviceBatch dev = upload_batch(images_, color_);
  DeviceOutputs outs(plans_, c.batch);
  const cuda::Stream stream = cuda::make_stream();
  for (const int rows : {0, 1, 2, 4}) {
    SCOPED_TRACE("rows_per_thread " + std::to_string(rows));
    FusedPreprocess fused;
    fused.setup(info_, plans_, c.batch, rows);
    fused.set_batch(dev.slots, outs.ptrs());
    std::vector<std::vector<std::byte>> runs[2];
    for (const int pass : {0, 1}) {
      outs.poison(pass == 0 ? 0xFF : 0x00);
      fused.run(stream);
      cuda::check(cudaStreamSynchronize(stream), "fused run");
      runs[pass] = outs.download();
    }
    for (size_t k = 0; k < plans_.size(); ++k)
      EXPECT_TRUE(same_bytes(runs[0][k], runs[1][k])) << "output " << plans_[k].name << " (poison 0xFF vs 0x00)";
    expect_matches(runs[0], "fused, " + std::to_string(fused.rows_per_thread()) + " rows/thread", rows == 0);
  }
}

TEST_P(FusedVsCpu, CudaExecutor) {
  const GpuCase& c = GetParam();
  auto got = poisoned_outputs(plans_, c.batch);
  CudaExecutor gpu(0);
  gpu.setup(info_, color_, plans_, c.batch);
  gpu.process(views_, pointers(got));
  expect_matches(got, "executor", true);
}

INSTANTIATE_TEST_SUITE_P(Table, FusedVsCpu, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<GpuCase>& i) { return i.param.name; });

TEST(FusedPreprocessSetup, RejectsBadRowsPerThread) {
  const HostImage img = random_image(PixelFormat::Nv12, 64, 32, 7);
  const FrameInfo info = frame_info(img);
  const std::vector<OutputPlan> plans{make_output_plan(workloads::thumbnail_spec(), info, "t")};
  FusedPreprocess fused;
  EXPECT_THROW(fused.setup(info, plans, 1, 3), ConfigError);
  EXPECT_THROW(fused.setup(info, plans, kMaxBatch + 1, 1), ConfigError);
}

}  // namespace
}  // namespace framefuse::test
