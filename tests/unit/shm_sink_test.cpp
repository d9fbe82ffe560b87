//! ShmSink: the ring read back through its own mapping of /dev/shm/<name>, as another process
//! would (read-only, by the layout of shm_ring.hpp), including a reader racing the writer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <spdlog/fmt/fmt.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/error.hpp"
#include "pipeline/sinks/shm_ring.hpp"
#include "pipeline/sinks/shm_sink.hpp"
#include "tests/support/output_plans.hpp"

namespace framefuse {
namespace {

namespace fs = std::filesystem;

//! A name of this test process' own, so parallel test runs never share a ring.
std::string ring_name(const char* what) { return fmt::format("framefuse-test-{}-{}", ::getpid(), what); }

//! A read-only mapping of /dev/shm/<name>, as a reader in another process has it.
class Mapping {
 public:
  explicit Mapping(const std::string& name) {
    const int fd = ::shm_open(("/" + name).c_str(), O_RDONLY, 0);
    if (fd < 0) throw std::runtime_error("shm_open " + name + ": " + std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    bytes_ = size_t(st.st_size);
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("mmap " + name);
    base_ = static_cast<const std::byte*>(p);
  }
  ~Mapping() { ::munmap(const_cast<std::byte*>(base_), bytes_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const shm::ShmHeader& header() const { return *reinterpret_cast<const shm::ShmHeader*>(base_); }
  const std::byte* slot(uint64_t c) const {
    return base_ + header().header_bytes + (c % header().slots) * header().slot_bytes;
  }
  const shm::ShmSlot& slot_header(uint64_t c) const { return *reinterpret_cast<const shm::ShmSlot*>(slot(c)); }
  size_t bytes() const { return bytes_; }

 private:
  const std::byte* base_ = nullptr;
  size_t bytes_ = 0;
};

//! Two outputs of a 64x48 frame: float32 CHW 3x6x8 and uint8 HWC 4x5x1.
std::vector<OutputPlan> make_plans() { return test::two_output_plans(ops::DType::F32, ops::DType::U8); }

//! Output k of frame `index`: every byte tells the frame and output it belongs to.
std::vector<std::byte> pattern(const OutputPlan& plan, int64_t index, size_t k) {
  std::vector<std::byte> v(plan.bytes_per_frame);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::byte(uint8_t(index * 31 + int64_t(k) * 7 + int64_t(i)));
  return v;
}

//! Writes frame `index` of `plans` with pattern() contents.
void write_frame(Sink& sink, const std::vector<OutputPlan>& plans, int64_t index) {
  std::vector<std::vector<std::byte>> data;
  std::vector<const std::byte*> ptrs;
  for (size_t k = 0; k < plans.size(); ++k) data.push_back(pattern(plans[k], index, k));
  for (const auto& d : data) ptrs.push_back(d.data());
  sink.write(index, ptrs);
}

TEST(ShmSink, HeaderDescribesTheOutputsAndSlotsHoldTheFrames) {
  const auto plans = make_plans();
  const std::string name = ring_name("layout");
  {
    ShmSink sink(name, 4, plans, "lobby");
    const Mapping ring(name);
    const shm::ShmHeader& h = ring.header();
    EXPECT_EQ(std::memcmp(h.magic, "FFSHMRNG", 8), 0);
    EXPECT_EQ(h.version, 2u);
    EXPECT_EQ(h.memory, uint32_t(shm::RingMemory::Host));
    EXPECT_EQ(h.device_slot_bytes, 0u);
    EXPECT_EQ(h.pci_bus_id[0], '\0');
    EXPECT_EQ(h.header_bytes, 4096u);
    EXPECT_EQ(h.slots, 4u);
    EXPECT_EQ(h.outputs, 2u);
    EXPECT_EQ(h.slot_bytes % 4096, 0u);
    EXPECT_EQ(h.writer_pid, ::getpid());
    EXPECT_STREQ(h.pipeline, "lobby");
    EXPECT_EQ(ring.bytes(), 4096 + 4 * h.slot_bytes);
    EXPECT_STREQ(h.output[0].name, "cls");
    EXPECT_STREQ(h.output[0].dtype, "float32");
    EXPECT_EQ(h.output[0].ndim, 3u);
    EXPECT_EQ(std::vector<int64_t>(h.output[0].shape, h.output[0].shape + 3), (std::vector<int64_t>{3, 6, 8}));
    EXPECT_EQ(h.output[0].bytes, 3u * 6 * 8 * 4);
    EXPECT_STREQ(h.output[1].name, "gray");
    EXPECT_STREQ(h.output[1].dtype, "uint8");
    EXPECT_EQ(std::vector<int64_t>(h.output[1].shape, h.output[1].shape + 3), (std::vector<int64_t>{4, 5, 1}));
    for (uint32_t k = 0; k < 2; ++k) {
      EXPECT_EQ(h.output[k].offset % 64, 0u);
      EXPECT_GE(h.output[k].offset, sizeof(shm::ShmSlot) + sizeof(shm::ShmControl));
      EXPECT_LE(h.output[k].offset + h.output[k].bytes, h.slot_bytes);
    }
    EXPECT_GE(h.output[1].offset, h.output[0].offset + h.output[0].bytes);
    EXPECT_EQ(h.published.load(), 0u);
    EXPECT_EQ(h.closed.load(), 0u);

    for (int64_t i = 0; i < 3; ++i) write_frame(sink, plans, 100 + i);
    EXPECT_EQ(h.published.load(), 3u);
    for (uint64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(ring.slot_header(c).seq.load(), 2 * c + 2);
      EXPECT_EQ(ring.slot_header(c).frame_index.load(), int64_t(100 + c));
      for (size_t k = 0; k < 2; ++k) {
        const auto want = pattern(plans[k], int64_t(100 + c), k);
        EXPECT_EQ(std::memcmp(ring.slot(c) + h.output[k].offset, want.data(), want.size()), 0) << c << " " << k;
      }
    }
    EXPECT_EQ(ring.slot_header(3).seq.load(), 0u) << "a slot never written";
    sink.flush();
    EXPECT_EQ(h.closed.load(), 1u);
  }
  EXPECT_FALSE(fs::exists("/dev/shm/" + name)) << "the name goes with the sink";
}

TEST(ShmSink, AFramesControlRecordTravelsInItsSlot) {
  const auto plans = make_plans();
  const std::string name = ring_name("control");
  ShmSink sink(name, 4, plans, "p");
  const Mapping ring(name);
  control::ControlRecord r{};
  r.iteration = 40;
  r.num_outputs = 2;
  r.health_flags = 0b0101;
  r.mean_luma = 0.25f;
  r.variance = 0.01f;
  r.motion = 0.125f;
  r.black_fraction = 0.5f;
  r.white_fraction = 0.0625f;
  r.scene_distance = 0.75f;
  r.out[0] = {2.5f, 0.45f, 0.1f, 100, 40, 224, 224};
  r.out[1] = {1.0f, 0.3f, 0.2f, 0, 0, 64, 48};
  sink.write_control(42, r);
  write_frame(sink, plans, 42);
  write_frame(sink, plans, 43);   // no record: its slot says so
  sink.write_control(99, r);      // a record for another frame is not this one's
  write_frame(sink, plans, 44);
  const auto control_of = [&](uint64_t c) {
    return reinterpret_cast<const shm::ShmControl*>(ring.slot(c) + sizeof(shm::ShmSlot));
  };
  const shm::ShmControl& c0 = *control_of(0);
  EXPECT_EQ(c0.valid, 1u);
  EXPECT_EQ(c0.measured_frame, 40u);
  EXPECT_EQ(c0.health_flags, 0b0101u);
  EXPECT_EQ(c0.mean_luma, 0.25f);
  EXPECT_EQ(c0.variance, 0.01f);
  EXPECT_EQ(c0.motion, 0.125f);
  EXPECT_EQ(c0.black_fraction, 0.5f);
  EXPECT_EQ(c0.white_fraction, 0.0625f);
  EXPECT_EQ(c0.scene_distance, 0.75f);
  ASSERT_EQ(c0.outputs, 2u);
  EXPECT_EQ(c0.output[0].gain, 2.5f);
  EXPECT_EQ(c0.output[0].mean_luma, 0.45f);
  EXPECT_EQ(c0.output[0].motion, 0.1f);
  EXPECT_EQ((std::array{c0.output[0].x, c0.output[0].y, c0.output[0].w, c0.output[0].h}), (std::array{100, 40, 224, 224}));
  EXPECT_EQ((std::array{c0.output[1].x, c0.output[1].y, c0.output[1].w, c0.output[1].h}), (std::array{0, 0, 64, 48}));
  for (const uint64_t c : {1u, 2u}) {
    EXPECT_EQ(control_of(c)->valid, 0u) << c;
    EXPECT_EQ(control_of(c)->outputs, 0u) << c;
  }
}

TEST(ShmSink, TheRingWrapsAndKeepsTheNewestFrames) {
  const auto plans = make_plans();
  const std::string name = ring_name("wrap");
  ShmSink sink(name, 3, plans, "p");
  const Mapping ring(name);
  for (int64_t i = 0; i < 10; ++i) write_frame(sink, plans, i);
  EXPECT_EQ(ring.header().published.load(), 10u);
  for (uint64_t c = 7; c < 10; ++c) {
    EXPECT_EQ(ring.slot_header(c).seq.load(), 2 * c + 2) << c;
    EXPECT_EQ(ring.slot_header(c).frame_index.load(), int64_t(c));
    const auto want = pattern(plans[0], int64_t(c), 0);
    EXPECT_EQ(std::memcmp(ring.slot(c) + ring.header().output[0].offset, want.data(), want.size()), 0) << c;
  }
}

TEST(ShmSink, AReaderRacingTheWriterNeverAcceptsATornFrame) {
  // One 192 KiB output, 2 slots: the writer laps the reader.
  FrameInfo frame;
  frame.width = 512;
  frame.height = 256;
  const std::vector<OutputPlan> plans{make_output_plan({.name = "big", .resize = {512, 128, 0}, .dtype = ops::DType::U8},
                                                       frame, "p")};
  const std::string name = ring_name("race");
  ShmSink sink(name, 2, plans, "p");
  const Mapping ring(name);
  constexpr int64_t kFrames = 4000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int64_t i = 0; i < kFrames; ++i) write_frame(sink, plans, i);
    done = true;
  });
  const shm::ShmOutput& out = ring.header().output[0];
  std::vector<std::byte> copy(out.bytes);
  int64_t accepted = 0, rejected = 0, last = -1;
  while (!done || ring.header().published.load() > uint64_t(last + 1)) {
    const uint64_t published = ring.header().published.load(std::memory_order_acquire);
    if (published == 0) continue;
    const uint64_t c = published - 1;
    const shm::ShmSlot& slot = ring.slot_header(c);
    if (slot.seq.load(std::memory_order_acquire) != 2 * c + 2) {
      ++rejected;
      continue;
    }
    const int64_t index = slot.frame_index.load(std::memory_order_relaxed);
    std::memcpy(copy.data(), ring.slot(c) + out.offset, copy.size());
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != 2 * c + 2) {
      ++rejected;
      continue;
    }
    ASSERT_EQ(index, int64_t(c));
    ASSERT_GE(index, last) << "frames go forward";
    const auto want = pattern(plans[0], index, 0);
    ASSERT_EQ(std::memcmp(copy.data(), want.data(), want.size()), 0) << "torn frame " << index;
    last = index;
    ++accepted;
  }
  writer.join();
  EXPECT_EQ(last, kFrames - 1) << "the last frame is read";
  EXPECT_GT(accepted, 50);
  std::printf("reader: %lld frames accepted, %lld reads rejected as overwritten\n", static_cast<long long>(accepted),
              static_cast<long long>(rejected));
}

TEST(ShmSink, AStaleRingOfTheSameNameIsReplaced) {
  const auto plans = make_plans();
  const std::string name = ring_name("stale");
  std::ofstream("/dev/shm/" + name) << "left by a writer that died";
  ShmSink sink(name, 2, plans, "p");
  const Mapping ring(name);
  EXPECT_EQ(std::memcmp(ring.header().magic, "FFSHMRNG", 8), 0);
  EXPECT_EQ(ring.header().published.load(), 0u);
}

TEST(ShmSink, ASuccessorOfTheSameNameKeepsItWhenTheOldSinkGoes) {
  const auto plans = make_plans();
  const std::string name = ring_name("successor");
  auto old_sink = std::make_unique<ShmSink>(name, 2, plans, "p");
  const Mapping old_ring(name);
  write_frame(*old_sink, plans, 0);
  ShmSink successor(name, 4, plans, "p");   // e.g. the stream changed resolution
  old_sink.reset();
  EXPECT_EQ(old_ring.header().closed.load(), 1u) << "the old ring's readers learn it ended";
  ASSERT_TRUE(fs::exists("/dev/shm/" + name)) << "the name now belongs to the successor";
  const Mapping ring(name);
  EXPECT_EQ(ring.header().slots, 4u);
  EXPECT_EQ(ring.header().closed.load(), 0u);
}

TEST(ShmSink, BadNamesAndSizesAreRefused) {
  const auto plans = make_plans();
  for (const std::string& bad : std::vector<std::string>{"", ".hidden", "a/b", "a b", std::string(201, 'x')}) {
    EXPECT_FALSE(valid_shm_name(bad)) << bad;
    EXPECT_THROW(ShmSink(bad, 2, plans, "p"), ConfigError) << bad;
  }
  for (const std::string& good : std::vector<std::string>{"lobby", "cam-1.main_0", std::string(200, 'x')})
    EXPECT_TRUE(valid_shm_name(good)) << good;
  EXPECT_THROW(ShmSink(ring_name("zero"), 0, plans, "p"), ConfigError);
  EXPECT_THROW(ShmSink(ring_name("none"), 2, {}, "p"), ConfigError);
}

//! A ring whose "device" slots are host memory: RingSink's placement protocol (what cuda_ipc does
//! with GPU memory) without a GPU. Outputs placed in a slot stay; others are copied in.
class HostSlotRing final : public RingSink {
 public:
  HostSlotRing(const std::string& name, int32_t slots, std::vector<OutputPlan> plans)
      : RingSink(name, slots, std::move(plans), "p", shm::RingMemory::Cuda, "pipeline 'p': sink test"),
        memory_(size_t(slots) * header().device_slot_bytes) {
    publish();
  }
  std::byte* device_slot(uint64_t c) override {
    return memory_.data() + (c % header().slots) * header().device_slot_bytes;
  }
  int copies = 0;

 private:
  void put_tensors(uint64_t c, std::span<const std::byte* const> outputs) override {
    for (size_t k = 0; k < outputs.size(); ++k) {
      std::byte* const dst = device_slot(c) + header().output[k].offset;
      if (outputs[k] == dst) continue;
      std::memcpy(dst, outputs[k], header().output[k].bytes);
      ++copies;
    }
  }
  std::vector<std::byte> memory_;
};

TEST(RingSinks, FramesPlacedInTheirSlotsArePublishedInOrderWithoutACopy) {
  const auto plans = make_plans();
  const std::string name = ring_name("placed");
  HostSlotRing sink(name, 3, plans);
  const Mapping ring(name);
  EXPECT_EQ(ring.header().memory, uint32_t(shm::RingMemory::Cuda));
  EXPECT_EQ(ring.header().device_slot_bytes % shm::kDeviceAlign, 0u);
  // Two frames in flight at a time, as the runner keeps them: placed, then made, then written.
  std::vector<std::vector<std::byte*>> placed;
  const auto make_and_write = [&](int64_t index) {
    const auto& at = placed[size_t(index)];
    for (size_t k = 0; k < plans.size(); ++k) {
      const auto bytes = pattern(plans[k], index, k);
      std::memcpy(at[k], bytes.data(), bytes.size());   // the kernel's writes
    }
    EXPECT_EQ(ring.slot_header(uint64_t(index)).seq.load(), 2 * uint64_t(index) + 1) << "being written";
    sink.write(index, std::vector<const std::byte*>(at.begin(), at.end()));
    EXPECT_EQ(ring.slot_header(uint64_t(index)).seq.load(), 2 * uint64_t(index) + 2) << "published";
    EXPECT_EQ(ring.header().published.load(), uint64_t(index) + 1);
  };
  for (int64_t i = 0; i < 8; ++i) {
    if (i >= 2) make_and_write(i - 2);
    const auto at = sink.place_outputs(i);
    ASSERT_EQ(at.size(), plans.size());
    placed.emplace_back(at.begin(), at.end());
  }
  make_and_write(6);
  make_and_write(7);
  EXPECT_EQ(sink.copies, 0) << "outputs made in place are not copied";
  EXPECT_EQ(placed[0][0], placed[3][0]) << "frame 3 reuses frame 0's slot";
  EXPECT_EQ(placed[1][1] - placed[1][0], ptrdiff_t(ring.header().output[1].offset));
  // Outputs made elsewhere (a batch group's) are copied into the next slot.
  write_frame(sink, plans, 8);
  EXPECT_EQ(sink.copies, int(plans.size()));
  EXPECT_EQ(ring.header().published.load(), 9u);
  EXPECT_EQ(ring.slot_header(8).frame_index.load(), 8);
  const auto want = pattern(plans[0], 8, 0);
  EXPECT_EQ(std::memcmp(sink.device_slot(8) + ring.header().output[0].offset, want.data(), want.size()), 0);
  // More frames placed than the ring has slots would share a slot: refused.
  for (int64_t i = 9; i < 12; ++i) sink.place_outputs(i);
  EXPECT_THROW(sink.place_outputs(12), SinkError);
}

TEST(RingSinks, AHostRingPlacesNothing) {
  const auto plans = make_plans();
  ShmSink sink(ring_name("unplaced"), 2, plans, "p");
  EXPECT_TRUE(sink.place_outputs(0).empty());
  write_frame(sink, plans, 0);   // the frame's write takes its slot as before
}

TEST(RingSinks, ACudaIpcRingNeedsACudaDevice) {
  SinkSpec spec;
  spec.kind = SinkKind::CudaIpc;
  spec.shm_name = ring_name("cpu");
  try {
    make_sink(spec, make_plans(), "cam", {DeviceKind::Cpu});
    ADD_FAILURE() << "a cuda_ipc sink was made for a pipeline on the CPU";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline 'cam': sink cuda_ipc needs a"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists("/dev/shm/" + spec.shm_name)) << "nothing made";
}

}  // namespace
}  // namespace framefuse
