//! The asynchronous CUDA executor (ring of in-flight iterations): graph replay, stream launches and
//! the CPU executor give the same outputs for the same frames, whatever memory the frames are in
//! and however many iterations are in flight; control runs its iterations in frame order in both
//! modes; outputs left in device memory (null sink) hold what a host sink downloads; frames are
//! released once the device is done with them, also when the executor goes away with frames in
//! flight; batches of every size give every output of their frames.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/fmt/fmt.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/control/control_engine.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/exec/cuda_executor.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/sinks/cuda_ipc_sink.hpp"
#include "pipeline/workloads.hpp"
#include "tests/gpu/gpu_support.hpp"

namespace framefuse::test {
namespace {

constexpr int kW = 1280, kH = 720, kFrames = 9;

//! A frame in pinned host memory (the frame pool's kind), same pitches as the host image.
struct PinnedImage {
  cuda::PinnedBuffer memory;
  ops::ImageView view{};
};
PinnedImage pin(const HostImage& img) {
  size_t total = 0;
  for (const auto& p : img.planes) total += p.size();
  PinnedImage out{cuda::alloc_pinned(total), img.view()};
  size_t offset = 0;
  for (size_t i = 0; i < img.planes.size(); ++i) {
    std::memcpy(out.memory.as() + offset, img.planes[i].data(), img.planes[i].size());
    out.view.data[i] = reinterpret_cast<const uint8_t*>(out.memory.as() + offset);
    offset += img.planes[i].size();
  }
  return out;
}

struct Frames {
  std::vector<HostImage> host;
  std::vector<PinnedImage> pinned;
  std::vector<DeviceImage> device;
  FrameInfo info;
  //! Frame i as the executor sees it, in the memory kind that rotates with i.
  ops::ImageView view(int i) const {
    switch (memory(i)) {
      case FrameMemory::Host: return host[size_t(i)].view();
      case FrameMemory::Pinned: return pinned[size_t(i)].view;
      case FrameMemory::Device: return device[size_t(i)].view;
    }
    return {};
  }
  static FrameMemory memory(int i) {
    constexpr FrameMemory kinds[] = {FrameMemory::Pinned, FrameMemory::Device, FrameMemory::Pinned, FrameMemory::Host};
    return kinds[i % 4];
  }
};

Frames make_frames() {
  Frames f;
  for (int i = 0; i < kFrames; ++i) {
    f.host.push_back(random_image(ops::PixelFormat::Nv12, kW, kH, 4100u + uint32_t(i)));
    f.pinned.push_back(pin(f.host.back()));
    f.device.push_back(upload(f.host.back()));
  }
  f.info = frame_info(f.host[0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  return f;
}

std::vector<OutputPlan> plans_for(const FrameInfo& info) {
  std::vector<OutputPlan> plans;
  for (const auto& s : {workloads::classify_spec(), workloads::detect_spec(), workloads::thumbnail_spec()})
    plans.push_back(make_output_plan(s, info, "engine/" + s.name));
  return plans;
}

using Outputs = std::vector<std::vector<std::byte>>;   // per output, one frame

//! Every frame through `exec` (set up already), keeping the ring full: frame i is submitted
//! before frame i - in_flight completes; `host`: every frame from host memory (the CPU executor),
//! else in the memory kind Frames::memory(i) says. `on_device`: the executor leaves its outputs in
//! device memory (CudaEngineOptions::host_outputs false); they are read back from the addresses
//! complete() hands out. Checks each owner is dropped by the time its frame completed. Returns the
//! outputs per frame, and the control record after each.
struct EngineRun {
  std::vector<Outputs> outputs;
  std::vector<std::optional<control::ControlRecord>> records;
};
EngineRun run_all(const Frames& f, Executor& exec, std::span<const OutputPlan> plans, bool host = false,
                  bool on_device = false) {
  EngineRun run;
  std::vector<std::weak_ptr<const void>> owners;
  int completed = 0;
  const auto complete_one = [&] {
    auto out = poisoned_outputs(plans, 1);
    const Completion done = exec.complete(on_device ? std::span<std::byte* const>{} : pointers(out));
    EXPECT_EQ(done.on_device, on_device);
    for (size_t k = 0; on_device && k < plans.size(); ++k)
      EXPECT_EQ(cudaMemcpy(out[k].data(), done.outputs[k], out[k].size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(owners[size_t(completed)].expired()) << "frame " << completed << " still held after complete()";
    run.outputs.push_back(std::move(out));
    run.records.push_back(exec.control_record());
    ++completed;
  };
  for (int i = 0; i < kFrames; ++i) {
    if (exec.in_flight() == exec.max_in_flight()) complete_one();
    const ops::ImageView view = host ? f.host[size_t(i)].view() : f.view(i);
    const FrameMemory memory = host ? FrameMemory::Host : Frames::memory(i);
    const std::shared_ptr<const void> owner = std::make_shared<int>(i);
    owners.push_back(owner);
    exec.submit({&view, 1}, {&memory, 1}, {&owner, 1});
  }
  while (exec.in_flight() > 0) complete_one();
  return run;
}

//! The CPU executor's run of every frame (from host memory): the reference of the GPU runs.
EngineRun cpu_reference(const Frames& f, const ops::ColorParams& color, std::span<const OutputPlan> plans) {
  CpuExecutor cpu(0);
  cpu.setup(f.info, color, plans, 1);
  return run_all(f, cpu, plans, true);
}

TEST(Engine, GraphReplayEqualsStreamLaunchEqualsCpu) {
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  const ops::ColorParams color = make_color_params(ColorSpec{}, f.info);
  const EngineRun ref = cpu_reference(f, color, plans);

  for (const int in_flight : {1, 2, 3}) {
    std::vector<EngineRun> runs;
    for (const bool graphs : {true, false}) {
      SCOPED_TRACE(fmt::format("{} in flight, {}", in_flight, graphs ? "graphs" : "stream launches"));
      CudaExecutor gpu(0, {.in_flight = in_flight, .graphs = graphs});
      gpu.setup(f.info, color, plans, 1);
      runs.push_back(run_all(f, gpu, plans));
      EXPECT_EQ(gpu.captures(), graphs ? 2 * in_flight : 0)
          << "one capture per slot with and one without the upload at setup, replayed after";
      for (int i = 0; i < kFrames; ++i)
        for (size_t k = 0; k < plans.size(); ++k)
          EXPECT_TRUE(matches_cpu(runs.back().outputs[size_t(i)][k], ref.outputs[size_t(i)][k],
                                  plans[k].params.store.dtype))
              << "frame " << i << " output " << plans[k].name;
    }
    for (int i = 0; i < kFrames; ++i)
      for (size_t k = 0; k < plans.size(); ++k)
        EXPECT_TRUE(same_bytes(runs[0].outputs[size_t(i)][k], runs[1].outputs[size_t(i)][k]))
            << in_flight << " in flight: graph vs stream, frame " << i << " output " << plans[k].name;
  }
}

TEST(Engine, BatchesOfEverySizeGiveEveryOutputOfTheirFrames) {
  // Full and partial batches through one ring slot, which is reused: a frame's output not written
  // (or handed out from the wrong place) would show an earlier batch's frame, or the poison.
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  const ops::ColorParams color = make_color_params(ColorSpec{}, f.info);
  const EngineRun ref = cpu_reference(f, color, plans);
  constexpr int kMaxBatchHere = 4;
  for (const bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "stream launches");
    CudaExecutor gpu(0, {.in_flight = 1, .graphs = graphs});
    gpu.setup(f.info, color, plans, kMaxBatchHere);
    int first = 0;
    for (const int batch : {4, 1, 3, 1}) {   // 9 frames: full, partial, partial, partial
      std::vector<ops::ImageView> views;
      std::vector<FrameMemory> memory;
      for (int i = first; i < first + batch; ++i) {
        views.push_back(f.view(i));
        memory.push_back(Frames::memory(i));
      }
      auto got = poisoned_outputs(plans, batch);
      gpu.process_frames(views, memory, pointers(got));
      for (int b = 0; b < batch; ++b)
        for (size_t k = 0; k < plans.size(); ++k) {
          const size_t bytes = plans[k].bytes_per_frame;
          EXPECT_TRUE(matches_cpu(std::span<const std::byte>(got[k]).subspan(bytes * size_t(b), bytes),
                                  ref.outputs[size_t(first + b)][k], plans[k].params.store.dtype))
              << "batch of " << batch << ", frame " << first + b << ", output " << plans[k].name;
        }
      first += batch;
    }
    ASSERT_EQ(first, kFrames);
  }
}

TEST(Engine, ControlRunsInFrameOrderInBothModes) {
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  const ops::ColorParams color = make_color_params(ColorSpec{}, f.info);
  ControlSpec spec;   // d = 1: each frame's record is complete when its outputs are
  spec.enabled = true;
  spec.delay_frames = 1;
  spec.auto_gain.enabled = true;
  spec.auto_gain.max_step = 0.5;
  spec.health.enabled = true;
  const auto params = control::make_control_params(spec, f.info, plans, 30, "engine test");
  std::vector<EngineRun> runs;
  for (const bool graphs : {true, false}) {
    CudaExecutor gpu(0, {.in_flight = 3, .graphs = graphs});
    gpu.setup(f.info, color, plans, 1);
    gpu.setup_control(params);
    runs.push_back(run_all(f, gpu, plans));
  }
  // The outputs carry each frame's gain, which depends on every frame before it: equal bytes
  // mean the same iterations ran in the same order.
  for (int i = 0; i < kFrames; ++i)
    for (size_t k = 0; k < plans.size(); ++k)
      EXPECT_TRUE(same_bytes(runs[0].outputs[size_t(i)][k], runs[1].outputs[size_t(i)][k]))
          << "frame " << i << " output " << plans[k].name;
  for (const EngineRun& r : runs) {
    ASSERT_TRUE(r.records.back().has_value());
    EXPECT_EQ(r.records.back()->iteration + 1, uint64_t(kFrames)) << "one control iteration per frame";
  }
  EXPECT_NE(runs[0].records.back()->out[0].gain, 1.f) << "auto_gain never moved: the test could not see order";
}

TEST(Engine, OutputsLeftInDeviceMemoryHoldWhatAHostSinkDownloads) {
  // A pipeline whose sink reads no outputs (the null sink) leaves them on the device: complete()
  // hands out the slot's device addresses, which must hold the bytes a host sink's download gets.
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  const ops::ColorParams color = make_color_params(ColorSpec{}, f.info);
  for (const bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "stream launches");
    CudaExecutor host(0, {.in_flight = 2, .graphs = graphs});
    CudaExecutor device(0, {.in_flight = 2, .graphs = graphs, .host_outputs = false});
    host.setup(f.info, color, plans, 1);
    device.setup(f.info, color, plans, 1);
    const EngineRun downloaded = run_all(f, host, plans);
    const EngineRun kept = run_all(f, device, plans, false, true);
    for (int i = 0; i < kFrames; ++i)
      for (size_t k = 0; k < plans.size(); ++k)
        EXPECT_TRUE(same_bytes(kept.outputs[size_t(i)][k], downloaded.outputs[size_t(i)][k]))
            << "frame " << i << " output " << plans[k].name;
    // Host buffers cannot be filled from outputs that stay on the device; the batch stays in flight.
    const ops::ImageView view = f.view(1);
    const FrameMemory memory = Frames::memory(1);
    device.submit({&view, 1}, {&memory, 1}, {});
    auto out = poisoned_outputs(plans, 1);
    EXPECT_THROW(device.complete(pointers(out)), DeviceError);
    EXPECT_EQ(device.in_flight(), 1);
    EXPECT_TRUE(device.complete({}).on_device);
  }
}

TEST(Engine, OutputsMadeInACudaIpcRingSlotHoldWhatAHostSinkDownloads) {
  // A cuda_ipc sink places each frame's outputs in its ring slot (Sink::place_outputs): the
  // executor writes them there through the parameter block, complete() hands out those addresses,
  // and write() publishes the slot without a copy. The slot reads "being written" in between.
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  const ops::ColorParams color = make_color_params(ColorSpec{}, f.info);
  CudaExecutor host(0, {.in_flight = 2});
  host.setup(f.info, color, plans, 1);
  const EngineRun downloaded = run_all(f, host, plans);
  for (const bool graphs : {true, false}) {
    SCOPED_TRACE(graphs ? "graphs" : "stream launches");
    const std::string name = fmt::format("framefuse-gpu-test-{}-{}", ::getpid(), graphs);
    CudaIpcSink sink(0, name, 3, plans, "engine");
    const int fd = ::shm_open(("/" + name).c_str(), O_RDONLY, 0);
    ASSERT_GE(fd, 0);
    void* map = ::mmap(nullptr, 4096 * 4, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ASSERT_NE(map, MAP_FAILED);
    const auto* header = static_cast<const shm::ShmHeader*>(map);
    const auto seq = [&](uint64_t c) {
      const auto* base = static_cast<const std::byte*>(map) + header->header_bytes + (c % header->slots) * header->slot_bytes;
      return reinterpret_cast<const shm::ShmSlot*>(base)->seq.load();
    };
    CudaExecutor device(0, {.in_flight = 2, .graphs = graphs, .host_outputs = false});
    device.setup(f.info, color, plans, 1);
    std::vector<std::vector<std::byte*>> placed;
    int written = 0;
    const auto complete_one = [&] {
      const Completion done = device.complete({});
      ASSERT_EQ(std::vector<std::byte*>(done.outputs.begin(), done.outputs.end()), placed[size_t(written)])
          << "complete() hands out the placed addresses";
      EXPECT_EQ(seq(uint64_t(written)), 2u * uint64_t(written) + 1) << "being written until write()";
      for (size_t k = 0; k < plans.size(); ++k) {
        std::vector<std::byte> got(plans[k].bytes_per_frame);
        ASSERT_EQ(cudaMemcpy(got.data(), done.outputs[k], got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_TRUE(same_bytes(got, downloaded.outputs[size_t(written)][k])) << "frame " << written << " output " << k;
      }
      std::vector<const std::byte*> outs(done.outputs.begin(), done.outputs.end());
      sink.write(written, outs);
      EXPECT_EQ(seq(uint64_t(written)), 2u * uint64_t(written) + 2) << "published";
      ++written;
    };
    for (int i = 0; i < kFrames; ++i) {
      if (device.in_flight() == device.max_in_flight()) complete_one();
      const std::span<std::byte* const> slot = sink.place_outputs(i);
      ASSERT_EQ(slot.size(), plans.size());
      placed.emplace_back(slot.begin(), slot.end());
      const ops::ImageView view = f.view(i);
      const FrameMemory memory = Frames::memory(i);
      device.submit({&view, 1}, {&memory, 1}, {}, slot);
    }
    while (device.in_flight() > 0) complete_one();
    EXPECT_EQ(header->published.load(), uint64_t(kFrames));
    EXPECT_NE(placed[0][0], placed[1][0]) << "consecutive frames in different slots";
    EXPECT_EQ(placed[0][0], placed[3][0]) << "three slots: frame 3 reuses frame 0's";
    ::munmap(map, 4096 * 4);
  }
}

//! The upload kernel moves 16-byte words where every address, pitch and row length allows, else
//! bytes: pinned frames of both kinds, in both modes, against the CPU executor.
TEST(Engine, PinnedUploadsMatchTheCpuWithAlignedAndUnalignedRows) {
  struct Case {
    ops::PixelFormat format;
    int32_t width, height, pad;
    const char* what;
  };
  for (const Case c : {Case{ops::PixelFormat::Nv12, 1280, 720, 0, "nv12, 16-byte words"},
                       Case{ops::PixelFormat::Yuv420p, 1280, 720, 0, "yuv420p, 16-byte words"},
                       Case{ops::PixelFormat::Yuv420p, 642, 362, 0, "yuv420p, rows of 642 / 321 bytes"},
                       Case{ops::PixelFormat::Nv12, 1280, 720, 3, "nv12, pitch + 3"}}) {
    SCOPED_TRACE(c.what);
    std::vector<HostImage> host;
    std::vector<PinnedImage> pinned;
    for (uint32_t i = 0; i < 3; ++i) {
      host.push_back(random_image(c.format, c.width, c.height, 5200u + i, c.pad));
      pinned.push_back(pin(host.back()));
    }
    const FrameInfo info = frame_info(host[0], ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
    const auto plans = plans_for(info);
    const ops::ColorParams color = make_color_params(ColorSpec{}, info);
    CpuExecutor cpu(0);
    cpu.setup(info, color, plans, 1);
    for (const bool graphs : {true, false}) {
      CudaExecutor gpu(0, {.in_flight = 2, .graphs = graphs});
      gpu.setup(info, color, plans, 1);
      for (size_t i = 0; i < host.size(); ++i) {
        auto ref = poisoned_outputs(plans, 1), got = poisoned_outputs(plans, 1);
        const ops::ImageView host_view = host[i].view();
        cpu.process({&host_view, 1}, pointers(ref));
        constexpr FrameMemory kPinned = FrameMemory::Pinned;
        gpu.submit({&pinned[i].view, 1}, {&kPinned, 1}, {});
        gpu.complete(pointers(got));
        for (size_t k = 0; k < plans.size(); ++k)
          EXPECT_TRUE(matches_cpu(got[k], ref[k], plans[k].params.store.dtype))
              << (graphs ? "graph" : "stream") << " frame " << i << " output " << plans[k].name;
      }
    }
  }
}

TEST(Engine, FramesInFlightAtShutdownAreReleased) {
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  std::atomic<int> released{0};
  std::vector<std::weak_ptr<const void>> owners;
  {
    CudaExecutor gpu(0, {.in_flight = 3});
    gpu.setup(f.info, make_color_params(ColorSpec{}, f.info), plans, 1);
    for (int i = 0; i < 3; ++i) {
      const ops::ImageView view = f.view(i);
      const FrameMemory memory = Frames::memory(i);
      const std::shared_ptr<const void> owner(new int(i), [&released](const int* p) {
        delete p;
        released.fetch_add(1);
      });
      owners.push_back(owner);
      gpu.submit({&view, 1}, {&memory, 1}, {&owner, 1});
    }
    EXPECT_EQ(gpu.in_flight(), 3);
    const ops::ImageView view = f.view(3);
    const FrameMemory memory = Frames::memory(3);
    EXPECT_THROW(gpu.submit({&view, 1}, {&memory, 1}, {}), DeviceError) << "every slot is in flight";
  }
  EXPECT_EQ(released.load(), 3);
  for (const auto& o : owners) EXPECT_TRUE(o.expired());
}

TEST(Engine, FramesAreReleasedOnceConsumedEvenBeforeTheyComplete) {
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  CudaExecutor gpu(0, {.in_flight = 3});
  gpu.setup(f.info, make_color_params(ColorSpec{}, f.info), plans, 1);
  std::vector<std::weak_ptr<const void>> owners;
  for (const int i : {0, 1}) {   // a pinned frame (free once uploaded), an NVDEC-like device frame
    const ops::ImageView view = f.view(i);
    const FrameMemory memory = Frames::memory(i);
    const std::shared_ptr<const void> owner = std::make_shared<int>(i);
    owners.push_back(owner);
    gpu.submit({&view, 1}, {&memory, 1}, {&owner, 1});
  }
  cuda::check(cudaDeviceSynchronize(), "test: let the iterations finish");   // the test waits, not the engine
  const ops::ImageView view = f.view(2);
  const FrameMemory memory = Frames::memory(2);
  gpu.submit({&view, 1}, {&memory, 1}, {});
  EXPECT_TRUE(owners[0].expired()) << "an uploaded frame is held after its iteration completed";
  EXPECT_TRUE(owners[1].expired()) << "a device frame is held after its iteration completed";
  EXPECT_EQ(gpu.in_flight(), 3);
  while (gpu.in_flight() > 0) gpu.complete({});
}

TEST(Engine, ReSetupWithFramesInFlightDrainsAndRecaptures) {
  const Frames f = make_frames();
  const auto plans = plans_for(f.info);
  const ops::ColorParams color = make_color_params(ColorSpec{}, f.info);
  CudaExecutor gpu(0, {.in_flight = 2});
  gpu.setup(f.info, color, plans, 1);
  std::weak_ptr<const void> held;
  {
    const ops::ImageView view = f.view(0);
    const FrameMemory memory = Frames::memory(0);
    const std::shared_ptr<const void> owner = std::make_shared<int>(0);
    held = owner;
    gpu.submit({&view, 1}, {&memory, 1}, {&owner, 1});
  }
  gpu.setup(f.info, color, plans, 1);
  EXPECT_EQ(gpu.in_flight(), 0);
  EXPECT_TRUE(held.expired());
  const EngineRun ref = cpu_reference(f, color, plans);
  const EngineRun got = run_all(f, gpu, plans);
  EXPECT_EQ(gpu.captures(), 8) << "each setup captures twice per slot (with and without the upload)";
  for (int i = 0; i < kFrames; ++i)
    for (size_t k = 0; k < plans.size(); ++k)
      EXPECT_TRUE(matches_cpu(got.outputs[size_t(i)][k], ref.outputs[size_t(i)][k], plans[k].params.store.dtype))
          << "frame " << i << " output " << plans[k].name;
}

}  // namespace
}  // namespace framefuse::test
