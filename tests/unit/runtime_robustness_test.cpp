// PipelineRunner under stress, through its public API only: a resolution change mid-stream (clips
// of two sizes spliced into one MPEG-TS; also HEVC going from 8 to 10 bits), the frame pool running
// dry under each policy (files wait, live sources drop the oldest frame and count it), a stop while
// the queue and the pool are full, and many pipelines at once. Every frame is accounted for:
// decoded = processed + dropped. The oracle of a re-setup is a fresh pipeline: outputs after the
// switch must equal, byte for byte, those of a pipeline that only ever saw the second clip.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "pipeline/runtime/pipeline_runner.hpp"
#include "tests/support/media_fixtures.hpp"
#include "tests/support/sanitizers.hpp"

extern "C" {
#include <libavutil/log.h>
}

namespace framefuse {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr DeviceSpec kCpu{DeviceKind::Cpu, 0};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint64_t total_dropped(const PipelineSnapshot& s) { return std::accumulate(s.dropped.begin(), s.dropped.end(), uint64_t{0}); }
uint64_t dropped(const PipelineSnapshot& s, DropReason r) { return s.dropped[static_cast<size_t>(r)]; }

//! Waits until `runner` is done (or `limit` passed), then joins it.
void finish(PipelineRunner& runner, std::chrono::seconds limit = 120s) {
  const auto give_up = Clock::now() + limit;
  while (!runner.done() && Clock::now() < give_up) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(runner.done()) << runner.spec().name << " did not finish within " << limit.count() << " s";
  if (!runner.done()) runner.request_stop();   // a failed test still ends
  runner.join();
}

//! Polls the runner's snapshot until `pred` holds; false after `limit`.
template <class Pred>
bool wait_for(PipelineRunner& runner, Pred pred, std::chrono::seconds limit = 60s) {
  const auto give_up = Clock::now() + limit;
  while (Clock::now() < give_up) {
    if (pred(runner.stats().snapshot())) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

OutputSpec output(std::string name, ResizeSpec resize, ops::DType dtype, ops::Layout layout) {
  OutputSpec o;
  o.name = std::move(name);
  o.resize = resize;
  o.dtype = dtype;
  o.layout = layout;
  o.mean = {0.485f, 0.456f, 0.406f};
  o.std = {0.229f, 0.224f, 0.225f};
  return o;
}

//! An output that takes the process thread far longer than decoding a small frame takes the
//! decode thread (a 1280x720 float tensor per 320x240 frame, on one worker thread), so the queue
//! and the pool fill up.
OutputSpec heavy_output() { return output("heavy", {1280, 720, 0}, ops::DType::F32, ops::Layout::Chw); }

std::string npy_name(const std::string& output, int64_t index) { return fmt::format("{}/{:08d}.npy", output, index); }

class RuntimeRobustness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    av_log_set_level(AV_LOG_QUIET);
    spdlog::set_level(spdlog::level::warn);
  }
  void SetUp() override {
    if (!test::have_ffmpeg()) GTEST_SKIP() << "ffmpeg CLI not found";
  }

  enum class Codec { H264, Hevc, Hevc10 };
  //! An H.264 clip (B-frames, 4 reference frames: the decoder keeps frames of its own) as MPEG-TS;
  //! or the same as HEVC, 8-bit (Main) or 10-bit (Main 10).
  fs::path clip(int w, int h, int frames, Codec codec = Codec::H264) {
    static constexpr const char* kNames[] = {"h264", "hevc", "hevc10"};
    const std::string name = fmt::format("clip_{}x{}_{}_{}", w, h, frames, kNames[int(codec)]);
    const fs::path mp4 = dir.path / (name + ".mp4"), ts = dir.path / (name + ".ts");
    if (!fs::exists(ts)) {
      const std::string x265 = "-c:v libx265 -preset ultrafast "
                               "-x265-params pools=none:frame-threads=1:log-level=error:bframes=2:ref=4:keyint=12";
      const std::string args =
          codec == Codec::H264   ? "-c:v libx264 -threads 1 -preset ultrafast -bf 2 -refs 4 -g 12 -pix_fmt yuv420p"
          : codec == Codec::Hevc ? x265 + " -pix_fmt yuv420p"
                                 : x265 + " -pix_fmt yuv420p10le";
      test::ffmpeg(fmt::format("-f lavfi -i testsrc2=size={}x{}:rate=25 -frames:v {} {} {}", w, h, frames, args,
                               mp4.string()));
      test::concat_as_mpegts(std::vector<fs::path>{mp4}, ts);
    }
    return ts;
  }
  //! `a` then `b`, spliced into one MPEG-TS stream.
  fs::path spliced(const fs::path& a, const fs::path& b) {
    const fs::path out = dir.path / (a.stem().string() + "+" + b.stem().string() + ".ts");
    test::concat_as_mpegts(std::vector<fs::path>{a, b}, out);
    return out;
  }

  static PipelineSpec pipeline(std::string name, const fs::path& uri, std::vector<OutputSpec> outputs) {
    PipelineSpec p;
    p.name = std::move(name);
    p.source.uri = uri.string();
    p.decoder = DecoderKind::Cpu;
    p.outputs = std::move(outputs);
    p.sink.kind = SinkKind::Null;
    return p;
  }
  //! A live pipeline: the runner's live policies (drop the oldest frame, slice threads, reconnect
  //! at the end of the stream) key on the source kind, and FFmpeg opens a local file under the
  //! RTSP options too (they are demuxer options a file ignores), so the source deterministically
  //! outruns the processing. `max_frames` ends it (-1: it "reconnects" at each end, forever).
  static PipelineSpec live(PipelineSpec p, int64_t max_frames) {
    p.source.kind = SourceKind::Rtsp;
    p.source.max_frames = max_frames;
    p.source.reconnect_initial = 10ms;
    p.source.reconnect_max = 10ms;
    return p;
  }

  test::TempDir dir{"framefuse_runtime"};
};

// ---- resolution change mid-stream ----

struct ResolutionCase {
  const char* name;
  int32_t frames_per_file;
  bool control;
  bool ten_bit_after;   //!< HEVC, 8-bit then 10-bit (Main, then Main 10): the pixel format changes too
};
void PrintTo(const ResolutionCase& c, std::ostream* os) { *os << c.name; }

class RuntimeResolutionChange : public RuntimeRobustness, public ::testing::WithParamInterface<ResolutionCase> {};

TEST_P(RuntimeResolutionChange, EveryFrameIsProcessedAndTheOutputsAreReplannedAtTheSwitch) {
  const ResolutionCase& c = GetParam();
  constexpr int kFrames = 12;   // per clip
  using enum Codec;
  const fs::path a = clip(320, 240, kFrames, c.ten_bit_after ? Hevc : H264),
                 b = clip(480, 270, kFrames, c.ten_bit_after ? Hevc10 : H264), ab = spliced(a, b);
  // "fixed" keeps its shape across the switch; "short" (torchvision Resize(36)) follows the aspect.
  const std::vector<OutputSpec> outputs{output("fixed", {64, 48, 0}, ops::DType::F32, ops::Layout::Chw),
                                        output("short", {0, 0, 36}, ops::DType::U8, ops::Layout::Hwc)};
  auto run = [&](const fs::path& source, const char* sink_dir) {
    PipelineSpec p = pipeline("switch", source, outputs);   // one name: metadata.json is comparable
    p.sink.kind = SinkKind::Npy;
    p.sink.directory = (dir.path / sink_dir).string();
    p.sink.frames_per_file = c.frames_per_file;
    if (c.control) {
      p.control.enabled = true;
      p.control.auto_gain.enabled = true;
      p.control.auto_gain.target = 0.6;   // away from testsrc2's mean: the gain moves every frame
    }
    PipelineRunner runner(p, kCpu, 2);
    runner.start();
    finish(runner);
    return runner.stats().snapshot();
  };
  const PipelineSnapshot s = run(ab, "ab");
  EXPECT_EQ(s.last_error, "");
  EXPECT_EQ(s.state, SourceState::Finished);
  EXPECT_EQ(s.frames_decoded, uint64_t(2 * kFrames));
  EXPECT_EQ(s.frames_processed, uint64_t(2 * kFrames));
  EXPECT_EQ(total_dropped(s), 0u);
  EXPECT_EQ(s.decode_errors, 0u);
  EXPECT_EQ(s.frame.substr(0, 16), c.ten_bit_after ? "480x270 yuv420p1" : "480x270 yuv420p ") << s.frame;
  ASSERT_EQ(run(a, "a").frames_processed, uint64_t(kFrames));
  ASSERT_EQ(run(b, "b").frames_processed, uint64_t(kFrames));

  const auto got = test::read_files(dir.path / "ab"), only_a = test::read_files(dir.path / "a"),
             only_b = test::read_files(dir.path / "b");
  // Each file of the spliced run is the file a fresh pipeline wrote for that clip alone (frame
  // indices of the second clip shifted by the first's length); nothing more, nothing less.
  std::map<std::string, std::string> expected;
  for (const auto& [path, bytes] : only_a)
    if (path.ends_with(".npy")) expected[path] = bytes;
  for (const auto& [path, bytes] : only_b) {
    if (!path.ends_with(".npy")) continue;
    const auto slash = path.find('/');
    expected[npy_name(path.substr(0, slash), std::stoll(path.substr(slash + 1)) + kFrames)] = bytes;
  }
  std::map<std::string, std::string> npys;
  for (const auto& [path, bytes] : got)
    if (path.ends_with(".npy")) npys[path] = bytes;
  ASSERT_EQ(npys.size(), expected.size());
  for (const auto& [path, bytes] : expected) {
    ASSERT_TRUE(npys.contains(path)) << path << " missing";
    EXPECT_TRUE(npys.at(path) == bytes) << path << " differs from the same clip's frames in a fresh pipeline";
  }
  // The shapes: per frame [36, 48, 3] before the switch and [36, 64, 3] after; "fixed" unchanged.
  const int64_t n = c.frames_per_file;
  for (int64_t first = 0; first < 2 * kFrames;) {
    const int64_t clip_end = first < kFrames ? kFrames : 2 * kFrames;
    const int64_t frames = std::min(n, clip_end - first);   // a flush at the switch ends a stacked file
    const int64_t w = first < kFrames ? 48 : 64;
    std::vector<int64_t> fixed{3, 48, 64}, shorter{36, w, 3};
    if (n > 1) {
      fixed.insert(fixed.begin(), frames);
      shorter.insert(shorter.begin(), frames);
    }
    EXPECT_EQ(test::npy_shape(npys[npy_name("fixed", first)]), fixed) << "frame " << first;
    EXPECT_EQ(test::npy_shape(npys[npy_name("short", first)]), shorter) << "frame " << first;
    first += frames;
  }
  EXPECT_EQ(got.at("short/metadata.json"), only_b.at("short/metadata.json")) << "metadata describes the new plan";
}

INSTANTIATE_TEST_SUITE_P(Sinks, RuntimeResolutionChange,
                         ::testing::Values(ResolutionCase{"one_frame_per_file", 1, false, false},
                                           ResolutionCase{"stacked_with_control", 5, true, false},
                                           ResolutionCase{"to_10_bit_hevc_stacked_with_control", 5, true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- the frame pool running dry ----

TEST_F(RuntimeRobustness, ExhaustedPoolOfAFileMakesTheDecoderWaitAndDropsNothing) {
  constexpr int kFrames = 48, kSlots = 14;
  PipelineSpec p = pipeline("block", clip(320, 240, kFrames), {heavy_output()});
  p.queue_depth = 8;
  p.pool_frames = kSlots;   // fewer than decoder references + queue + in flight
  PipelineRunner runner(p, kCpu, 1);
  runner.start();
  int64_t most = 0;
  EXPECT_TRUE(wait_for(runner, [&](const PipelineSnapshot& s) {
    most = std::max(most, s.pool_in_use);
    EXPECT_LE(s.pool_in_use, kSlots);
    return s.pool_in_use == kSlots;
  })) << "the pool never ran dry; most slots in use: " << most;
  finish(runner);
  const PipelineSnapshot s = runner.stats().snapshot();
  EXPECT_EQ(s.last_error, "");
  EXPECT_EQ(s.state, SourceState::Finished);
  EXPECT_EQ(s.pool_capacity, kSlots);
  EXPECT_EQ(s.frames_decoded, uint64_t(kFrames));
  EXPECT_EQ(s.frames_processed, uint64_t(kFrames));
  EXPECT_EQ(total_dropped(s), 0u) << "a file waits for slots, it never drops";
}

TEST_F(RuntimeRobustness, ExhaustedPoolOfALiveSourceDropsTheOldestFramesCountingEach) {
  constexpr int kFrames = 48, kSlots = 12;
  PipelineSpec p = live(pipeline("drop", clip(320, 240, kFrames), {heavy_output()}), kFrames);
  p.queue_depth = 16;      // deeper than the pool can fill: every drop is the pool's
  p.pool_frames = kSlots;
  PipelineRunner runner(p, kCpu, 1);
  ASSERT_FALSE(runner.preview()->want(1h, 0s).has_value());   // previews wanted from the start
  runner.start();
  finish(runner);
  const PipelineSnapshot s = runner.stats().snapshot();
  EXPECT_EQ(s.last_error, "");
  EXPECT_EQ(s.state, SourceState::Finished) << "drops do not stop a pipeline";
  EXPECT_EQ(s.frames_decoded, uint64_t(kFrames));
  EXPECT_GT(dropped(s, DropReason::PoolExhausted), 0u);
  EXPECT_EQ(dropped(s, DropReason::QueueFull), 0u);
  EXPECT_EQ(dropped(s, DropReason::DecodeError) + dropped(s, DropReason::ProcessError), 0u);
  EXPECT_EQ(s.frames_processed + total_dropped(s), s.frames_decoded) << "every frame is processed or counted";
  EXPECT_GT(s.frames_processed, uint64_t(0));
  EXPECT_FALSE(runner.preview()->want(0s, 0s).has_value()) << "the ended source released its preview frame";
  EXPECT_EQ(s.pool_in_use, 0) << "and with it every pool slot";
}

TEST_F(RuntimeRobustness, AFullQueueOfALiveSourceDropsTheOldestFramesCountingEach) {
  constexpr int kFrames = 48;
  PipelineSpec p = live(pipeline("queue", clip(320, 240, kFrames), {heavy_output()}), kFrames);
  p.queue_depth = 2;   // the default pool has room for far more than the queue
  PipelineRunner runner(p, kCpu, 1);
  runner.start();
  finish(runner);
  const PipelineSnapshot s = runner.stats().snapshot();
  EXPECT_EQ(s.last_error, "");
  EXPECT_EQ(s.state, SourceState::Finished);
  EXPECT_EQ(s.frames_decoded, uint64_t(kFrames));
  EXPECT_GT(dropped(s, DropReason::QueueFull), 0u);
  EXPECT_EQ(dropped(s, DropReason::PoolExhausted), 0u);
  EXPECT_EQ(s.frames_processed + total_dropped(s), s.frames_decoded) << "every frame is processed or counted";
}

TEST_F(RuntimeRobustness, FrameIndicesAndMaxFramesRunOnAcrossReconnects) {
  constexpr int kClip = 12, kMax = 30;   // sessions of 12, 12 and 6 frames
  const OutputSpec o = output("o", {32, 24, 0}, ops::DType::U8, ops::Layout::Hwc);
  PipelineSpec p = live(pipeline("again", clip(160, 120, kClip), {o}), kMax);
  p.queue_depth = kMax;   // nothing dropped
  p.sink.kind = SinkKind::Npy;
  p.sink.directory = (dir.path / "again").string();
  PipelineRunner runner(p, kCpu, 1);
  runner.start();
  finish(runner, 60s);
  const PipelineSnapshot s = runner.stats().snapshot();
  EXPECT_EQ(s.state, SourceState::Finished);
  EXPECT_EQ(s.frames_decoded, uint64_t(kMax)) << "max_frames counts the frames of every session";
  EXPECT_EQ(s.reconnects, 2u);
  EXPECT_EQ(total_dropped(s), 0u);
  EXPECT_EQ(s.frames_processed, uint64_t(kMax));
  for (int i = 0; i < kMax; ++i)   // one file per frame: a reconnect overwrote none
    EXPECT_TRUE(fs::exists(dir.path / "again" / npy_name("o", i))) << i;
  EXPECT_FALSE(fs::exists(dir.path / "again" / npy_name("o", kMax)));
}

TEST_F(RuntimeRobustness, AFailedPlanCountsEveryDecodedFrameAsProcessedOrDropped) {
  constexpr int kFrames = 24;
  for (const bool is_live : {false, true}) {
    OutputSpec o = output("o", {32, 24, 0}, ops::DType::U8, ops::Layout::Hwc);
    o.crop = {100, 100, 400, 300, false};   // pixels: outside a 160x120 frame, found at the first frame
    PipelineSpec p = pipeline(is_live ? "plan_live" : "plan_file", clip(160, 120, kFrames), {o});
    if (is_live) p = live(p, kFrames);
    PipelineRunner runner(p, kCpu, 1);
    runner.start();
    finish(runner, 60s);
    const PipelineSnapshot s = runner.stats().snapshot();
    EXPECT_EQ(s.state, SourceState::Failed) << p.name;
    EXPECT_NE(s.last_error.find("crop"), std::string::npos) << p.name << ": " << s.last_error;
    EXPECT_EQ(s.frames_processed, 0u) << p.name;
    EXPECT_GE(s.frames_decoded, 1u) << p.name;
    EXPECT_EQ(total_dropped(s), s.frames_decoded) << p.name << ": the frame being planned and the later ones count";
  }
}

// ---- stopping with frames in flight ----

struct StopCase {
  const char* name;
  bool live;
  int32_t queue_depth, pool_frames;   //!< pool_frames 0: the default
};
void PrintTo(const StopCase& c, std::ostream* os) { *os << c.name; }

class RuntimeStop : public RuntimeRobustness, public ::testing::WithParamInterface<StopCase> {};

TEST_P(RuntimeStop, JoinsPromptlyAccountsForEveryFrameAndReturnsEverySlot) {
  const StopCase& c = GetParam();
  constexpr int kFrames = 120;
  PipelineSpec p = pipeline(c.name, clip(320, 240, kFrames), {heavy_output()});
  if (c.live) p = live(std::move(p), -1);
  p.queue_depth = c.queue_depth;
  p.pool_frames = c.pool_frames;
  PipelineRunner runner(p, kCpu, 1);
  runner.start();
  // Stop only once the decode thread is held up: by a full queue, an empty pool, or dropping.
  ASSERT_TRUE(wait_for(runner, [&](const PipelineSnapshot& s) {
    if (c.live) return total_dropped(s) > 0;
    return c.pool_frames ? s.pool_in_use == c.pool_frames : s.queue_depth == c.queue_depth;
  })) << "the pipeline never backed up";
  const auto t0 = Clock::now();
  runner.request_stop();
  runner.join();
  // Join drains the queued frames (heavy ones), so the bound scales with the sanitizer's slowdown.
  EXPECT_LT(seconds_since(t0), 5.0 * test::kSanitizerSlowdown) << "join after request_stop";
  EXPECT_TRUE(runner.done());
  const PipelineSnapshot s = runner.stats().snapshot();
  EXPECT_EQ(s.last_error, "");
  EXPECT_LT(s.frames_decoded, uint64_t(kFrames)) << "stopped before the end";
  EXPECT_EQ(s.frames_processed + total_dropped(s), s.frames_decoded) << "queued frames are drained, none vanish";
  if (!c.live) {
    EXPECT_EQ(total_dropped(s), 0u);
  }
  EXPECT_EQ(s.queue_depth, 0);
  // No preview was wanted, so no frame was kept for one: every slot is back.
  EXPECT_FALSE(runner.preview()->want(0s, 1h).has_value()) << "the source has ended: no wait";
  EXPECT_EQ(s.pool_in_use, 0) << "slots still leased after join";
}

INSTANTIATE_TEST_SUITE_P(HeldUp, RuntimeStop,
                         ::testing::Values(StopCase{"file_queue_full", false, 4, 0},
                                           StopCase{"file_pool_exhausted", false, 8, 14},
                                           StopCase{"live_dropping", true, 16, 12}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- many pipelines at once ----

TEST_F(RuntimeRobustness, SixteenPipelinesAtOnceEachWriteWhatOneAloneWrites) {
  constexpr int kPipelines = 16, kFrames = 16;
  const fs::path a = clip(320, 240, kFrames), b = clip(480, 270, kFrames);
  const std::vector<fs::path> sources{a, spliced(a, b)};
  const std::vector<OutputSpec> outputs{output("small", {32, 24, 0}, ops::DType::U8, ops::Layout::Chw),
                                        output("short", {0, 0, 20}, ops::DType::F32, ops::Layout::Hwc)};
  auto spec = [&](int i, const std::string& sink_dir) {
    PipelineSpec p = pipeline("many", sources[size_t(i) % sources.size()], outputs);
    p.sink.kind = SinkKind::Npy;
    p.sink.directory = (dir.path / sink_dir).string();
    p.sink.frames_per_file = 4;
    p.queue_depth = 2;
    return p;
  };
  std::vector<std::map<std::string, std::string>> reference;
  for (size_t k = 0; k < sources.size(); ++k) {
    PipelineRunner alone(spec(int(k), fmt::format("ref{}", k)), kCpu, 1);
    alone.start();
    finish(alone);
    reference.push_back(test::read_files(dir.path / fmt::format("ref{}", k)));
  }
  std::vector<std::unique_ptr<PipelineRunner>> runners;
  for (int i = 0; i < kPipelines; ++i)
    runners.push_back(std::make_unique<PipelineRunner>(spec(i, fmt::format("p{}", i)), kCpu, 1));
  for (auto& r : runners) r->start();
  for (auto& r : runners) finish(*r);
  for (int i = 0; i < kPipelines; ++i) {
    SCOPED_TRACE(fmt::format("pipeline {}", i));
    const PipelineSnapshot s = runners[size_t(i)]->stats().snapshot();
    const uint64_t frames = i % 2 ? 2 * kFrames : kFrames;
    EXPECT_EQ(s.last_error, "");
    EXPECT_EQ(s.state, SourceState::Finished);
    EXPECT_EQ(s.frames_decoded, frames);
    EXPECT_EQ(s.frames_processed, frames);
    EXPECT_EQ(total_dropped(s), 0u);
    EXPECT_TRUE(test::read_files(dir.path / fmt::format("p{}", i)) == reference[size_t(i) % sources.size()])
        << "outputs differ from the same pipeline run alone";
  }
}


// ---- the frame kept for previews ----

//! A frame whose owner the test watches: use_count() - 1 is how many copies others hold.
DecodedFrame watched_frame(int64_t index, const std::shared_ptr<int>& owner) {
  DecodedFrame f;
  f.index = index;
  f.owner = owner;
  return f;
}

TEST(PreviewFrame, NothingIsKeptWhileNoPreviewIsWanted) {
  PreviewFrame preview;
  const auto owner = std::make_shared<int>(0);
  for (int i = 0; i < 8; ++i) preview.offer(watched_frame(i, owner), Clock::now());
  EXPECT_EQ(owner.use_count(), 1) << "a frame nobody previews is not held";
  EXPECT_FALSE(preview.want(0s, 0s).has_value());
}

TEST(PreviewFrame, AWantKeepsEachNewFrameUntilItsDeadlineThenLetsGo) {
  PreviewFrame preview;
  const auto t0 = Clock::now();
  EXPECT_FALSE(preview.want(10s, 0s).has_value()) << "nothing decoded since: no frame yet";
  const auto a = std::make_shared<int>(0), b = std::make_shared<int>(0), c = std::make_shared<int>(0);
  preview.offer(watched_frame(1, a), t0 + 1s);
  EXPECT_EQ(a.use_count(), 2);
  preview.offer(watched_frame(2, b), t0 + 2s);
  EXPECT_EQ(a.use_count(), 1) << "the newer frame replaces it";
  EXPECT_EQ(b.use_count(), 2);
  EXPECT_EQ(preview.want(1ms, 0s)->index, 2) << "a shorter want does not shorten the deadline";
  preview.offer(watched_frame(3, c), t0 + 9s);
  EXPECT_EQ(c.use_count(), 2) << "still wanted 9 s after a 10 s want";
  preview.offer(watched_frame(4, c), t0 + 11s);
  EXPECT_EQ(c.use_count(), 1) << "no longer wanted: the kept frame is released at the next frame";
  EXPECT_EQ(b.use_count(), 1);
}

TEST(PreviewFrame, AWantWithNothingKeptWaitsForTheNextFrame) {
  PreviewFrame preview;
  const auto owner = std::make_shared<int>(0);
  std::optional<DecodedFrame> got;
  std::thread waiter([&] { got = preview.want(30s, 30s); });
  // Offered until the waiter's want is in (a frame offered before it is not kept).
  for (int64_t i = 0; i < 20000; ++i) {
    preview.offer(watched_frame(i, owner), Clock::now());
    std::this_thread::sleep_for(1ms);
    if (owner.use_count() > 1) break;
  }
  waiter.join();
  ASSERT_TRUE(got.has_value()) << "the waiter got the frame decoded after it asked";
  EXPECT_EQ(got->owner, owner);
}

TEST(PreviewFrame, TheSourcesEndWakesAWaiterAtOnce) {
  PreviewFrame preview;
  std::optional<DecodedFrame> got = DecodedFrame{};
  const auto t0 = Clock::now();
  std::thread waiter([&] { got = preview.want(30s, 30s); });
  std::this_thread::sleep_for(20ms);
  preview.end();
  waiter.join();
  EXPECT_FALSE(got.has_value());
  EXPECT_LT(seconds_since(t0), 10.0) << "end() woke the 30 s wait";
  EXPECT_FALSE(preview.want(30s, 30s).has_value()) << "after the end no want waits";
}

}  // namespace
}  // namespace framefuse
