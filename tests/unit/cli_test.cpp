//! framefused command line: every command and option parsed, bad usage refused with one line
//! naming the option; the bench's latency quantiles from histogram counts.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/bench.hpp"
#include "daemon/cli.hpp"

namespace framefuse::daemon {
namespace {

using Args = std::vector<std::string>;

TEST(Cli, RunOptions) {
  const auto o = parse_cli({"run", "--config", "a.yaml", "--device", "cuda:1", "--log-level", "debug",
                            "--http-bind", "0.0.0.0", "--http-port", "9100", "--no-http"});
  EXPECT_EQ(o.command, Command::Run);
  EXPECT_EQ(o.config_path, "a.yaml");
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.http_bind, "0.0.0.0");
  EXPECT_EQ(o.http_port, 9100);
  EXPECT_TRUE(o.no_http);
  EXPECT_EQ(parse_cli({"run", "--config", "a.yaml", "--http-bind", "::"}).http_bind, "::");
}

TEST(Cli, BenchDefaults) {
  const auto o = parse_cli({"bench", "--clip", "c.mp4"});
  EXPECT_EQ(o.command, Command::Bench);
  BenchOptions want;
  want.clip = "c.mp4";
  EXPECT_EQ(o.bench, want);
  EXPECT_EQ(o.bench.streams, 1);
  EXPECT_EQ(o.bench.frames, 600);
  EXPECT_EQ(o.bench.decoder, DecoderKind::Auto);
  EXPECT_EQ(o.bench.device.kind, DeviceKind::Auto);
  EXPECT_FALSE(o.bench.json_path);
  EXPECT_FALSE(o.bench.hybrid);
  EXPECT_FALSE(o.bench.churn);
}

TEST(Cli, BenchEveryOption) {
  const auto o = parse_cli({"bench", "--streams", "8", "--frames", "1200", "--decoder", "nvdec", "--device", "cuda:2",
                            "--json", "r.json", "--clip", "/data/x.mkv", "--live", "64", "--live-seconds", "3",
                            "--churn", "--hybrid", "--nvdec-fps", "4800", "--cpu-fps", "900"});
  EXPECT_EQ(o.command, Command::Bench);
  EXPECT_EQ(o.bench.clip, "/data/x.mkv");
  EXPECT_EQ(o.bench.streams, 8);
  EXPECT_EQ(o.bench.frames, 1200);
  EXPECT_EQ(o.bench.decoder, DecoderKind::Nvdec);
  EXPECT_EQ(o.bench.device, (DeviceSpec{DeviceKind::Cuda, 2}));
  EXPECT_EQ(o.bench.json_path, "r.json");
  EXPECT_EQ(o.bench.live_streams, 64);
  EXPECT_EQ(o.bench.live_seconds, 3);
  EXPECT_TRUE(o.bench.churn);
  EXPECT_TRUE(o.bench.hybrid);
  EXPECT_EQ(o.bench.nvdec_fps, 4800);
  EXPECT_EQ(o.bench.cpu_fps, 900);
}

TEST(Cli, BenchDecoderAndDeviceNames) {
  const std::vector<std::pair<std::string, DecoderKind>> decoders = {
      {"auto", DecoderKind::Auto}, {"nvdec", DecoderKind::Nvdec}, {"cpu", DecoderKind::Cpu}};
  for (const auto& [name, kind] : decoders)
    EXPECT_EQ(parse_cli({"bench", "--clip", "c", "--decoder", name}).bench.decoder, kind) << name;
  const std::vector<std::pair<std::string, DeviceSpec>> devices = {{"auto", {DeviceKind::Auto, 0}},
                                                                   {"cpu", {DeviceKind::Cpu, 0}},
                                                                   {"cuda", {DeviceKind::Cuda, 0}},
                                                                   {"cuda:3", {DeviceKind::Cuda, 3}}};
  for (const auto& [name, spec] : devices)
    EXPECT_EQ(parse_cli({"bench", "--clip", "c", "--device", name}).bench.device, spec) << name;
}

struct BadUsage {
  Args args;
  std::string message;   //!< expected within the one-line error
};

TEST(Cli, BadUsageIsOneLineNamingTheProblem) {
  const std::vector<BadUsage> cases = {
      {{}, "missing command"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"run"}, "run needs --config FILE"},
      {{"run", "--config", "a.yaml", "--http-port", "70000"}, "--http-port: '70000' is not a port number"},
      {{"run", "--config", "a.yaml", "--http-port", "80x"}, "--http-port: '80x'"},
      {{"run", "--config", "a.yaml", "--http-bind", "localhost"}, "--http-bind: 'localhost' is not an IPv4 or IPv6 address"},
      {{"run", "--config", "a.yaml", "--http-bind"}, "option --http-bind needs a value"},
      {{"check-config"}, "check-config needs a FILE"},
      {{"bench"}, "bench needs --clip FILE"},
      {{"bench", "--streams", "2"}, "bench needs --clip FILE"},
      {{"bench", "--clip"}, "option --clip needs a value"},
      {{"bench", "--clip", "c", "--streams", "0"}, "--streams: '0' is not a stream count"},
      {{"bench", "--clip", "c", "--streams", "257"}, "--streams: '257'"},
      {{"bench", "--clip", "c", "--streams", "two"}, "--streams: 'two'"},
      {{"bench", "--clip", "c", "--frames", "-5"}, "--frames: '-5' is not a frame count"},
      {{"bench", "--clip", "c", "--frames", ""}, "--frames: ''"},
      {{"bench", "--clip", "c", "--frames", "10 "}, "--frames: '10 '"},
      {{"bench", "--clip", "c", "--decoder", "vaapi"}, "--decoder: 'vaapi' is not auto, nvdec or cpu"},
      {{"bench", "--clip", "c", "--device", "gpu"}, "--device: unknown device 'gpu'"},
      {{"bench", "--clip", "c", "--device", "cuda:x"}, "--device: unknown device 'cuda:x'"},
      {{"bench", "--clip", "c", "--json"}, "option --json needs a value"},
      {{"bench", "--clip", "c", "--config", "a.yaml"}, "unknown option '--config' for bench"},
      {{"bench", "--clip", "c", "--churn"}, "--churn needs --live N"},
      {{"bench", "--clip", "c", "--live-seconds", "3"}, "--live-seconds needs --live N"},
      {{"bench", "--clip", "c", "--cpu-fps", "900"}, "--nvdec-fps and --cpu-fps need --hybrid"},
      {{"run", "--config", "a.yaml", "--device", "gpu"}, "--device: unknown device 'gpu'"},
      {{"run", "--config", "a.yaml", "--log-level", "loud"}, "--log-level: unknown log level 'loud'"},
      {{"--help", "run"}, "unexpected argument 'run' after --help"},
      {{"--version", "x"}, "unexpected argument 'x' after --version"},
  };
  for (const auto& c : cases) {
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    try {
      parse_cli(c.args);
      ADD_FAILURE() << "accepted: " << joined;
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(c.message), std::string::npos) << joined << "-> " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << joined << "-> " << what;
    }
  }
}

TEST(Cli, UsageListsBench) {
  const std::string u = usage();
  for (const char* flag : {"bench", "--clip", "--streams", "--frames", "--decoder", "--json", "--live", "--churn"})
    EXPECT_NE(u.find(flag), std::string::npos) << flag;
}

using Counts = std::array<uint64_t, kLatencyBuckets.size() + 1>;

TEST(BenchLatency, QuantileIsTheBucketUpperBound) {
  Counts c{};
  EXPECT_EQ(latency_quantile(c, 0.5), 0.0);   // empty histogram
  // 100 observations: 50 in bucket 2, 45 in bucket 4, 4 in bucket 7, 1 above the last bound.
  c[2] = 50;
  c[4] = 45;
  c[7] = 4;
  c[kLatencyBuckets.size()] = 1;
  struct Case {
    double q, bound;
  };
  for (const auto& [q, bound] : std::vector<Case>{{0.01, kLatencyBuckets[2]},
                                                  {0.50, kLatencyBuckets[2]},
                                                  {0.51, kLatencyBuckets[4]},
                                                  {0.95, kLatencyBuckets[4]},
                                                  {0.96, kLatencyBuckets[7]},
                                                  {0.99, kLatencyBuckets[7]}})
    EXPECT_EQ(latency_quantile(c, q), bound) << "q " << q;
  EXPECT_TRUE(std::isinf(latency_quantile(c, 1.0)));
}

TEST(BenchLatency, SingleBucket) {
  for (size_t b = 0; b < kLatencyBuckets.size(); ++b) {
    Counts c{};
    c[b] = 7;
    EXPECT_EQ(latency_quantile(c, 0.5), kLatencyBuckets[b]) << b;
    EXPECT_EQ(latency_quantile(c, 0.99), kLatencyBuckets[b]) << b;
  }
}

TEST(BenchLive, StreamsDueTogetherCountsPhasesModuloTheFrameInterval) {
  constexpr double kFps = 25;                // 40 ms interval
  constexpr int64_t kMs = 1'000'000;
  const int64_t base = 987'654'321'000;      // a steady-clock time, ns
  // Aligned: whole intervals apart (different frames, the same phase), or 0.3 ms off.
  const std::vector<int64_t> aligned{base, base + 40 * kMs, base + 400 * kMs + 300'000, base - 80 * kMs};
  EXPECT_EQ(due_together(aligned, kFps, 1e-3), 4);
  // Spread: phases 0, 10, 20, 30 ms of the interval.
  const std::vector<int64_t> spread{base, base + 50 * kMs, base + 100 * kMs, base + 150 * kMs};
  EXPECT_EQ(due_together(spread, kFps, 1e-3), 1);
  // Across the interval's wrap: 39.8 ms and 0.1 ms after a due time are 0.3 ms apart.
  const int64_t due = 1'000 * 40 * kMs;     // a multiple of the interval
  const std::vector<int64_t> wrap{due + 39'800'000, due + 100'000, due + 20 * kMs};
  EXPECT_EQ(due_together(wrap, kFps, 1e-3), 2);
  EXPECT_EQ(due_together({}, kFps, 1e-3), 0);
}

//! Two streams that open for 150 ms, run side by side for ~300 frames each (a frame per ms), then one
//! is done while the other runs ~150 frames alone: the window leaves the opening and the tail out, so
//! its rate is the two streams' together, ~1.6x the whole run's (timing-independent: both rates come
//! from the same counts and clock).
TEST(BenchSteadyWindow, LeavesTheOpeningAndTheSlowestStreamsTailOut) {
  using Clock = std::chrono::steady_clock;
  std::array<std::atomic<uint64_t>, 2> frames{};
  std::array<std::atomic<bool>, 2> done{};
  const auto t0 = Clock::now();
  SteadyWindow window(2, [&](size_t i) { return std::pair{frames[i].load(), done[i].load()}; });
  // Every phase counts the same sleeps, so the ratios hold however long a loaded host's sleeps take:
  // steady 2 frames a sleep, the whole run 750 frames over 600 sleeps (1.6x).
  for (int i = 0; i < 150; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));   // opening: nothing
  for (int i = 0; i < 300; ++i) {
    frames[0].fetch_add(1);
    frames[1].fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  done[0] = true;
  for (int i = 0; i < 150; ++i) {
    frames[1].fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  done[1] = true;
  const double whole = double(frames[0] + frames[1]) / std::chrono::duration<double>(Clock::now() - t0).count();
  const double steady = window.stop();
  EXPECT_GT(steady, 1.3 * whole) << "steady " << steady << " fps, whole run " << whole << " fps";
  EXPECT_LT(steady, 2.5 * whole) << "steady " << steady << " fps, whole run " << whole << " fps";
}

TEST(BenchSteadyWindow, NoMomentWithEveryStreamRunningGivesZero) {
  std::array<std::atomic<uint64_t>, 2> frames{};
  std::array<std::atomic<bool>, 2> done{};
  SteadyWindow window(2, [&](size_t i) { return std::pair{frames[i].load(), done[i].load()}; });
  frames[0] = 100;   // one stream decodes all of its frames before the other has its first ten
  frames[1] = SteadyWindow::kSteadyFrom - 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  done[0] = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(window.stop(), 0);
  SteadyWindow stopped(1, [](size_t) { return std::pair{uint64_t{0}, false}; });
  EXPECT_EQ(stopped.stop(), 0) << "stopped before any stream ran";
}

}  // namespace
}  // namespace framefuse::daemon
