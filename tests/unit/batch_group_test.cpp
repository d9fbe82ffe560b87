// BatchGroup (pipeline/runtime/batch_group.hpp) on the CPU executor, through its public API:
// members fed synthetic frames (seeded random images in pool slots, never zeros). Oracle: each
// frame run alone through a plain executor of its own; a member's outputs must equal those byte
// for byte, in the member's frame order. Batch forming (fill, max_wait, shapes), backpressure,
// failures and shutdown are checked by counts that add up: pushed = processed + dropped, and the
// frame pool's slots all come back.
#include <gtest/gtest.h>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "config/load.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/memory/frame_pool.hpp"
#include "pipeline/runtime/batch_group.hpp"
#include "tests/support/capture_sink.hpp"
#include "tests/support/media_fixtures.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr DeviceSpec kCpu{DeviceKind::Cpu, 0};

//! Three outputs of the three kinds (normalised f32 CHW, letterboxed f16, u8 HWC), small enough
//! for a shared two-core host.
std::vector<OutputSpec> outputs() {
  OutputSpec cls;
  cls.name = "cls";
  cls.resize.shorter_side = 36;
  cls.center_crop = std::array<int32_t, 2>{32, 32};
  cls.mean = {0.485f, 0.456f, 0.406f};
  cls.std = {0.229f, 0.224f, 0.225f};
  OutputSpec det;
  det.name = "det";
  det.resize = {48, 48, 0};
  det.aspect = AspectMode::Letterbox;
  det.dtype = ops::DType::F16;
  OutputSpec thumb;
  thumb.name = "thumb";
  thumb.resize = {40, 24, 0};
  thumb.interp = ops::Interp::Area;
  thumb.scale = 1.f;
  thumb.layout = ops::Layout::Hwc;
  thumb.dtype = ops::DType::U8;
  return {cls, det, thumb};
}

PipelineSpec member_spec(std::string name, bool live = false) {
  PipelineSpec p;
  p.name = std::move(name);
  p.source.kind = live ? SourceKind::Rtsp : SourceKind::File;
  p.outputs = outputs();
  p.sink.kind = SinkKind::Null;
  return p;
}

BatchGroupSpec group_spec(int max_batch, std::chrono::microseconds max_wait, int queue_depth = 0) {
  BatchGroupSpec g;
  g.name = "g";
  g.max_batch = max_batch;
  g.max_wait = max_wait;
  g.queue_depth = queue_depth;
  return g;
}

//! One frame of a synthetic stream: its image (the oracle's input) and the same pixels in a slot
//! of `pool` (what the group gets; the slot returns when the group drops the frame).
struct Frame {
  HostImage image;
  DecodedFrame decoded;
};

Frame make_frame(FramePool& pool, ops::PixelFormat format, int32_t w, int32_t h, uint32_t seed, int64_t index) {
  Frame f{random_image(format, w, h, seed), {}};
  f.decoded.info = frame_info(f.image, ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  size_t bytes = 0;
  for (size_t i = 0; i < f.image.planes.size(); ++i) bytes += f.image.planes[i].size();
  FramePool::Acquired slot = pool.acquire(bytes, {});
  EXPECT_EQ(slot.status, FramePool::Status::Ok);
  ops::ImageView view = f.image.view();
  std::byte* at = slot.lease.get();
  for (size_t i = 0; i < f.image.planes.size(); ++i) {
    std::memcpy(at, f.image.planes[i].data(), f.image.planes[i].size());
    view.data[i] = reinterpret_cast<const uint8_t*>(at);
    at += f.image.planes[i].size();
  }
  f.decoded.view = view;
  f.decoded.memory = FrameMemory::Host;
  f.decoded.index = index;
  f.decoded.decoded_at = Clock::now();
  f.decoded.owner = std::move(slot.lease);
  return f;
}

//! What a plain executor of its own makes of `image`: one buffer per output.
std::vector<std::vector<std::byte>> run_alone(const PipelineSpec& spec, const HostImage& image) {
  const FrameInfo info = frame_info(image, ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  const std::vector<OutputPlan> plans = make_output_plans(spec, info);
  CpuExecutor exec(1);
  exec.setup(info, make_color_params(spec.color, info), plans, 1);
  auto outs = poisoned_outputs(plans, 1);
  const ops::ImageView view = image.view();
  exec.process({&view, 1}, pointers(outs));
  return outs;
}

uint64_t total_dropped(const PipelineSnapshot& s) {
  return std::accumulate(s.dropped.begin(), s.dropped.end(), uint64_t{0});
}
uint64_t dropped(const PipelineSnapshot& s, DropReason r) { return s.dropped[static_cast<size_t>(r)]; }

//! A member under test: its spec, stats, captured outputs, the frames it was given (for the oracle).
struct TestMember {
  explicit TestMember(PipelineSpec s) : spec(std::move(s)) {}
  PipelineSpec spec;
  PipelineStats stats;
  CaptureSinks capture;
  std::vector<HostImage> pushed;
  std::unique_ptr<BatchGroup::Member> member;

  void attach(BatchGroup& g) { member = g.attach(spec, stats, capture.factory()); }
  bool push(Frame f) {
    pushed.push_back(std::move(f.image));
    return member->push(std::move(f.decoded));
  }
  //! Every captured frame equals its image run alone, indices 0, 1, 2, ... in order.
  void expect_outputs_as_alone() {
    std::lock_guard lock(capture.mu);
    ASSERT_EQ(capture.frames.size(), pushed.size()) << spec.name;
    for (size_t i = 0; i < capture.frames.size(); ++i) {
      EXPECT_EQ(capture.frames[i].index, int64_t(i)) << spec.name << ": out of order";
      const auto alone = run_alone(spec, pushed[i]);
      ASSERT_EQ(capture.frames[i].outputs.size(), alone.size());
      for (size_t k = 0; k < alone.size(); ++k)
        EXPECT_TRUE(capture.frames[i].outputs[k] == alone[k])
            << spec.name << " frame " << i << " output " << spec.outputs[k].name << " differs from the frame run alone";
    }
  }
};

class BatchGroupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { spdlog::set_level(spdlog::level::warn); }
  std::shared_ptr<FramePool> pool = FramePool::create(256);
};

// ---- outputs ----

TEST_F(BatchGroupTest, FourMembersGetTheOutputsEachWouldGetAlone) {
  constexpr int kFrames = 12;   // per member
  BatchGroup group(group_spec(4, 20ms), kCpu, 2);
  std::vector<std::unique_ptr<TestMember>> members;
  for (int m = 0; m < 4; ++m) {
    members.push_back(std::make_unique<TestMember>(member_spec(fmt::format("cam{}", m))));
    members.back()->attach(group);
  }
  // Each member pushes its own stream from its own thread, as pipelines do.
  std::vector<std::thread> feeders;
  for (int m = 0; m < 4; ++m) {
    feeders.emplace_back([&, m] {
      for (int i = 0; i < kFrames; ++i)
        ASSERT_TRUE(members[m]->push(make_frame(*pool, ops::PixelFormat::Nv12, 160, 90, 1000u * m + i + 1, i)));
    });
  }
  for (auto& t : feeders) t.join();
  for (auto& m : members) m->member->finish();
  for (auto& m : members) {
    m->expect_outputs_as_alone();
    const PipelineSnapshot s = m->stats.snapshot();
    EXPECT_EQ(s.frames_processed, uint64_t(kFrames));
    EXPECT_EQ(total_dropped(s), 0u);
    EXPECT_EQ(s.latency.count(), uint64_t(kFrames));
    EXPECT_EQ(s.queue_wait.count(), uint64_t(kFrames));
    EXPECT_LE(s.queue_wait.sum_s, s.latency.sum_s) << "the wait is part of the latency";
    EXPECT_EQ(s.submit.count(), uint64_t(kFrames));
    EXPECT_LE(s.queue_wait.sum_s + s.submit.sum_s, s.latency.sum_s) << "so is the submit, after the wait";
    // Each frame's share of its batch's submit CPU: the CPU executor runs the batch in the call.
    EXPECT_GT(s.submit_cpu_s, 0.0);
    EXPECT_LE(s.submit_cpu_s, s.submit.sum_s + kFrames * 1e-6) << "a share of a call's thread CPU, within its wall time";
    EXPECT_EQ(s.frame, "160x90 nv12 bt709/limited");
    EXPECT_EQ(m->capture.flushes, 1) << "finish() flushes the sink once";
    EXPECT_EQ(m->capture.sink_shapes.size(), 1u);
  }
  const BatchGroupSnapshot g = group.snapshot();
  EXPECT_EQ(g.frames, uint64_t(4 * kFrames));
  EXPECT_GE(g.batches, uint64_t(kFrames));       // at most 4 frames a batch
  EXPECT_LE(g.batches, uint64_t(4 * kFrames));
  EXPECT_EQ(g.members, 4);
  EXPECT_EQ(g.queue_depth, 0);
  members.clear();
  EXPECT_EQ(pool->in_use(), 0);
}

// ---- batch forming ----

//! A max_wait far longer than the work of a test takes, even under ThreadSanitizer on a loaded host
//! (~1 s there): a batch that waited for it shows as a run of at least kLongWait, twice kNoWait.
constexpr std::chrono::microseconds kLongWait = 20s;
constexpr auto kNoWait = kLongWait / 2;

TEST_F(BatchGroupTest, BatchesFillToMaxBatchWhenFramesAreReady) {
  // Every batch must leave because it is full.
  constexpr int kRounds = 6;
  BatchGroup group(group_spec(4, kLongWait), kCpu, 1);
  std::vector<std::unique_ptr<TestMember>> members;
  for (int m = 0; m < 4; ++m) {
    members.push_back(std::make_unique<TestMember>(member_spec(fmt::format("cam{}", m))));
    members.back()->attach(group);
  }
  const auto start = Clock::now();
  for (int i = 0; i < kRounds; ++i)
    for (int m = 0; m < 4; ++m)
      ASSERT_TRUE(members[m]->push(make_frame(*pool, ops::PixelFormat::Yuv420p, 96, 64, 77u * m + i + 1, i)));
  for (auto& m : members) m->member->finish();
  EXPECT_LT(Clock::now() - start, kNoWait) << "a batch waited for max_wait";
  const BatchGroupSnapshot g = group.snapshot();
  EXPECT_EQ(g.batches, uint64_t(kRounds));
  EXPECT_EQ(g.frames, uint64_t(4 * kRounds));
  EXPECT_EQ(g.wait_timeouts, 0u);
  EXPECT_DOUBLE_EQ(g.mean_fill(), 1.0);
  for (auto& m : members) m->expect_outputs_as_alone();
}

TEST_F(BatchGroupTest, ALoneFrameLeavesAfterMaxWait) {
  constexpr auto kWait = 60ms;
  BatchGroup group(group_spec(8, kWait), kCpu, 1);
  TestMember m(member_spec("lone"));
  m.attach(group);
  const auto start = Clock::now();
  ASSERT_TRUE(m.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 5u, 0)));
  while (m.stats.frames_processed.load() == 0 && Clock::now() - start < 20s) std::this_thread::sleep_for(1ms);
  const auto waited = Clock::now() - start;
  EXPECT_EQ(m.stats.frames_processed.load(), 1u);
  EXPECT_GE(waited, kWait) << "the frame left before max_wait with nothing else queued";
  EXPECT_LT(waited, kWait + 5s);
  const BatchGroupSnapshot g = group.snapshot();
  EXPECT_EQ(g.batches, 1u);
  EXPECT_EQ(g.wait_timeouts, 1u);
  EXPECT_DOUBLE_EQ(g.mean_fill(), 1.0 / 8);
  m.member->finish();
  m.expect_outputs_as_alone();
}

TEST_F(BatchGroupTest, ABatchOfEveryLiveMemberLeavesWithoutWaiting) {
  // Two cameras, max_batch 8, max_wait kLongWait: once both cameras have a frame queued the batch
  // leaves; a lone camera frame still waits (the other camera's may come).
  BatchGroup group(group_spec(8, kLongWait), kCpu, 1);
  TestMember a(member_spec("a", /*live=*/true)), b(member_spec("b", /*live=*/true));
  a.attach(group);
  b.attach(group);
  const auto start = Clock::now();
  ASSERT_TRUE(a.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 21u, 0)));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(a.stats.frames_processed.load(), 0u) << "a's frame left without b's";
  ASSERT_TRUE(b.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 22u, 0)));
  while ((a.stats.frames_processed.load() == 0 || b.stats.frames_processed.load() == 0) &&
         Clock::now() - start < 2 * kLongWait)
    std::this_thread::sleep_for(1ms);
  EXPECT_LT(Clock::now() - start, kNoWait) << "the batch waited for max_wait";
  const BatchGroupSnapshot g = group.snapshot();
  EXPECT_EQ(g.batches, 1u);
  EXPECT_EQ(g.frames, 2u);
  EXPECT_EQ(g.wait_timeouts, 0u);
  a.member->finish();
  b.member->finish();
  a.expect_outputs_as_alone();
  b.expect_outputs_as_alone();
}

TEST_F(BatchGroupTest, FramesOfOtherShapesGoToOtherBatchesInEachMembersOrder) {
  // a: 96x64 frames; b: 80x60 yuv420p; c switches from 96x64 nv12 to 80x60 yuv420p half-way.
  BatchGroup group(group_spec(4, 1'000'000us), kCpu, 1);
  TestMember a(member_spec("a")), b(member_spec("b")), c(member_spec("c"));
  for (TestMember* m : {&a, &b, &c}) m->attach(group);
  const auto big = [&](uint32_t seed, int64_t i) { return make_frame(*pool, ops::PixelFormat::Nv12, 96, 64, seed, i); };
  const auto small = [&](uint32_t seed, int64_t i) {
    return make_frame(*pool, ops::PixelFormat::Yuv420p, 80, 60, seed, i);
  };
  // Queue: a0 b0 c0 a1 b1 c1 | c2 c3 (small). Big: a0 c0 a1 c1 = one full batch; small: b0 b1 c2 c3.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(a.push(big(10 + i, i)));
    ASSERT_TRUE(b.push(small(20 + i, i)));
    ASSERT_TRUE(c.push(big(30 + i, i)));
  }
  for (int i = 2; i < 4; ++i) ASSERT_TRUE(c.push(small(30 + i, i)));
  for (TestMember* m : {&a, &b, &c}) m->member->finish();
  const BatchGroupSnapshot g = group.snapshot();
  EXPECT_EQ(g.batches, 2u);
  EXPECT_EQ(g.frames, 8u);
  EXPECT_EQ(g.wait_timeouts, 0u) << "a batch waited although 4 frames of its shape were queued";
  for (TestMember* m : {&a, &b, &c}) m->expect_outputs_as_alone();
  // c's sink was made again for the new shape (cls follows the aspect: 32x32 crop either way;
  // the letterbox and thumbnail keep theirs), after the first was flushed.
  EXPECT_EQ(c.capture.sink_shapes.size(), 2u);
  EXPECT_EQ(c.capture.flushes, 2);
  EXPECT_EQ(c.stats.snapshot().frame, "80x60 yuv420p bt709/limited");
}

TEST_F(BatchGroupTest, AMemberBehindAnotherShapeKeepsItsOrder) {
  // a: big, small, big. The second big frame may not overtake a's small one: two batches of big
  // would deliver a2 before a1. b's bigs fill the batches around it.
  BatchGroup group(group_spec(2, 30ms), kCpu, 1);
  TestMember a(member_spec("a")), b(member_spec("b"));
  a.attach(group);
  b.attach(group);
  ASSERT_TRUE(a.push(make_frame(*pool, ops::PixelFormat::Nv12, 96, 64, 1, 0)));
  ASSERT_TRUE(a.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 2, 1)));
  ASSERT_TRUE(a.push(make_frame(*pool, ops::PixelFormat::Nv12, 96, 64, 3, 2)));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.push(make_frame(*pool, ops::PixelFormat::Nv12, 96, 64, 10 + i, i)));
  a.member->finish();
  b.member->finish();
  a.expect_outputs_as_alone();
  b.expect_outputs_as_alone();
}

// ---- backpressure ----

TEST_F(BatchGroupTest, AFullGroupDropsTheOldestOfALiveMemberAndMakesAFileMemberWait) {
  // max_batch 1, room for 2 waiting frames. The file member's first frame blocks in its sink,
  // which holds the process thread, so what comes next waits in the group.
  BatchGroup group(group_spec(1, 0us, 2), kCpu, 1);
  TestMember file(member_spec("file")), live(member_spec("live", /*live=*/true));
  file.attach(group);
  live.attach(group);
  file.capture.hold = true;
  ASSERT_TRUE(file.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 1, 0)));
  ASSERT_TRUE(file.capture.wait_entered(1));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(live.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 10 + i, i)));
  EXPECT_EQ(dropped(live.stats.snapshot(), DropReason::GroupFull), 3u) << "frames 0..2 make room for 3 and 4";
  EXPECT_EQ(group.snapshot().queue_depth, 2);

  std::atomic<bool> returned{false};
  std::thread file_push([&] {
    EXPECT_TRUE(file.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 2, 1)));
    returned = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(returned.load()) << "a file member must wait for room, not drop";
  file.capture.release();
  file_push.join();
  file.member->finish();
  live.member->finish();
  file.expect_outputs_as_alone();
  const PipelineSnapshot s = live.stats.snapshot();
  EXPECT_EQ(s.frames_processed, 2u);
  EXPECT_EQ(total_dropped(s), 3u);
  {
    std::lock_guard lock(live.capture.mu);
    ASSERT_EQ(live.capture.frames.size(), 2u);
    EXPECT_EQ(live.capture.frames[0].index, 3);
    EXPECT_EQ(live.capture.frames[1].index, 4);
    EXPECT_TRUE(live.capture.frames[1].outputs == run_alone(live.spec, live.pushed[4]));
  }
  EXPECT_EQ(total_dropped(file.stats.snapshot()), 0u);
}

// ---- failures ----

TEST_F(BatchGroupTest, AFailingMemberDoesNotStallTheOthers) {
  constexpr int kFrames = 10;
  BatchGroup group(group_spec(4, 5ms), kCpu, 1);
  std::vector<std::unique_ptr<TestMember>> members;
  for (int m = 0; m < 4; ++m) {
    members.push_back(std::make_unique<TestMember>(member_spec(fmt::format("cam{}", m))));
    members.back()->attach(group);
  }
  members[1]->capture.fail_at = 3;   // its sink fails on its 4th frame
  bool refused = false;
  for (int i = 0; i < kFrames; ++i) {
    if (i == 6) {   // by now the failing write happened (frames are paced by the full group)
      ASSERT_TRUE(members[1]->capture.wait_entered(4));
      std::this_thread::sleep_for(20ms);
    }
    for (int m = 0; m < 4; ++m) {
      if (m == 1 && refused) continue;   // a pipeline stops once a push was refused
      const bool taken = members[m]->push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 100u * m + i + 1, i));
      if (m == 1) {
        refused = !taken;
      } else {
        ASSERT_TRUE(taken);
      }
    }
  }
  EXPECT_TRUE(refused) << "the failed member's pushes were still taken";
  try {
    members[1]->member->finish();
    ADD_FAILURE() << "finish() of the failed member did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full (test)");
  }
  const PipelineSnapshot failed = members[1]->stats.snapshot();
  EXPECT_EQ(failed.frames_processed, 3u);
  EXPECT_EQ(failed.frames_processed + dropped(failed, DropReason::ProcessError), members[1]->pushed.size());
  for (int m : {0, 2, 3}) {
    members[m]->member->finish();
    members[m]->expect_outputs_as_alone();
    EXPECT_EQ(total_dropped(members[m]->stats.snapshot()), 0u);
  }
  members.clear();
  EXPECT_EQ(pool->in_use(), 0);
}

TEST_F(BatchGroupTest, AMemberLeavingWithFramesWaitingDropsThemAndTheOthersContinue) {
  BatchGroup group(group_spec(4, 1'000'000us), kCpu, 1);
  TestMember stays(member_spec("stays"));
  stays.attach(group);
  auto leaves = std::make_unique<TestMember>(member_spec("leaves"));
  leaves->attach(group);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(leaves->push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 50 + i, i)));
  leaves->member.reset();   // detaches: its 3 waiting frames (no full batch yet) go
  const PipelineSnapshot gone = leaves->stats.snapshot();
  EXPECT_EQ(gone.frames_processed + dropped(gone, DropReason::ProcessError), 3u);
  EXPECT_EQ(group.snapshot().members, 1);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(stays.push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 60 + i, i)));
  stays.member->finish();   // two full batches: no wait
  stays.expect_outputs_as_alone();
  leaves.reset();
  EXPECT_EQ(pool->in_use(), 0);
}

TEST_F(BatchGroupTest, AttachRefusesControlAndOtherOutputsOrColour) {
  BatchGroup group(group_spec(4, 1ms), kCpu, 1);
  TestMember first(member_spec("first"));
  first.attach(group);
  PipelineStats stats;
  PipelineSpec control = member_spec("ctl");
  control.control.enabled = true;
  EXPECT_THROW(group.attach(control, stats), ConfigError);
  PipelineSpec other = member_spec("other");
  other.outputs[1].resize.width = 50;
  try {
    group.attach(other, stats);
    ADD_FAILURE() << "outputs that differ were accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "pipeline 'other' cannot join batch group 'g': its outputs differ from pipeline 'first''s");
  }
  PipelineSpec colour = member_spec("colour");
  colour.color.range = ops::ColorRange::Full;
  EXPECT_THROW(group.attach(colour, stats), ConfigError);
  EXPECT_EQ(group.snapshot().members, 1);
  EXPECT_THROW(BatchGroup(group_spec(kMaxBatch + 1, 1ms), kCpu), ConfigError);
  EXPECT_THROW(BatchGroup(group_spec(8, 1ms, 4), kCpu), ConfigError) << "queue_depth below max_batch";
}

// ---- shutdown ----

TEST_F(BatchGroupTest, StoppingWithFramesWaitingAndInFlightReleasesEveryFrame) {
  std::vector<std::unique_ptr<TestMember>> members;
  {
    BatchGroup group(group_spec(8, 1'000'000us, 64), kCpu, 1);
    for (int m = 0; m < 4; ++m) {
      members.push_back(std::make_unique<TestMember>(member_spec(fmt::format("cam{}", m))));
      members.back()->attach(group);
    }
    members[0]->capture.hold = true;   // the first batch stays in the sink: the rest waits behind it
    for (int i = 0; i < 5; ++i)
      for (int m = 0; m < 4; ++m)
        ASSERT_TRUE(members[m]->push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 7u * m + i + 1, i)));
    ASSERT_TRUE(members[0]->capture.wait_entered(1));
    EXPECT_GT(pool->in_use(), 8);
    group.stop();
    EXPECT_FALSE(members[2]->push(make_frame(*pool, ops::PixelFormat::Nv12, 64, 48, 999, 5))) << "stopped";
    members[0]->capture.release();
  }   // the destructor waits for what was waiting and in flight
  EXPECT_EQ(pool->in_use(), 0) << "a frame outlived the group";
  for (int m = 0; m < 4; ++m) {
    const PipelineSnapshot s = members[m]->stats.snapshot();
    EXPECT_EQ(s.frames_processed, 5u) << "frames waiting at stop are processed";
    EXPECT_EQ(s.frames_processed + total_dropped(s), members[m]->pushed.size());
  }
  EXPECT_THROW(members[2]->member->finish(), std::runtime_error) << "it pushed after the stop";
  members[0]->member->finish();
  members[0]->expect_outputs_as_alone();
  members.clear();   // Members outliving their group detach cleanly
}

// ---- configuration ----

//! Loads `text` as a config next to an existing clip.
config::DaemonConfig load(const std::string& text) {
  const TempDir dir("framefuse_batch");
  std::ofstream(dir.path / "clip.mp4") << "x";
  return config::load_string(text, "batch.yaml", dir.path);
}

constexpr const char* kMembers = R"(
batching:
  - {name: cams, max_batch: 16, max_wait: 2500us, device: cpu, queue_depth: 40}
  - {name: lobby}
pipelines:
  - {name: a, source: {uri: clip.mp4}, batch_group: cams, outputs: [{name: o, resize: {width: 64, height: 64}}], sink: {type: null}}
  - {name: b, source: {uri: clip.mp4}, batch_group: cams, device: cpu, outputs: [{name: o, resize: {width: 64, height: 64}}], sink: {type: null}}
  - {name: c, source: {uri: clip.mp4}, batch_group: lobby, outputs: [{name: o}], sink: {type: null}}
  - {name: d, source: {uri: clip.mp4}, outputs: [{name: o}], sink: {type: null}}
)";

TEST(BatchGroupConfig, GroupsAndMembersLoadTyped) {
  const config::DaemonConfig c = load(std::string("device: cpu\n") + kMembers);
  ASSERT_EQ(c.batching.size(), 2u);
  EXPECT_EQ(c.batching[0].name, "cams");
  EXPECT_EQ(c.batching[0].max_batch, 16);
  EXPECT_EQ(c.batching[0].max_wait, 2500us);
  EXPECT_EQ(c.batching[0].device, (DeviceSpec{DeviceKind::Cpu, 0}));
  EXPECT_EQ(c.batching[0].queue_depth, 40);
  EXPECT_EQ(c.batching[1], (BatchGroupSpec{"lobby", 8, 4000us, std::nullopt, 0}));
  ASSERT_EQ(c.pipelines.size(), 4u);
  EXPECT_EQ(c.pipelines[0].batch_group, "cams");
  EXPECT_EQ(c.pipelines[1].batch_group, "cams");
  EXPECT_EQ(c.pipelines[2].batch_group, "lobby");
  EXPECT_EQ(c.pipelines[3].batch_group, "");
}

TEST(BatchGroupConfig, AMemberOnAnotherDeviceIsRefused) {
  // The daemon's default (auto) is not the group's cpu: a names the line and key.
  std::string message;
  try {
    load(kMembers);
  } catch (const ConfigError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "batch.yaml:6:53: pipelines[0].batch_group: this pipeline's device is auto but batch group 'cams' "
                     "runs on cpu");
}

TEST(BatchGroupConfig, TheShippedExampleLoads) {
  const char* src = std::getenv("FRAMEFUSE_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  std::ifstream in(fs::path(src) / "config/examples/batching.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  const TempDir dir("framefuse_batch_example");   // the example's clip path, relative to its folder
  fs::create_directories(dir.path / "config/examples");
  fs::create_directories(dir.path / "samples");
  std::ofstream(dir.path / "samples/sample_720p.mp4") << "x";
  const config::DaemonConfig c = config::load_string(text, "batching.yaml", dir.path / "config/examples");
  ASSERT_EQ(c.batching.size(), 1u);
  int members = 0;
  for (const auto& p : c.pipelines) members += p.batch_group == c.batching[0].name;
  EXPECT_EQ(members, 4);
}

}  // namespace
}  // namespace framefuse::test
