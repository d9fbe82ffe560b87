//! A batch group on the CUDA executor: four member streams, 720p frames in the three memory kinds
//! mixed within batches (host, pinned, device), batches of up to 4 frames from any members. Each
//! member's outputs must match the CPU executor run on each of its frames alone (gpu_support.hpp
//! tolerances), in its frame order, and every frame must be released when the group is done. The
//! outputs reach the members' sinks in device memory while no member's sink reads host memory
//! (null, cuda_ipc), else downloaded to host memory for all of them.
#include <gtest/gtest.h>
#include <spdlog/fmt/fmt.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/runtime/batch_group.hpp"
#include "pipeline/workloads.hpp"
#include "tests/gpu/gpu_support.hpp"
#include "tests/support/capture_sink.hpp"

namespace framefuse::test {
namespace {

using namespace std::chrono_literals;

constexpr int kMembers = 4, kFrames = 10, kW = 1280, kH = 720;

//! The pixels of one host image in the memory kind `kind`, owned by the returned pointer.
struct HeldFrame {
  HostImage host;
  cuda::PinnedBuffer pinned;
  DeviceImage device;
  ops::ImageView view{};
};

DecodedFrame decoded(std::shared_ptr<HeldFrame> f, FrameMemory kind, int64_t index) {
  DecodedFrame d;
  d.info = frame_info(f->host, ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  d.view = f->view;
  d.memory = kind;
  d.index = index;
  d.decoded_at = std::chrono::steady_clock::now();
  d.owner = std::move(f);
  return d;
}

std::shared_ptr<HeldFrame> hold(HostImage img, FrameMemory kind) {
  auto f = std::make_shared<HeldFrame>();
  f->host = std::move(img);
  f->view = f->host.view();
  if (kind == FrameMemory::Pinned) {
    size_t total = 0;
    for (const auto& p : f->host.planes) total += p.size();
    f->pinned = cuda::alloc_pinned(total);
    size_t offset = 0;
    for (size_t i = 0; i < f->host.planes.size(); ++i) {
      std::memcpy(f->pinned.as() + offset, f->host.planes[i].data(), f->host.planes[i].size());
      f->view.data[i] = reinterpret_cast<const uint8_t*>(f->pinned.as() + offset);
      offset += f->host.planes[i].size();
    }
  } else if (kind == FrameMemory::Device) {
    f->device = upload(f->host);
    f->view = f->device.view;
  }
  return f;
}

struct SinkCase {
  const char* name;
  std::array<SinkKind, kMembers> sinks;   //!< each member's sink kind (the sinks themselves capture)
  cudaMemoryType outputs_in;              //!< where the members' sinks get the outputs
};
void PrintTo(const SinkCase& c, std::ostream* os) { *os << c.name; }

class BatchGroupGpu : public ::testing::TestWithParam<SinkCase> {};

TEST_P(BatchGroupGpu, FourStreamsOnCudaMatchTheCpuExecutorFrameByFrame) {
  const SinkCase& c = GetParam();
  PipelineSpec spec;
  spec.outputs = {workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()};
  BatchGroupSpec gs;
  gs.name = "gpu";
  gs.max_batch = 4;
  gs.max_wait = 2ms;
  std::vector<std::vector<HostImage>> pushed(kMembers);
  std::vector<CaptureSinks> captures(kMembers);
  std::vector<PipelineStats> stats(kMembers);
  std::weak_ptr<HeldFrame> last_frame;
  {
    BatchGroup group(gs, DeviceSpec{DeviceKind::Cuda, 0});
    std::vector<std::unique_ptr<BatchGroup::Member>> members;
    for (int m = 0; m < kMembers; ++m) {
      PipelineSpec p = spec;
      p.name = fmt::format("cam{}", m);
      p.sink.kind = c.sinks[size_t(m)];
      captures[size_t(m)].copy_out = [&, m](std::byte* dst, const std::byte* src, size_t n) {
        cudaPointerAttributes a{};
        ASSERT_EQ(cudaPointerGetAttributes(&a, src), cudaSuccess);
        EXPECT_EQ(a.type, c.outputs_in) << "member " << m;
        ASSERT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDefault), cudaSuccess);
      };
      members.push_back(group.attach(p, stats[size_t(m)], captures[size_t(m)].factory()));
    }
    std::vector<std::thread> feeders;
    for (int m = 0; m < kMembers; ++m) {
      feeders.emplace_back([&, m] {
        for (int i = 0; i < kFrames; ++i) {
          constexpr FrameMemory kinds[] = {FrameMemory::Pinned, FrameMemory::Device, FrameMemory::Host};
          HostImage img = random_image(ops::PixelFormat::Nv12, kW, kH, 9000u + 100u * uint32_t(m) + uint32_t(i));
          pushed[size_t(m)].push_back(img);
          auto held = hold(std::move(img), kinds[(m + i) % 3]);
          if (m == 0 && i == kFrames - 1) last_frame = held;
          EXPECT_TRUE(members[size_t(m)]->push(decoded(std::move(held), kinds[(m + i) % 3], i)));
        }
      });
    }
    for (auto& t : feeders) t.join();
    for (auto& member : members) member->finish();
    const BatchGroupSnapshot g = group.snapshot();
    EXPECT_EQ(g.frames, uint64_t(kMembers * kFrames));
    EXPECT_GE(g.batches, uint64_t(kFrames));
    EXPECT_EQ(g.device, "cuda:0");
  }
  EXPECT_TRUE(last_frame.expired()) << "a frame outlived the group";

  const FrameInfo info = frame_info(pushed[0][0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  const std::vector<OutputPlan> plans = make_output_plans(spec, info);
  CpuExecutor cpu(2);
  cpu.setup(info, make_color_params(spec.color, info), plans, 1);
  for (int m = 0; m < kMembers; ++m) {
    EXPECT_EQ(stats[size_t(m)].frames_processed.load(), uint64_t(kFrames));
    ASSERT_EQ(captures[size_t(m)].frames.size(), size_t(kFrames)) << "member " << m;
    for (int i = 0; i < kFrames; ++i) {
      const auto& got = captures[size_t(m)].frames[size_t(i)];
      EXPECT_EQ(got.index, i) << "member " << m << ": out of order";
      auto want = poisoned_outputs(plans, 1);
      const ops::ImageView view = pushed[size_t(m)][size_t(i)].view();
      cpu.process({&view, 1}, pointers(want));
      for (size_t k = 0; k < plans.size(); ++k)
        EXPECT_TRUE(matches_cpu(got.outputs[k], want[k], plans[k].params.store.dtype))
            << "member " << m << " frame " << i << " output " << plans[k].name;
    }
  }
}

constexpr SinkKind kNull = SinkKind::Null, kIpc = SinkKind::CudaIpc, kNpy = SinkKind::Npy;
INSTANTIATE_TEST_SUITE_P(
    Sinks, BatchGroupGpu,
    ::testing::Values(SinkCase{"null", {kNull, kNull, kNull, kNull}, cudaMemoryTypeDevice},
                      SinkCase{"cuda_ipc", {kIpc, kIpc, kIpc, kNull}, cudaMemoryTypeDevice},
                      SinkCase{"one_npy", {kIpc, kNpy, kIpc, kIpc}, cudaMemoryTypeHost}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace framefuse::test
