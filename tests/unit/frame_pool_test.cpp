// The decode frame pool: its slots on their own, then H.264 decoded into it by VideoSource (frames
// byte-identical to FFmpeg's own buffers, reference counting, the block and drop policies), the
// decoder choice on a host without NVDEC, and what a running pipeline publishes about both.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "pipeline/memory/frame_pool.hpp"
#include "pipeline/runtime/pipeline_runner.hpp"
#include "tests/support/media_fixtures.hpp"

extern "C" {
#include <libavutil/log.h>
}

namespace framefuse {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::Planes;
using test::tight_planes;
using Status = FramePool::Status;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- the slots on their own ----

TEST(FramePoolSlots, LeasesAreAlignedAndReturnForReuse) {
  auto pool = FramePool::create(2);
  EXPECT_EQ(pool->memory(), FrameMemory::Host);
  EXPECT_EQ(pool->capacity(), 2);
  auto a = pool->acquire(1000, {});
  ASSERT_EQ(a.status, Status::Ok);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.lease.get()) % 64, 0u);
  EXPECT_TRUE(pool->owns(a.lease.get() + 999));
  EXPECT_FALSE(pool->owns(&a));
  EXPECT_EQ(pool->in_use(), 1);
  std::byte* const first = a.lease.get();
  auto copy = a.lease;   // a second reference keeps the slot leased
  a.lease.reset();
  EXPECT_EQ(pool->in_use(), 1);
  copy.reset();
  EXPECT_EQ(pool->in_use(), 0);
  auto again = pool->acquire(1000, {});
  ASSERT_EQ(again.status, Status::Ok);
  EXPECT_EQ(again.lease.get(), first) << "an idle slot is reused, not reallocated";
}

TEST(FramePoolSlots, ExhaustedAcquireTimesOutOrIsCancelled) {
  auto pool = FramePool::create(2);
  auto a = pool->acquire(4096, {}), b = pool->acquire(4096, {});
  ASSERT_EQ(a.status, Status::Ok);
  ASSERT_EQ(b.status, Status::Ok);
  auto t0 = Clock::now();
  EXPECT_EQ(pool->acquire(4096, {60ms, nullptr}).status, Status::TimedOut);
  EXPECT_GE(seconds_since(t0), 0.055);

  std::atomic<bool> cancel{false};
  std::jthread canceller([&] {
    std::this_thread::sleep_for(100ms);
    cancel = true;
    pool->wake();
  });
  t0 = Clock::now();
  EXPECT_EQ(pool->acquire(4096, {30s, &cancel}).status, Status::Cancelled);
  EXPECT_LT(seconds_since(t0), 10.0);

  std::jthread returner([&] {
    std::this_thread::sleep_for(100ms);
    a.lease.reset();
  });
  const auto c = pool->acquire(4096, {30s, nullptr});
  EXPECT_EQ(c.status, Status::Ok) << "a waiting acquire takes the slot that returns";
}

TEST(FramePoolSlots, ANewSizeFreesIdleSlotsAndLeasedOnesOnReturn) {
  auto pool = FramePool::create(2);
  auto small = pool->acquire(1000, {});
  auto idle = pool->acquire(1000, {});
  std::byte* const idle_ptr = idle.lease.get();
  idle.lease.reset();
  auto big = pool->acquire(5000, {});   // the idle 1000-byte slot makes room
  ASSERT_EQ(big.status, Status::Ok);
  EXPECT_EQ(pool->in_use(), 2);
  std::byte* const small_ptr = small.lease.get();
  small.lease.reset();   // a slot of the old size returns: the returning thread does not free it,
  EXPECT_TRUE(pool->owns(small_ptr));
  EXPECT_EQ(pool->in_use(), 1);
  EXPECT_EQ(pool->acquire(5000, {}).status, Status::Ok);   // the next acquire does
  EXPECT_FALSE(pool->owns(small_ptr));
  if (idle_ptr != big.lease.get()) EXPECT_FALSE(pool->owns(idle_ptr)) << "the idle slot of the old size is freed";
}

TEST(FramePoolSlots, AWaitingAcquireOfANewSizeTakesTheRoomOfAReturnedOldSlot) {
  auto pool = FramePool::create(1);
  auto old = pool->acquire(1000, {});
  ASSERT_EQ(pool->acquire(5000, {10ms, nullptr}).status, Status::TimedOut);
  std::jthread returner([&] {
    std::this_thread::sleep_for(100ms);
    old.lease.reset();
  });
  const auto t0 = Clock::now();
  const auto got = pool->acquire(5000, {30s, nullptr});
  EXPECT_EQ(got.status, Status::Ok);
  EXPECT_LT(seconds_since(t0), 10.0) << "woken by the return, not by the timeout";
}

TEST(FramePoolSlots, DropOldestMakesRoomInsteadOfWaiting) {
  auto pool = FramePool::create(3);
  std::deque<FramePool::Lease> queued;
  int drops = 0;
  pool->set_drop_oldest([&] {
    if (queued.empty()) return false;
    queued.pop_front();
    ++drops;
    return true;
  });
  for (int i = 0; i < 10; ++i) {
    auto got = pool->acquire(512, {30s, nullptr});
    ASSERT_EQ(got.status, Status::Ok) << i;
    queued.push_back(std::move(got.lease));
  }
  EXPECT_EQ(drops, 7);
  EXPECT_EQ(queued.size(), 3u);
  queued.clear();
  auto held = pool->acquire(512, {}), held2 = pool->acquire(512, {}), held3 = pool->acquire(512, {});
  const auto t0 = Clock::now();
  EXPECT_EQ(pool->acquire(512, {50ms, nullptr}).status, Status::TimedOut) << "nothing queued to drop: it waits";
  EXPECT_GE(seconds_since(t0), 0.045);
}

TEST(FramePoolSlots, DefaultSizeCoversDecoderQueueAndFramesInFlight) {
  EXPECT_EQ(default_pool_frames(4, 3, true), 17 + 2 + 4 + 3);
  EXPECT_EQ(default_pool_frames(4, 8, false), 17 + 4 + 3) << "slice threads hold no frames";
  EXPECT_EQ(default_pool_frames(1, 1, true), 17 + 1 + 3);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int auto_threads = cores > 1 ? std::min(cores + 1, 16) : 1;
  EXPECT_EQ(default_pool_frames(4, 0, true), 17 + auto_threads - 1 + 4 + 3);
}

TEST(FramePoolSlots, SoftwareDecodersSharingTheHostSplitItsCores) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(shared_decoder_threads(1), 0) << "one decoder: FFmpeg's own count";
  for (const int n : {2, 3, 4, 7, 16, 64, 1000}) {
    SCOPED_TRACE(fmt::format("{} decoders on {} cores", n, cores));
    const int t = shared_decoder_threads(n);
    EXPECT_GE(t, 1);
    EXPECT_LE(t, 16);
    if (t > 1) EXPECT_LE(n * t, cores) << "together they use no more threads than cores";
    if (n * 2 <= cores && cores / n <= 16)
      EXPECT_GT(n * (t + 1), cores) << "and leave no core idle that a thread could use";
  }
}

TEST(FramePoolSlots, DecodeOptionsGiveFileDecodersTheirShareAndPoolForIt) {
  PipelineSpec file;
  file.source.uri = "clip.mp4";
  file.queue_depth = 3;
  const DeviceSpec cpu{DeviceKind::Cpu, 0}, gpu{DeviceKind::Cuda, 0};
  const DecodeOptions shared = decode_options(file, cpu, 4);
  EXPECT_EQ(shared.threads, shared_decoder_threads(4));
  EXPECT_EQ(shared.pool->capacity(), default_pool_frames(3, shared.threads, true));
  EXPECT_EQ(decode_options(file, cpu).threads, 0) << "alone: FFmpeg's own count";
  PipelineSpec camera = file;
  camera.source.kind = SourceKind::Rtsp;
  const DecodeOptions live = decode_options(camera, cpu, 4);
  EXPECT_EQ(live.threads, 0) << "live sources keep FFmpeg's slice threads";
  EXPECT_EQ(live.pool->capacity(), default_pool_frames(3, 0, false));

  EXPECT_TRUE(decodes_file_in_software(file, cpu));
  EXPECT_FALSE(decodes_file_in_software(file, gpu)) << "auto on a GPU: NVDEC, one thread";
  EXPECT_FALSE(decodes_file_in_software(camera, cpu)) << "slice threads hold no frames";
  file.decoder = DecoderKind::Cpu;
  EXPECT_TRUE(decodes_file_in_software(file, gpu));
}

TEST(FramePoolSlots, RunnersOfSoftwareDecodedFilesShareTheCoresWhileTheyLive) {
  PipelineSpec file;
  file.source.uri = "clip.mp4";
  PipelineSpec camera = file;
  camera.source.kind = SourceKind::Rtsp;
  const DeviceSpec cpu{DeviceKind::Cpu, 0};
  DecoderShare share;
  EXPECT_EQ(share.threads(), 0) << "no member yet: a decoder opening now is alone";
  {
    PipelineRunner a(file, cpu, 1, nullptr, &share), b(file, cpu, 1, nullptr, &share);
    PipelineRunner live(camera, cpu, 1, nullptr, &share), outside(file, cpu, 1);
    EXPECT_EQ(share.threads(), shared_decoder_threads(2)) << "two files decoded in software; the camera is no member";
    {
      PipelineRunner c(file, cpu, 1, nullptr, &share);
      EXPECT_EQ(share.threads(), shared_decoder_threads(3));
    }
    EXPECT_EQ(share.threads(), shared_decoder_threads(2)) << "a runner leaves when it is destroyed";
  }
  EXPECT_EQ(share.threads(), 0);
}

// ---- decoding into the pool ----

class FramePoolDecode : public ::testing::Test {
 protected:
  static constexpr int kW = 176, kH = 144, kFrames = 24;

  static void SetUpTestSuite() { av_log_set_level(AV_LOG_QUIET); }
  void SetUp() override {
    if (!test::have_ffmpeg()) GTEST_SKIP() << "ffmpeg CLI not found";
  }

  //! H.264 with B-frames and 4 reference frames, so the decoder keeps frames of its own.
  fs::path h264(const char* pix_fmt = "yuv420p") {
    const fs::path out = dir.path / fmt::format("clip_{}.mp4", pix_fmt);
    if (!fs::exists(out)) {
      test::ffmpeg(fmt::format("-f lavfi -i testsrc2=size={}x{}:rate=25 -frames:v {} -c:v libx264 -threads 1 "
                               "-preset ultrafast -bf 2 -refs 4 -g 12 -pix_fmt {} {}",
                               kW, kH, kFrames, pix_fmt, out.string()));
    }
    return out;
  }

  static SourceSpec file(const fs::path& p) {
    SourceSpec s;
    s.uri = p.string();
    return s;
  }

  static DecodeOptions into(std::shared_ptr<FramePool> pool, int threads = 1) {
    DecodeOptions o;
    o.decoder = DecoderKind::Cpu;
    o.pool = std::move(pool);
    o.threads = threads;
    return o;
  }

  //! Every frame's planes, decoded into FFmpeg's own buffers.
  static std::vector<Planes> reference(const fs::path& clip) {
    VideoSource src(file(clip), "ref");
    src.open();
    std::vector<Planes> out;
    while (auto f = src.read()) out.push_back(tight_planes(*f));
    return out;
  }

  test::TempDir dir{"framefuse_pool"};
};

TEST_F(FramePoolDecode, FramesInSlotsEqualFFmpegsOwnBuffers) {
  for (const char* pix_fmt : {"yuv420p", "yuv422p"}) {   // read in place / converted to RGB into a slot
    const fs::path clip = h264(pix_fmt);
    const std::vector<Planes> expected = reference(clip);
    ASSERT_EQ(expected.size(), size_t(kFrames)) << pix_fmt;
    for (const int threads : {1, 4}) {   // 4: frame threads call get_buffer2 from their own threads
      SCOPED_TRACE(fmt::format("{}, {} decoder threads", pix_fmt, threads));
      auto pool = FramePool::create(default_pool_frames(kFrames, threads, true));
      VideoSource src(file(clip), "p", into(pool, threads));
      src.open();
      int n = 0;
      while (auto f = src.read()) {
        ASSERT_LT(n, kFrames);
        EXPECT_EQ(f->memory, FrameMemory::Host);
        EXPECT_TRUE(pool->owns(f->view.data[0])) << "frame " << n << " is not in a pool slot";
        for (int i = 0; i < ops::plane_count(f->view.format); ++i) {
          EXPECT_EQ(f->view.pitch[i] % 128, 0) << "plane " << i;
          EXPECT_EQ(reinterpret_cast<uintptr_t>(f->view.data[i]) % 64, 0u) << "plane " << i;
        }
        EXPECT_TRUE(tight_planes(*f) == expected[n]) << "frame " << n;
        ++n;
      }
      EXPECT_EQ(n, kFrames);
      EXPECT_EQ(src.decode_errors(), 0u);
    }
  }
}

TEST_F(FramePoolDecode, DecoderKeepsReferencesAndSlotsReturnWhenFramesGo) {
  auto pool = FramePool::create(default_pool_frames(4, 1, true));
  DecodedFrame kept;
  {
    VideoSource src(file(h264()), "p", into(pool));
    src.open();
    std::vector<DecodedFrame> frames;
    for (int i = 0; i < 8; ++i) {
      auto f = src.read();
      ASSERT_TRUE(f.has_value()) << i;
      frames.push_back(std::move(*f));
    }
    EXPECT_GE(pool->in_use(), 8);
    kept = frames[5];
    frames.clear();
    EXPECT_GE(pool->in_use(), 2) << "our frame and the decoder's reference frames";
  }   // the decoder and its references are gone
  EXPECT_EQ(pool->in_use(), 1) << "only the frame still held";
  EXPECT_TRUE(pool->owns(kept.view.data[0]));
  kept = DecodedFrame{};
  EXPECT_EQ(pool->in_use(), 0);
}

//! Reads every frame on a thread of its own, keeping all of them until the test releases them.
struct HoldingReader {
  explicit HoldingReader(VideoSource& src) {
    thread = std::jthread([this, &src] {
      try {
        while (auto f = src.read()) {
          std::lock_guard lock(mu);
          planes.push_back(tight_planes(*f));
          held.push_back(std::move(*f));
          ++reads;
        }
      } catch (const MediaError& e) {
        std::lock_guard lock(mu);
        error = e.what();
      }
      done = true;
    });
  }
  //! True when no frame came for `quiet` (decoding a frame takes well under a millisecond).
  bool stuck(std::chrono::milliseconds quiet) {
    const int before = reads;
    std::this_thread::sleep_for(quiet);
    return reads == before && !done;
  }
  void release_oldest() {
    std::lock_guard lock(mu);
    if (!held.empty()) held.pop_front();
  }

  std::mutex mu;
  std::deque<DecodedFrame> held;
  std::vector<Planes> planes;
  std::string error;
  std::atomic<int> reads{0};
  std::atomic<bool> done{false};
  std::jthread thread;
};

TEST_F(FramePoolDecode, BlockPolicyWaitsForASlotAndResumes) {
  const fs::path clip = h264();
  const std::vector<Planes> expected = reference(clip);
  constexpr int kCapacity = 10;
  auto pool = FramePool::create(kCapacity);
  VideoSource src(file(clip), "p", into(pool));
  src.open();
  HoldingReader reader(src);
  int blocked = 0;
  const auto give_up = Clock::now() + 60s;
  while (!reader.done && Clock::now() < give_up) {
    if (!reader.stuck(150ms)) continue;
    if (pool->in_use() == kCapacity) ++blocked;   // every slot leased and read() not returning
    reader.release_oldest();
  }
  reader.thread.join();
  EXPECT_GT(blocked, 0) << "the pool never ran dry";
  EXPECT_EQ(reader.error, "");
  ASSERT_EQ(reader.planes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(reader.planes[i] == expected[i]) << "frame " << i;
  EXPECT_EQ(src.decode_errors(), 0u);
}

TEST_F(FramePoolDecode, InterruptEndsAWaitForASlot) {
  auto pool = FramePool::create(8);
  VideoSource src(file(h264()), "p", into(pool));
  src.open();
  HoldingReader reader(src);
  const auto give_up = Clock::now() + 30s;
  while (!(reader.stuck(200ms) && pool->in_use() == 8) && Clock::now() < give_up) {
  }
  ASSERT_EQ(pool->in_use(), 8) << "the reader never waited for a slot";
  const auto t0 = Clock::now();
  src.interrupt();
  reader.thread.join();
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_EQ(reader.error, "") << "interrupted reads end, they do not fail";
  EXPECT_LT(reader.reads.load(), kFrames);
}

TEST_F(FramePoolDecode, ExhaustedLongerThanTheStallTimeoutFailsNamingThePool) {
  auto pool = FramePool::create(8);
  SourceSpec spec = file(h264());
  spec.stall_timeout = 300ms;
  VideoSource src(spec, "p", into(pool));
  src.open();
  const auto t0 = Clock::now();
  HoldingReader reader(src);
  reader.thread.join();
  EXPECT_GE(seconds_since(t0), 0.3);
  EXPECT_EQ(reader.error, fmt::format("pipeline 'p': source '{}': frame pool exhausted: all 8 slots still in use "
                                      "after 300 ms (decoder references, queued and in-flight frames); raise "
                                      "pool_frames",
                                      spec.uri));
}

TEST_F(FramePoolDecode, DropPolicyDropsTheOldestQueuedFrameAndCountsEveryDrop) {
  const fs::path clip = h264();
  const std::vector<Planes> expected = reference(clip);
  auto pool = FramePool::create(10);
  std::mutex mu;
  std::deque<DecodedFrame> queue;   // what a live pipeline's queue would hold
  int drops = 0;
  pool->set_drop_oldest([&] {
    std::optional<DecodedFrame> oldest;   // released outside the lock
    std::lock_guard lock(mu);
    if (queue.empty()) return false;
    oldest = std::move(queue.front());
    queue.pop_front();
    ++drops;
    return true;
  });
  VideoSource src(file(clip), "p", into(pool));
  src.open();
  int n = 0;
  while (auto f = src.read()) {
    ASSERT_LT(n, kFrames);
    EXPECT_TRUE(tight_planes(*f) == expected[n]) << "frame " << n << ": a drop must not touch the decoder's frames";
    std::lock_guard lock(mu);
    queue.push_back(std::move(*f));
    ++n;
  }
  EXPECT_EQ(n, kFrames);
  EXPECT_GT(drops, 0);
  EXPECT_EQ(size_t(drops) + queue.size(), size_t(kFrames)) << "every frame is queued or counted as dropped";
  EXPECT_EQ(src.decode_errors(), 0u);
}

// ---- the decoder choice on this host ----

bool cuda_driver_loadable() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

TEST_F(FramePoolDecode, NvdecOnACpuPipelineIsAClearError) {
  DecodeOptions o;
  o.decoder = DecoderKind::Nvdec;
  VideoSource src(file(h264()), "p", o);
  try {
    src.open();
    FAIL() << "nvdec opened on a cpu pipeline";
  } catch (const MediaError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("pipeline 'p': source '{}': decoder nvdec: this pipeline runs on the cpu", file(h264()).uri));
  }
}

TEST_F(FramePoolDecode, NvdecWithoutADriverIsAClearError) {
  if (cuda_driver_loadable()) GTEST_SKIP() << "a CUDA driver is installed (tests/gpu/nvdec_test.cpp covers NVDEC)";
  DecodeOptions o;
  o.decoder = DecoderKind::Nvdec;
  o.cuda_device = 0;
  VideoSource src(file(h264()), "p", o);
  try {
    src.open();
    FAIL() << "nvdec opened without a driver";
  } catch (const MediaError& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("pipeline 'p': source '{}': decoder nvdec: cannot use CUDA device 0 for NVDEC: no NVIDIA "
                          "driver (libcuda.so.1 not loadable)",
                          file(h264()).uri));
  }
}

TEST_F(FramePoolDecode, AutoFallsBackToSoftwareAndReportsWhy) {
  if (cuda_driver_loadable()) GTEST_SKIP() << "a CUDA driver is installed (tests/gpu/nvdec_test.cpp covers NVDEC)";
  const fs::path clip = h264();
  const std::vector<Planes> expected = reference(clip);
  auto pool = FramePool::create(default_pool_frames(4, 1, true));
  DecodeOptions o = into(pool);
  o.decoder = DecoderKind::Auto;
  o.cuda_device = 0;   // a pipeline on cuda:0 whose host has no driver
  std::vector<std::string> reasons;
  o.on_fallback = [&](const std::string& why) { reasons.push_back(why); };
  VideoSource src(file(clip), "p", o);
  src.open();
  EXPECT_EQ(src.decoder(), DecoderKind::Cpu);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0], "cannot use CUDA device 0 for NVDEC: no NVIDIA driver (libcuda.so.1 not loadable)");
  int n = 0;
  while (auto f = src.read()) {
    ASSERT_LT(n, kFrames);
    EXPECT_TRUE(pool->owns(f->view.data[0]));
    EXPECT_TRUE(tight_planes(*f) == expected[n]) << "frame " << n;
    ++n;
  }
  EXPECT_EQ(n, kFrames);
  EXPECT_EQ(reasons.size(), 1u);
}

TEST_F(FramePoolDecode, ACodecWithoutNvdecFallsBackOrFailsOnAnyHost) {
  const fs::path clip = dir.path / "intra.mkv";
  test::ffmpeg(fmt::format("-f lavfi -i testsrc2=size={}x{}:rate=25 -frames:v 3 -c:v ffv1 {}", kW, kH, clip.string()));
  DecodeOptions o;
  o.cuda_device = 0;
  std::vector<std::string> reasons;
  o.on_fallback = [&](const std::string& why) { reasons.push_back(why); };
  VideoSource automatic(file(clip), "p", o);
  automatic.open();
  EXPECT_EQ(automatic.decoder(), DecoderKind::Cpu);
  EXPECT_EQ(reasons, std::vector<std::string>{"this FFmpeg has no NVDEC decoder for ffv1 (ffv1_cuvid)"});
  EXPECT_TRUE(automatic.read().has_value());

  o.decoder = DecoderKind::Nvdec;
  VideoSource forced(file(clip), "p", o);
  try {
    forced.open();
    FAIL() << "nvdec opened an ffv1 stream";
  } catch (const MediaError& e) {
    EXPECT_EQ(std::string(e.what()), fmt::format("pipeline 'p': source '{}': decoder nvdec: this FFmpeg has no NVDEC "
                                                 "decoder for ffv1 (ffv1_cuvid)",
                                                 clip.string()));
  }
}

TEST_F(FramePoolDecode, AutoOnACpuPipelineDecodesInSoftwareWithoutAFallback) {
  DecodeOptions o;
  int fallbacks = 0;
  o.on_fallback = [&](const std::string&) { ++fallbacks; };
  VideoSource src(file(h264()), "p", o);
  src.open();
  EXPECT_EQ(src.decoder(), DecoderKind::Cpu);
  auto f = src.read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->memory, FrameMemory::Host);
  EXPECT_EQ(fallbacks, 0);
}

// ---- a running pipeline ----

TEST_F(FramePoolDecode, APipelinePublishesItsPoolAndDecoder) {
  PipelineSpec spec;
  spec.name = "pool";
  spec.source = file(h264());
  OutputSpec out;
  out.name = "o";
  out.resize = {32, 24, 0};
  spec.outputs = {out};
  spec.sink.kind = SinkKind::Null;
  PipelineRunner runner(spec, DeviceSpec{DeviceKind::Cpu, 0}, 1);
  ASSERT_FALSE(runner.preview()->want(1h, 0s).has_value());   // previews wanted: a frame stays in the pool
  runner.start();
  const auto give_up = Clock::now() + 60s;
  while (!runner.done() && Clock::now() < give_up) std::this_thread::sleep_for(10ms);
  runner.join();
  const PipelineSnapshot s = runner.stats().snapshot();
  EXPECT_EQ(s.frames_processed, uint64_t(kFrames)) << s.last_error;
  EXPECT_EQ(s.pool_capacity, default_pool_frames(spec.queue_depth, 0, true));
  EXPECT_EQ(s.pool_in_use, 0) << "an ended pipeline keeps no frame, not even the one kept for previews";
  EXPECT_EQ(s.decoder, "cpu");
  EXPECT_EQ(s.nvdec_fallbacks, 0u);
  EXPECT_EQ(s.dropped[size_t(DropReason::PoolExhausted)], 0u);
  EXPECT_FALSE(runner.preview()->want(0s, 0s).has_value()) << "no preview of an ended pipeline";
}

}  // namespace
}  // namespace framefuse
