// config/: YAML -> DaemonConfig. Invalid configs live in tests/data/bad_configs/, each with the exact
// message it must produce; valid configs are built here around temporary files.
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <typeinfo>
#include <spdlog/fmt/fmt.h>
#include <sstream>
#include <string>
#include <vector>

#include "config/load.hpp"
#include "config/units.hpp"
#include "pipeline/error.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/sinks/sink.hpp"

namespace framefuse::config {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kSourceDir = FRAMEFUSE_SOURCE_DIR;
const fs::path kBadConfigDir = kSourceDir / "tests/data/bad_configs";

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

//! A fresh folder under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / fmt::format("framefuse_config_test_{}_{}", ::getpid(), counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }

  //! Writes `text` to path()/rel (parents created); returns the absolute path.
  fs::path write(const fs::path& rel, std::string_view text) const {
    const fs::path p = path_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  fs::path path_;
};

//! Sets (value) or unsets (nullopt) an environment variable for the scope; restores it after.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

//! The ConfigError message of f(), or a test failure when it does not throw one.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

//! A config with one RTSP pipeline whose single output has `output_keys` (one per line, no indent).
std::string with_output(std::string_view output_keys) {
  std::string out = "pipelines:\n  - name: cam\n    source: {uri: rtsp://cam.local/s}\n"
                    "    sink: {type: null}\n    outputs:\n      - name: out\n";
  std::istringstream lines{std::string(output_keys)};
  for (std::string line; std::getline(lines, line);) out += "        " + line + "\n";
  return out;
}

//! with_output(...) loaded from a string; returns that output.
OutputSpec load_output(std::string_view output_keys) {
  const DaemonConfig c = load_string(with_output(output_keys), "test.yaml", fs::temp_directory_path());
  EXPECT_EQ(c.pipelines.size(), 1u);
  EXPECT_EQ(c.pipelines[0].outputs.size(), 1u);
  return c.pipelines[0].outputs.at(0);
}

void expect_same(const SourceSpec& a, const SourceSpec& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.uri, b.uri);
  EXPECT_EQ(a.loop, b.loop);
  EXPECT_EQ(a.realtime, b.realtime);
  EXPECT_EQ(a.transport, b.transport);
  EXPECT_EQ(a.socket_timeout.count(), b.socket_timeout.count());
  EXPECT_EQ(a.stall_timeout.count(), b.stall_timeout.count());
  EXPECT_EQ(a.reconnect_initial.count(), b.reconnect_initial.count());
  EXPECT_EQ(a.reconnect_max.count(), b.reconnect_max.count());
  EXPECT_EQ(a.max_reconnects, b.max_reconnects);
  EXPECT_EQ(a.max_frames, b.max_frames);
}

void expect_same(const OutputSpec& a, const OutputSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.crop.x, b.crop.x);
  EXPECT_EQ(a.crop.y, b.crop.y);
  EXPECT_EQ(a.crop.w, b.crop.w);
  EXPECT_EQ(a.crop.h, b.crop.h);
  EXPECT_EQ(a.crop.fractional, b.crop.fractional);
  EXPECT_EQ(a.resize.width, b.resize.width);
  EXPECT_EQ(a.resize.height, b.resize.height);
  EXPECT_EQ(a.resize.shorter_side, b.resize.shorter_side);
  EXPECT_EQ(a.interp, b.interp);
  EXPECT_EQ(a.aspect, b.aspect);
  EXPECT_EQ(a.center_crop, b.center_crop);
  EXPECT_EQ(a.pad_value, b.pad_value);
  EXPECT_EQ(a.channels, b.channels);
  EXPECT_FLOAT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.mean, b.mean);
  EXPECT_EQ(a.std, b.std);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.dtype, b.dtype);
}

void expect_same(const ColorSpec& a, const ColorSpec& b) {
  EXPECT_EQ(a.matrix, b.matrix);
  EXPECT_EQ(a.range, b.range);
  EXPECT_EQ(a.chroma_upsample, b.chroma_upsample);
}

void expect_same(const SinkSpec& a, const SinkSpec& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.directory, b.directory);
  EXPECT_EQ(a.frames_per_file, b.frames_per_file);
}

void expect_same_daemon(const DaemonConfig& a, const DaemonConfig& b) {
  EXPECT_EQ(a.log.level, b.log.level);
  EXPECT_EQ(a.log.format, b.log.format);
  EXPECT_EQ(a.http.enabled, b.http.enabled);
  EXPECT_EQ(a.http.bind, b.http.bind);
  EXPECT_EQ(a.http.port, b.http.port);
  EXPECT_EQ(a.http.max_connections, b.http.max_connections);
  EXPECT_EQ(a.http.idle_timeout.count(), b.http.idle_timeout.count());
  EXPECT_EQ(a.http.max_header_bytes, b.http.max_header_bytes);
  EXPECT_EQ(a.decode, b.decode);
  EXPECT_EQ(a.device.kind, b.device.kind);
  EXPECT_EQ(a.device.index, b.device.index);
  EXPECT_EQ(a.readiness, b.readiness);
  EXPECT_EQ(a.drain_timeout.count(), b.drain_timeout.count());
  EXPECT_EQ(a.cpu_threads, b.cpu_threads);
}

// ---- invalid configs: one file each, first line `# expect: <line>:<col>: <key.path>: <message>` ----

std::vector<std::string> bad_config_names() {
  std::vector<std::string> names;
  if (!fs::is_directory(kBadConfigDir)) return names;
  for (const auto& e : fs::directory_iterator(kBadConfigDir)) {
    if (e.path().extension() == ".yaml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

//! The expected message: `<path>:` + the first line's `# expect:` text, `{dir}` = the folder.
std::string expected_message(const fs::path& file) {
  std::ifstream in(file);
  std::string first;
  std::getline(in, first);
  const std::string tag = "# expect: ";
  if (first.rfind(tag, 0) != 0) return {};
  std::string rest = first.substr(tag.size());
  for (size_t at; (at = rest.find("{dir}")) != std::string::npos;) rest.replace(at, 5, kBadConfigDir.string());
  return file.string() + ":" + rest;
}

class BadConfig : public ::testing::TestWithParam<std::string> {
 protected:
  // The files use ${FRAMEFUSE_TEST_CLIP} for a source that exists and ${FRAMEFUSE_TEST_UNSET} for one
  // that is not set.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const fs::path clip = dir_->write("clip.mp4", "not decoded at load time");
    clip_env_ = new ScopedEnv("FRAMEFUSE_TEST_CLIP", clip.string());
    unset_env_ = new ScopedEnv("FRAMEFUSE_TEST_UNSET", std::nullopt);
  }
  static void TearDownTestSuite() {
    delete unset_env_;
    delete clip_env_;
    delete dir_;
  }
  static inline TempDir* dir_ = nullptr;
  static inline ScopedEnv* clip_env_ = nullptr;
  static inline ScopedEnv* unset_env_ = nullptr;
};

TEST_P(BadConfig, FailsWithOneLineNamingLineAndKey) {
  const fs::path file = kBadConfigDir / (GetParam() + ".yaml");
  const std::string expected = expected_message(file);
  ASSERT_FALSE(expected.empty()) << file << " has no '# expect: ' first line";
  const std::string message = error_of([&] { load_file(file); });
  EXPECT_EQ(message, expected);
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Files, BadConfig, ::testing::ValuesIn(bad_config_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(BadConfigs, FolderHoldsAtLeastThirtyCases) { EXPECT_GE(bad_config_names().size(), 30u) << kBadConfigDir; }

// ---- units ----

struct DurationCase {
  const char* text;
  std::chrono::microseconds value;
};
constexpr DurationCase kDurations[] = {
    {"100us", 100us}, {"250ms", 250ms}, {"5s", 5s},          {"1m", 1min},     {"2h", 2h},
    {"1.5s", 1500ms}, {"0.25ms", 250us}, {"0s", 0us},        {"90m", 90min},   {"007ms", 7ms},
    {"1.000001s", 1'000'001us},
};

TEST(ParseDuration, ReadsNumberAndUnit) {
  for (const auto& c : kDurations) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(parse_duration(c.text).count(), c.value.count());
  }
}

struct BadUnitCase {
  const char* text;
  const char* message;
};
constexpr BadUnitCase kBadDurations[] = {
    {"5", "duration '5' needs a unit (us, ms, s, m or h), e.g. '5s'"},
    {"1.5", "duration '1.5' needs a unit (us, ms, s, m or h), e.g. '1.5s'"},
    {"5sec", "duration '5sec' has unknown unit 'sec' (expected us, ms, s, m or h)"},
    {"5 s", "duration '5 s' has unknown unit ' s' (expected us, ms, s, m or h)"},
    {"-1s", "duration '-1s' must not be negative"},
    {"ms", "expected a duration like '5s', got 'ms'"},
    {"", "expected a duration like '5s', got ''"},
    {"0.5us", "duration '0.5us' is finer than 1us"},
    {"99999999999999999h", "duration '99999999999999999h' is too large"},
    {"1.0000000001s", "duration '1.0000000001s' has more than 9 decimals"},
};

TEST(ParseDuration, RejectsWithReason) {
  for (const auto& c : kBadDurations) {
    EXPECT_EQ(error_of([&] { parse_duration(c.text); }), c.message);
  }
}

TEST(FormatDuration, ShortestExactSpellingReadsBack) {
  const std::pair<std::chrono::microseconds, const char*> cases[] = {
      {1500ms, "1500ms"}, {60s, "1m"}, {7200s, "2h"}, {30s, "30s"}, {1001us, "1001us"}, {0us, "0s"}, {90s, "90s"}};
  for (const auto& [d, text] : cases) {
    EXPECT_EQ(format_duration(d), text);
    EXPECT_EQ(parse_duration(format_duration(d)).count(), d.count());
  }
}

TEST(ParseSize, BytesAndUnits) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"8192", 8192},     {"512B", 512},          {"8KiB", 8192},     {"64MiB", 64ull << 20},
      {"1GiB", 1ull << 30}, {"10kB", 10'000},     {"10KB", 10'000},   {"5MB", 5'000'000},
      {"2GB", 2'000'000'000}, {"1.5KiB", 1536},   {"0", 0}};
  for (const auto& [text, bytes] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(parse_size(text), bytes);
  }
  EXPECT_EQ(error_of([] { parse_size("8kib"); }),
            "size '8kib' has unknown unit 'kib' (expected B, KiB, MiB, GiB, kB, MB or GB)");
  EXPECT_EQ(error_of([] { parse_size("1.5B"); }), "size '1.5B' is finer than a byte");
  EXPECT_EQ(error_of([] { parse_size("-8KiB"); }), "size '-8KiB' must not be negative");
  EXPECT_EQ(error_of([] { parse_size("lots"); }), "expected a size like '64MiB', got 'lots'");
}

TEST(ParseDevice, Spellings) {
  const std::tuple<const char*, DeviceKind, int32_t> good[] = {{"auto", DeviceKind::Auto, 0},
                                                               {"cpu", DeviceKind::Cpu, 0},
                                                               {"cuda", DeviceKind::Cuda, 0},
                                                               {"cuda:0", DeviceKind::Cuda, 0},
                                                               {"cuda:3", DeviceKind::Cuda, 3}};
  for (const auto& [text, kind, index] : good) {
    SCOPED_TRACE(text);
    const DeviceSpec d = parse_device(text);
    EXPECT_EQ(d.kind, kind);
    EXPECT_EQ(d.index, index);
  }
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA", "cuda:99999", ""}) {
    EXPECT_EQ(error_of([&] { parse_device(bad); }),
              fmt::format("unknown device '{}' (expected auto, cpu, cuda or cuda:N)", bad));
  }
}

// ---- valid configs ----

TEST(Load, MinimalConfigTakesEveryDefault) {
  TempDir dir;
  dir.write("clips/a.mp4", "x");
  const fs::path cfg = dir.write("cfg.yaml",
                                 "pipelines:\n"
                                 "  - name: a\n"
                                 "    source: {uri: clips/a.mp4}\n"
                                 "    outputs: [{name: o}]\n"
                                 "    sink: {type: npy, directory: out}\n");
  const DaemonConfig c = load_file(cfg);
  expect_same_daemon(c, DaemonConfig{});
  EXPECT_EQ(c.path, cfg.string());
  ASSERT_EQ(c.pipelines.size(), 1u);
  const PipelineSpec& p = c.pipelines[0];
  EXPECT_EQ(p.name, "a");
  SourceSpec source;
  source.uri = (dir.path() / "clips/a.mp4").string();
  expect_same(p.source, source);
  EXPECT_EQ(p.decoder, DecoderKind::Auto);
  EXPECT_FALSE(p.device.has_value());
  EXPECT_EQ(p.queue_depth, PipelineSpec{}.queue_depth);
  EXPECT_EQ(p.pool_frames, PipelineSpec{}.pool_frames);
  EXPECT_EQ(p.control, ControlSpec{});
  expect_same(p.color, ColorSpec{});
  ASSERT_EQ(p.outputs.size(), 1u);
  OutputSpec out;
  out.name = "o";
  expect_same(p.outputs[0], out);
  SinkSpec sink;
  sink.directory = (dir.path() / "out").string();
  expect_same(p.sink, sink);
}

TEST(Load, EveryDaemonKey) {
  const DaemonConfig c = load_string(
      "log: {level: debug, format: json}\n"
      "http: {enabled: false, bind: '::1', port: 8080, max_connections: 3, idle_timeout: 1m, max_header_bytes: 64KiB}\n"
      "device: cuda:1\nreadiness: any\ndrain_timeout: 0s\ncpu_threads: 6\n" +
          with_output("resize: {shorter_side: 32}"),
      "d.yaml", "/tmp");
  DaemonConfig want;
  want.log = {"debug", LogConfig::Format::Json};
  want.http = {false, "::1", 8080, 3, 60000ms, 65536};
  want.device = {DeviceKind::Cuda, 1};
  want.readiness = ReadinessPolicy::Any;
  want.drain_timeout = 0ms;
  want.cpu_threads = 6;
  expect_same_daemon(c, want);
  EXPECT_EQ(c.path, "d.yaml");
}

TEST(Load, SourceKeysDurationsAndRtsp) {
  const DaemonConfig c = load_string(
      "pipelines:\n"
      "  - name: cam\n"
      "    source:\n"
      "      uri: rtsps://user:pw@cam.local:322/live?x=1\n"
      "      transport: udp\n"
      "      timeout: 1500us\n"
      "      stall_timeout: 2.5s\n"
      "      reconnect: {initial: 250ms, max: 1m, attempts: 7}\n"
      "      max_frames: 1000\n"
      "      loop: false\n"
      "    decoder: nvdec\n"
      "    device: cuda:2\n"
      "    queue_depth: 16\n"
      "    pool_frames: 48\n"
      "    color: {matrix: bt709, range: full, chroma_upsample: linear}\n"
      "    outputs: [{name: o, resize: {shorter_side: 8}}]\n"
      "    sink: {type: npy, directory: /data/out/cam, frames_per_file: 30}\n",
      "s.yaml", "/nonexistent/base");
  const PipelineSpec& p = c.pipelines.at(0);
  SourceSpec want;
  want.kind = SourceKind::Rtsp;
  want.uri = "rtsps://user:pw@cam.local:322/live?x=1";
  want.transport = RtspTransport::Udp;
  want.socket_timeout = 1500us;
  want.stall_timeout = 2500ms;
  want.reconnect_initial = 250ms;
  want.reconnect_max = 60000ms;
  want.max_reconnects = 7;
  want.max_frames = 1000;
  expect_same(p.source, want);
  EXPECT_EQ(p.decoder, DecoderKind::Nvdec);
  ASSERT_TRUE(p.device.has_value());
  EXPECT_EQ(p.device->kind, DeviceKind::Cuda);
  EXPECT_EQ(p.device->index, 2);
  EXPECT_EQ(p.queue_depth, 16);
  EXPECT_EQ(p.pool_frames, 48);
  expect_same(p.color, ColorSpec{ops::ColorMatrix::Bt709, ops::ColorRange::Full, ops::ChromaUpsample::Linear});
  expect_same(p.sink, SinkSpec{SinkKind::Npy, "/data/out/cam", 30});
}

TEST(Load, OutputKeys) {
  OutputSpec want;
  want.name = "out";
  want.crop = {0.1, 0.2, 0.8, 0.7, true};
  want.resize = {640, 480, 0};
  want.interp = ops::Interp::Area;
  want.aspect = AspectMode::Letterbox;
  want.center_crop = std::array<int32_t, 2>{600, 400};
  want.pad_value = {0.f, 128.f, 255.f};
  want.channels = ChannelOrder::Bgr;
  want.scale = 1.f / 127.5f;
  want.mean = {0.485f, 0.456f, 0.406f};
  want.std = {0.229f, 0.224f, 0.225f};
  want.layout = ops::Layout::Hwc;
  want.dtype = ops::DType::F16;
  expect_same(load_output("crop: {x: 0.1, y: 0.2, w: 0.8, h: 0.7, units: fraction}\n"
                          "resize: {width: 640, height: 480}\n"
                          "interp: area\naspect: letterbox\ncenter_crop: [600, 400]\npad_value: [0, 128, 255]\n"
                          "channels: bgr\nscale: 1/127.5\nmean: [0.485, 0.456, 0.406]\n"
                          "std: [0.229, 0.224, 0.225]\nlayout: hwc\ndtype: float16"),
              want);
}

TEST(Load, OutputShorthands) {
  // Pixel crop, scalar centre crop, broadcast scalars, gray with one value, fill aspect.
  const OutputSpec a = load_output(
      "crop: {x: 16, y: 8, w: 640, h: 360}\nresize: {shorter_side: 256}\ncenter_crop: 224\n"
      "pad_value: 0\nchannels: gray\nmean: 0.5\nstd: [0.25]\nscale: 0.5");
  EXPECT_EQ(a.crop.fractional, false);
  EXPECT_EQ(a.crop.x, 16);
  EXPECT_EQ(a.crop.y, 8);
  EXPECT_EQ(a.crop.w, 640);
  EXPECT_EQ(a.crop.h, 360);
  EXPECT_EQ(a.resize.shorter_side, 256);
  EXPECT_EQ(a.resize.width, 0);
  EXPECT_EQ(a.center_crop, (std::array<int32_t, 2>{224, 224}));
  EXPECT_EQ(a.pad_value, (std::array<float, 3>{0.f, 0.f, 0.f}));
  EXPECT_EQ(a.mean, (std::array<float, 3>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(a.std, (std::array<float, 3>{0.25f, 0.25f, 0.25f}));
  EXPECT_FLOAT_EQ(a.scale, 0.5f);
  EXPECT_EQ(load_output("resize: {width: 64, height: 32}\naspect: fill").aspect, AspectMode::CenterCropFill);
  EXPECT_FALSE(load_output("center_crop: null").center_crop.has_value());
  // Pixel-unit crop without x/y starts at the corner.
  const OutputSpec b = load_output("crop: {w: 10, h: 20}");
  EXPECT_EQ(b.crop.x, 0);
  EXPECT_EQ(b.crop.y, 0);
  EXPECT_EQ(b.crop.fractional, false);
}

TEST(Load, ScaleDefaultsToOneForUint8) {
  EXPECT_FLOAT_EQ(load_output("dtype: float32").scale, 1.f / 255.f);
  EXPECT_FLOAT_EQ(load_output("dtype: float16").scale, 1.f / 255.f);
  EXPECT_FLOAT_EQ(load_output("dtype: uint8").scale, 1.f);
  EXPECT_FLOAT_EQ(load_output("dtype: uint8\nscale: 1/255").scale, 1.f / 255.f);
}

TEST(Load, ControlKeys) {
  const std::string base =
      "pipelines:\n  - name: cam\n    source: {uri: rtsp://cam.local/s}\n    sink: {type: null}\n"
      "    outputs: [{name: cls}, {name: det}]\n";
  const auto load_control = [&](std::string_view control) {
    return load_string(base + std::string(control), "test.yaml", fs::temp_directory_path()).pipelines.at(0).control;
  };
  const ControlSpec c = load_control(
      "    control:\n"
      "      delay_frames: 3\n"
      "      auto_gain: {outputs: [det], target: 0.5, kp: 0, ki: 0.2, min_gain: 0.5, max_gain: 4, max_step: 0.1}\n"
      "      roi_follow:\n"
      "        output: cls\n"
      "        smoothing: 0.3\n"
      "        dead_band: 0.05\n"
      "        min_motion: 0.001\n"
      "        bounds: {x: 0.1, y: 0.2, w: 0.8, h: 0.6, units: fraction}\n"
      "      health: {enabled: false, frozen_motion: 0.01, frozen_after: 3s, black_fraction: 0.9,\n"
      "               overexposed_fraction: 0.7, scene_change: 0.4, raise_after: 0s, clear_after: 250ms}\n");
  ControlSpec want;
  want.enabled = true;   // given sections are on unless they say otherwise
  want.delay_frames = 3;
  want.auto_gain = {true, {"det"}, 0.5, 0, 0.2, 0.5, 4, 0.1};
  want.roi_follow = {true, "cls", 0.3, 0.05, 0.001, {0.1, 0.2, 0.8, 0.6, true}};
  want.health = {false, 0.01, 3s, 0.9, 0.7, 0.4, 0ms, 250ms};
  EXPECT_EQ(c, want);
  // An empty section: statistics only, every default.
  ControlSpec stats_only;
  stats_only.enabled = true;
  EXPECT_EQ(load_control("    control:\n"), stats_only);
  EXPECT_EQ(load_control("    control: {enabled: false, health: {}}\n").enabled, false);
  EXPECT_TRUE(load_control("    control: {health: {}}\n").health.enabled);
}

TEST(Load, SinkTypeNullIsYamlNullOrText) {
  for (const char* type : {"null", "~", "'null'"}) {
    const DaemonConfig c = load_string(
        fmt::format("pipelines: [{{name: a, source: {{uri: 'rtsp://h/s'}}, outputs: [{{name: o}}], "
                    "sink: {{type: {}}}}}]",
                    type),
        "n.yaml", "/tmp");
    EXPECT_EQ(c.pipelines.at(0).sink.kind, SinkKind::Null) << type;
  }
}

TEST(Load, ShmSinkNamesItsRingAfterThePipelineUnlessTold) {
  const DaemonConfig c = load_string(
      "pipelines:\n"
      "  - {name: lobby, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], sink: {type: shm}}\n"
      "  - {name: dock, source: {uri: 'rtsp://h/2'}, outputs: [{name: o}],\n"
      "     sink: {type: shm, name: dock.main, slots: 32}}\n",
      "s.yaml", "/tmp");
  ASSERT_EQ(c.pipelines.size(), 2u);
  EXPECT_EQ(c.pipelines[0].sink.kind, SinkKind::Shm);
  EXPECT_EQ(c.pipelines[0].sink.shm_name, "lobby");
  EXPECT_EQ(c.pipelines[0].sink.slots, 8);
  EXPECT_EQ(c.pipelines[1].sink.shm_name, "dock.main");
  EXPECT_EQ(c.pipelines[1].sink.slots, 32);
}

TEST(Load, ShmSinkKeysAreCheckedWhereTheyStand) {
  const auto sink_error = [](const std::string& first_sink, const std::string& second_sink = "{type: null}") {
    return error_of([&] {
      load_string(fmt::format("pipelines:\n"
                              "  - {{name: a, source: {{uri: 'rtsp://h/1'}}, outputs: [{{name: o}}], sink: {}}}\n"
                              "  - {{name: b, source: {{uri: 'rtsp://h/2'}}, outputs: [{{name: o}}], sink: {}}}\n",
                              first_sink, second_sink),
                  "s.yaml", "/tmp");
    });
  };
  EXPECT_EQ(sink_error("{type: shm, name: 'a/b'}"),
            "s.yaml:2:90: pipelines[0].sink.name: 'a/b' is not a shared-memory name (1-200 letters, digits, '.', "
            "'_', '-'; not starting with '.')");
  EXPECT_EQ(sink_error("{type: shm, slots: 0}"),
            "s.yaml:2:91: pipelines[0].sink.slots: must be between 1 and 1024, got 0");
  EXPECT_EQ(sink_error("{type: shm, directory: out}"),
            "s.yaml:2:95: pipelines[0].sink.directory: applies to npy sinks only");
  EXPECT_EQ(sink_error("{type: npy, directory: out, name: x}"),
            "s.yaml:2:106: pipelines[0].sink.name: applies to shm and cuda_ipc sinks only");
  EXPECT_EQ(sink_error("{type: shm, name: b}", "{type: shm}"),
            "s.yaml:3:79: pipelines[1].sink.type: shared-memory ring 'b' is already written by pipeline 'a'");
  EXPECT_EQ(sink_error("{type: shm}", "{type: shm, name: a}"),
            "s.yaml:3:90: pipelines[1].sink.name: shared-memory ring 'a' is already written by pipeline 'a'");
}

TEST(Load, DecodeCapacitiesAreNumbersOrAuto) {
  const auto load = [](const std::string& decode) {
    return load_string("decode: " + decode + "\npipelines:\n  - {name: a, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], "
                       "sink: {type: null}}\n",
                       "d.yaml", "/tmp");
  };
  EXPECT_EQ(load("{nvdec_fps: 950, cpu_fps: 400}").decode, (DecodeConfig{950, 400}));
  EXPECT_EQ(load("{cpu_fps: auto}").decode, DecodeConfig{});
  const auto error = [&](const std::string& decode) { return error_of([&] { load(decode); }); };
  EXPECT_EQ(error("{nvdec_fps: 0}"), "d.yaml:1:21: decode.nvdec_fps: must be between 1 and 1000000, got 0");
  EXPECT_EQ(error("{cpu_fps: many}"), "d.yaml:1:19: decode.cpu_fps: expected a number, got 'many'");
  EXPECT_EQ(error("{nvdec: 5}"),
            "d.yaml:1:10: decode.nvdec: unknown key 'nvdec' (expected nvdec_fps, cpu_fps, codec_costs)");
}

TEST(Load, CodecCostsGoOverTheMeasuredTable) {
  const auto load = [](const std::string& costs) {
    return load_string("decode:\n  codec_costs: " + costs +
                           "\npipelines:\n  - {name: a, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], "
                           "sink: {type: null}}\n",
                       "d.yaml", "/tmp")
        .decode.codec_costs;
  };
  const CodecCosts& measured = measured_codec_costs();
  ASSERT_TRUE(measured.count("hevc") && measured.count("hevc_10bit"));
  CodecCosts want = measured;
  want["hevc"].cpu = 3;              // a field left out keeps the measured one
  want["av1"] = {0.5, 4};            // a new codec
  want["vp9_10bit"] = {1, 2.5};      // a new key starts at the unit
  EXPECT_EQ(load("{hevc: {cpu: 3}, av1: {nvdec: 0.5, cpu: 4}, vp9_10bit: {cpu: 2.5}}"), want);
  EXPECT_EQ(load("{}"), measured);
  EXPECT_EQ(load("{h264: }").at("h264"), CodecCost{}) << "an empty entry is the unit, or the measured cost";
  EXPECT_EQ(load("{hevc: {}}").at("hevc"), measured.at("hevc"));

  const auto error = [&](const std::string& costs) { return error_of([&] { load(costs); }); };
  EXPECT_EQ(error("{hvec: {cpu: 2}}"),
            "d.yaml:2:17: decode.codec_costs.hvec: unknown codec 'hvec' (expected an FFmpeg video codec name such "
            "as h264, hevc, av1, vp9, mjpeg; + _10bit for deeper streams)");
  EXPECT_NE(error("{mp3: {cpu: 2}}").find("unknown codec 'mp3'"), std::string::npos) << "an audio codec";
  EXPECT_NE(error("{hevc_12bit: {cpu: 2}}").find("unknown codec 'hevc_12bit'"), std::string::npos);
  EXPECT_EQ(error("{hevc: {cpu: 0}}"), "d.yaml:2:29: decode.codec_costs.hevc.cpu: must be between 0.01 and 100, got 0");
  EXPECT_EQ(error("{hevc: {gpu: 1}}"),
            "d.yaml:2:24: decode.codec_costs.hevc.gpu: unknown key 'gpu' (did you mean 'cpu'?)");
  EXPECT_EQ(error("{hevc: 2}"), "d.yaml:2:23: decode.codec_costs.hevc: expected a mapping, got a single value");
  EXPECT_EQ(error("{hevc: {cpu: 2}, hevc: {cpu: 3}}"),
            "d.yaml:2:33: decode.codec_costs.hevc: duplicate key (first at line 2)");
}

TEST(Load, CudaIpcSinkIsARingOnACudaDevice) {
  const DaemonConfig c = load_string(
      "pipelines:\n"
      "  - {name: lobby, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], sink: {type: cuda_ipc}}\n"
      "  - {name: dock, source: {uri: 'rtsp://h/2'}, device: 'cuda:1', outputs: [{name: o}],\n"
      "     sink: {type: cuda_ipc, name: dock.gpu, slots: 4}}\n",
      "s.yaml", "/tmp");
  ASSERT_EQ(c.pipelines.size(), 2u);
  EXPECT_EQ(c.pipelines[0].sink.kind, SinkKind::CudaIpc);
  EXPECT_EQ(c.pipelines[0].sink.shm_name, "lobby");
  EXPECT_EQ(c.pipelines[0].sink.slots, 8);
  EXPECT_EQ(c.pipelines[1].sink.shm_name, "dock.gpu");
  EXPECT_EQ(c.pipelines[1].sink.slots, 4);
  EXPECT_FALSE(reads_host_outputs(c.pipelines[0].sink)) << "outputs stay on the device for a device ring";
  EXPECT_STREQ(sink_type_name(SinkKind::CudaIpc), "cuda_ipc");
  EXPECT_EQ(sink_target(c.pipelines[1].sink), "/dev/shm/dock.gpu");

  const auto error = [](const std::string& text) { return error_of([&] { load_string(text, "s.yaml", "/tmp"); }); };
  EXPECT_EQ(error("pipelines:\n"
                  "  - {name: a, source: {uri: 'rtsp://h/1'}, device: cpu, outputs: [{name: o}], sink: {type: cuda_ipc}}\n"),
            "s.yaml:2:92: pipelines[0].sink.type: cuda_ipc needs a cuda device, but this pipeline's device is cpu");
  EXPECT_EQ(error("device: cpu\n"
                  "pipelines:\n"
                  "  - {name: a, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], sink: {type: cuda_ipc}}\n"),
            "s.yaml:3:79: pipelines[0].sink.type: cuda_ipc needs a cuda device, but this pipeline's device is cpu");
  EXPECT_EQ(error("pipelines:\n"
                  "  - {name: a, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], sink: {type: cuda_ipc, slots: 2}}\n"),
            "s.yaml:2:96: pipelines[0].sink.slots: must be between 3 and 1024, got 2");
  // One namespace of ring names for both ring sinks: both live in /dev/shm.
  EXPECT_EQ(error("pipelines:\n"
                  "  - {name: a, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], sink: {type: cuda_ipc, name: b}}\n"
                  "  - {name: b, source: {uri: 'rtsp://h/2'}, outputs: [{name: o}], sink: {type: shm}}\n"),
            "s.yaml:3:79: pipelines[1].sink.type: shared-memory ring 'b' is already written by pipeline 'a'");
}

TEST(Load, NamesRepeatAcrossPipelinesButDirectoriesDoNot) {
  const DaemonConfig c = load_string(
      "pipelines:\n"
      "  - {name: a, source: {uri: 'rtsp://h/1'}, outputs: [{name: o}], sink: {type: npy, directory: out/a}}\n"
      "  - {name: b-2_x, source: {uri: 'rtsp://h/2'}, outputs: [{name: o}], sink: {type: npy, directory: out/b}}\n",
      "m.yaml", "/srv/ff");
  ASSERT_EQ(c.pipelines.size(), 2u);
  EXPECT_EQ(c.pipelines[1].name, "b-2_x");
  EXPECT_EQ(c.pipelines[0].sink.directory, "/srv/ff/out/a");
  EXPECT_EQ(c.pipelines[1].sink.directory, "/srv/ff/out/b");
}

TEST(Load, EnvironmentSubstitution) {
  const ScopedEnv pass("FF_CFG_PASS", "s3cr:t");
  const ScopedEnv host("FF_CFG_HOST", "cam.example");
  const ScopedEnv port("FF_CFG_PORT", "9555");
  const ScopedEnv empty("FF_CFG_EMPTY", "");
  const ScopedEnv unset("FF_CFG_UNSET", std::nullopt);
  const DaemonConfig c = load_string(
      "log: {level: '${FF_CFG_EMPTY:-debug}'}\n"
      "http: {port: '${FF_CFG_PORT}', bind: '${FF_CFG_UNSET:-0.0.0.0}'}\n"
      "pipelines:\n"
      "  - name: cam\n"
      "    source: {uri: 'rtsp://admin:${FF_CFG_PASS}@${FF_CFG_HOST}:554/${FF_CFG_UNSET:-}s'}\n"
      "    outputs: [{name: o}]\n"
      "    sink: {type: npy, directory: 'out/$${FF_CFG_HOST}'}\n",
      "env.yaml", "/base");
  EXPECT_EQ(c.log.level, "debug");
  EXPECT_EQ(c.http.port, 9555);
  EXPECT_EQ(c.http.bind, "0.0.0.0");
  EXPECT_EQ(c.pipelines.at(0).source.uri, "rtsp://admin:s3cr:t@cam.example:554/s");
  EXPECT_EQ(c.pipelines.at(0).sink.directory, "/base/out/${FF_CFG_HOST}");
  // An unset variable without default names the key and the variable.
  EXPECT_EQ(error_of([] { load_string("cpu_threads: ${FF_CFG_UNSET}\n", "e.yaml", "/"); }),
            "e.yaml:1:14: cpu_threads: environment variable 'FF_CFG_UNSET' is not set "
            "(write ${FF_CFG_UNSET:-default} to give a default)");
  // Substituted values are checked like written ones.
  const ScopedEnv bad_port("FF_CFG_PORT", "0");
  EXPECT_EQ(error_of([] { load_string("http: {port: '${FF_CFG_PORT}'}\n", "e.yaml", "/"); }),
            "e.yaml:1:14: http.port: must be between 1 and 65535, got 0");
}

TEST(Load, RelativePathsResolveAgainstTheConfigFolder) {
  TempDir dir;
  const fs::path clip = dir.write("media/clips/lobby.mp4", "x");
  const fs::path abs_clip = dir.write("abs.mp4", "x");
  const fs::path cfg = dir.write("etc/framefuse/cams.yaml",
                                 fmt::format("pipelines:\n"
                                             "  - name: rel\n"
                                             "    source: {{uri: ../../media/clips/./lobby.mp4}}\n"
                                             "    outputs: [{{name: o}}]\n"
                                             "    sink: {{type: npy, directory: out/rel/}}\n"
                                             "  - name: abs\n"
                                             "    source: {{uri: '{}'}}\n"
                                             "    outputs: [{{name: o}}]\n"
                                             "    sink: {{type: npy, directory: '{}'}}\n",
                                             abs_clip.string(), (dir.path() / "abs_out").string()));
  struct Cwd {   // the working directory must not matter
    fs::path old = fs::current_path();
    ~Cwd() { fs::current_path(old); }
  } cwd;
  fs::current_path(dir.path() / "media");
  const DaemonConfig c = load_file(fs::relative(cfg));
  EXPECT_EQ(c.path, cfg.string());
  EXPECT_EQ(c.pipelines.at(0).source.kind, SourceKind::File);
  EXPECT_EQ(c.pipelines.at(0).source.uri, clip.string());
  EXPECT_EQ(c.pipelines.at(0).sink.directory, (dir.path() / "etc/framefuse/out/rel").string());
  EXPECT_EQ(c.pipelines.at(1).source.uri, abs_clip.string());
  EXPECT_EQ(c.pipelines.at(1).sink.directory, (dir.path() / "abs_out").string());
  // load_string resolves against the base folder it is given.
  const DaemonConfig s = load_string(read_text(cfg), "inline", dir.path() / "etc/framefuse");
  EXPECT_EQ(s.pipelines.at(0).source.uri, clip.string());
}

TEST(LoadFile, MissingFileAndDirectory) {
  TempDir dir;
  const fs::path missing = dir.path() / "nope.yaml";
  EXPECT_EQ(error_of([&] { load_file(missing); }), fmt::format("config file '{}' not found", missing.string()));
  EXPECT_EQ(error_of([&] { load_file(dir.path()); }),
            fmt::format("config file '{}' is a directory", dir.path().string()));
}

TEST(LoadFile, ErrorsStartWithThePathAsGiven) {
  TempDir dir;
  const fs::path cfg = dir.write("x.yaml", "\n\nreadiness: most\n");
  EXPECT_EQ(error_of([&] { load_file(cfg); }),
            fmt::format("{}:3:12: readiness: unknown value 'most' (expected all, any)", cfg.string()));
}

// ---- the default config and the key reference ----

TEST(DefaultConfig, LoadsAndEqualsTheStructDefaults) {
  TempDir dir;
  const DaemonConfig c = load_string(default_config_yaml(), "default.yaml", dir.path());
  expect_same_daemon(c, DaemonConfig{});
  ASSERT_EQ(c.pipelines.size(), 1u);
  const PipelineSpec& p = c.pipelines[0];
  SourceSpec source;
  source.kind = SourceKind::Rtsp;
  source.uri = p.source.uri;   // the placeholder camera
  expect_same(p.source, source);
  EXPECT_EQ(p.decoder, PipelineSpec{}.decoder);
  EXPECT_FALSE(p.device.has_value());
  EXPECT_EQ(p.queue_depth, PipelineSpec{}.queue_depth);
  EXPECT_EQ(p.pool_frames, PipelineSpec{}.pool_frames);
  ControlSpec control;   // every loop shown, all off; roi_follow names the template's output
  control.roi_follow.output = p.outputs.at(0).name;
  EXPECT_EQ(p.control, control);
  expect_same(p.color, ColorSpec{});
  ASSERT_EQ(p.outputs.size(), 1u);
  OutputSpec out;
  out.name = p.outputs[0].name;
  out.resize = p.outputs[0].resize;   // a template: the default is no resize
  expect_same(p.outputs[0], out);
  SinkSpec sink;
  sink.directory = p.sink.directory;
  expect_same(p.sink, sink);
  EXPECT_EQ(fs::path(p.sink.directory).parent_path(), dir.path() / "out");
}

TEST(DefaultConfig, EveryValueLineHasAComment) {
  std::istringstream lines(default_config_yaml());
  int keys = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] == '#' || line.back() == ':') continue;   // section headings
    ++keys;
    EXPECT_NE(line.find(" # "), std::string::npos) << "no comment: " << line;
  }
  EXPECT_GT(keys, 40);
}

//! Leaf key paths of a YAML tree: `pipelines[].outputs[].crop.x`; lists of mappings become `[]`.
void collect_keys(const YAML::Node& n, const std::string& path, std::set<std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      collect_keys(kv.second, path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), out);
    }
  } else if (n.IsSequence() && n.size() > 0 && n[0].IsMap()) {
    collect_keys(n[0], path + "[]", out);
  } else {
    out.insert(path);
  }
}

TEST(DefaultConfig, MatchesTheKeyReference) {
  std::set<std::string> in_default;
  collect_keys(YAML::Load(default_config_yaml()), "", in_default);
  // A table keyed by codec is one row of the reference.
  const std::string costs = "decode.codec_costs";
  EXPECT_EQ(std::erase_if(in_default, [&](const std::string& k) { return k.starts_with(costs + "."); }), 4u);
  in_default.insert(costs);
  std::set<std::string> in_reference;
  const std::string reference = read_text(kSourceDir / "config/REFERENCE.md");
  const std::regex row(R"(^\| `([a-z_\[\]\.]+)` \|)");
  std::istringstream lines(reference);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) in_reference.insert(m[1]);
  }
  // Documented but absent from the default file: alternatives to keys it shows, list headings, the
  // keys of shm sinks (its sink is npy) and of `batching` groups (the default has none).
  for (const char* k : {"pipelines", "pipelines[].outputs", "pipelines[].outputs[].resize.shorter_side",
                        "pipelines[].sink.name", "pipelines[].sink.slots",
                        "batching[].name", "batching[].max_batch", "batching[].max_wait", "batching[].device",
                        "batching[].queue_depth"}) {
    EXPECT_EQ(in_reference.erase(k), 1u) << k;
  }
  EXPECT_EQ(in_default, in_reference);
  EXPECT_GT(in_default.size(), 45u);
}

// ---- the shipped examples ----

TEST(Examples, BasicPlansItsThreeOutputs) {
  // The example clip is not needed: the file sits in a copy of the repository layout.
  TempDir dir;
  const fs::path clip = dir.write("samples/sample_720p.mp4", "x");
  const fs::path cfg = dir.write("config/examples/basic.yaml", read_text(kSourceDir / "config/examples/basic.yaml"));
  const DaemonConfig c = load_file(cfg);
  ASSERT_EQ(c.pipelines.size(), 1u);
  const PipelineSpec& p = c.pipelines[0];
  EXPECT_EQ(p.source.uri, clip.string());
  EXPECT_EQ(p.sink.kind, SinkKind::Npy);
  EXPECT_EQ(p.sink.directory, (dir.path() / "out/basic").string());
  ASSERT_EQ(p.outputs.size(), 3u);
  EXPECT_EQ(p.outputs[0].mean, (std::array<float, 3>{0.485f, 0.456f, 0.406f}));
  EXPECT_EQ(p.outputs[0].std, (std::array<float, 3>{0.229f, 0.224f, 0.225f}));
  EXPECT_FLOAT_EQ(p.outputs[1].scale, 1.f / 255.f);
  EXPECT_FLOAT_EQ(p.outputs[2].scale, 1.f);

  FrameInfo frame;
  frame.width = 1280;
  frame.height = 720;
  const std::vector<OutputPlan> plans = make_output_plans(p, frame);
  ASSERT_EQ(plans.size(), 3u);
  const std::vector<std::vector<int64_t>> shapes = {{3, 224, 224}, {3, 640, 640}, {180, 320, 3}};
  const ops::DType dtypes[] = {ops::DType::F32, ops::DType::F16, ops::DType::U8};
  const char* names[] = {"classifier", "detector", "thumbnail"};
  for (size_t i = 0; i < plans.size(); ++i) {
    EXPECT_EQ(plans[i].name, names[i]);
    EXPECT_EQ(plans[i].shape, shapes[i]);
    EXPECT_EQ(plans[i].params.store.dtype, dtypes[i]);
  }
}

TEST(Examples, RingExamplesWriteTheRingsTheyName) {
  const struct {
    const char* file;
    SinkKind kind;
    const char* ring;
  } cases[] = {{"config/examples/shm.yaml", SinkKind::Shm, "lobby"},
               {"config/examples/cuda_ipc.yaml", SinkKind::CudaIpc, "lobby_gpu"}};
  for (const auto& c : cases) {
    const TempDir dir;
    dir.write("samples/sample_720p.mp4", "not decoded at load time");
    const DaemonConfig config = load_file(dir.write(c.file, read_text(kSourceDir / c.file)));
    ASSERT_EQ(config.pipelines.size(), 1u) << c.file;
    EXPECT_EQ(config.pipelines[0].sink.kind, c.kind) << c.file;
    EXPECT_EQ(config.pipelines[0].sink.shm_name, c.ring) << c.file;
    EXPECT_EQ(config.pipelines[0].sink.slots, 8) << c.file;
    EXPECT_TRUE(config.pipelines[0].source.loop) << c.file;
  }
}

TEST(Examples, RtspTakesThePasswordFromTheEnvironment) {
  const fs::path cfg = kSourceDir / "config/examples/rtsp.yaml";
  const ScopedEnv host("CAMERA_HOST", std::nullopt);
  {
    const ScopedEnv pass("CAMERA_PASSWORD", "pa55");
    const DaemonConfig c = load_file(cfg);
    ASSERT_EQ(c.pipelines.size(), 1u);
    EXPECT_EQ(c.pipelines[0].source.kind, SourceKind::Rtsp);
    EXPECT_EQ(c.pipelines[0].source.uri, "rtsp://viewer:pa55@192.168.1.64:554/Streaming/Channels/101");
    EXPECT_EQ(c.readiness, ReadinessPolicy::Any);
    FrameInfo frame;
    frame.width = 1920;
    frame.height = 1080;
    EXPECT_EQ(make_output_plans(c.pipelines[0], frame).size(), 2u);
  }
  const ScopedEnv no_pass("CAMERA_PASSWORD", std::nullopt);
  const std::string message = error_of([&] { load_file(cfg); });
  EXPECT_NE(message.find("pipelines[0].source.uri: environment variable 'CAMERA_PASSWORD' is not set"),
            std::string::npos)
      << message;
}

// ---- fuzzing: edits of good configs ----

//! A config that turns on what the default config leaves off: a batch group of two file pipelines,
//! and a third pipeline with control loops, letterbox, centre crop, per-channel normalisation,
//! HWC uint8. `clip` is an existing file.
std::string rich_config(const fs::path& clip) {
  return fmt::format(R"(log: {{level: debug, format: json}}
http: {{enabled: true, bind: "::1", port: 9500, max_header_bytes: 16KiB}}
device: cpu
cpu_threads: 2
batching:
  - {{name: lobby, max_batch: 4, max_wait: 2ms, queue_depth: 8}}
pipelines:
  - name: a
    source: {{uri: "{0}", loop: true, realtime: true}}
    batch_group: lobby
    outputs: &shared
      - {{name: det, resize: {{width: 640, height: 640}}, aspect: letterbox, pad_value: [114, 114, 114], dtype: float16}}
    sink: {{type: null}}
  - name: b
    source: {{uri: "{0}", max_frames: 100}}
    batch_group: lobby
    outputs: *shared
    sink: {{type: npy, directory: out/b, frames_per_file: 4}}
  - name: c
    source: {{uri: "rtsp://user:${{FRAMEFUSE_FUZZ_PASS:-secret}}@cam.local/s", transport: udp, timeout: 3s}}
    decoder: cpu
    queue_depth: 6
    pool_frames: 32
    color: {{matrix: bt709, range: full, chroma_upsample: linear}}
    outputs:
      - name: cls
        crop: {{x: 0.1, y: 0.1, w: 0.8, h: 0.8, units: fraction}}
        resize: {{shorter_side: 256}}
        interp: area
        center_crop: 224
        mean: [0.485, 0.456, 0.406]
        std: [0.229, 0.224, 0.225]
      - {{name: thumb, resize: {{width: 320, height: 180}}, interp: nearest, channels: bgr, layout: hwc, dtype: uint8}}
    sink: {{type: npy, directory: out/c}}
    control:
      delay_frames: 3
      auto_gain: {{target: 0.5, kp: 0.2, ki: 0.1, min_gain: 0.5, max_gain: 4, max_step: 0.1, outputs: [cls]}}
      roi_follow: {{output: cls, smoothing: 0.3, dead_band: 0.05, bounds: {{x: 0, y: 0, w: 1, h: 1, units: fraction}}}}
      health: {{enabled: true}}
)",
                     clip.string());
}

//! Values a user (or a typo) could put in place of a scalar.
constexpr const char* kJunk[] = {
    "",        "-1",     "0",         "1",          "65536",      "1e308",     "-0.0",        ".nan",
    ".inf",    "99999999999999999999", "2147483648", "[1, 2, 3]", "[]",   "{a: 1}",      "{}",
    "~",       "null",   "true",      "false",      "'",          "\"open",    "&anchor",     "*nowhere",
    "!!binary aGk=",     "cuda:99999", "cuda:-1",   "1/0",        "1/",        "0.5",         "1.5",
    "0x10",    "1e-9",   "5sec",      "-5s",        "0s",         "1h",        "8KiB",        "1GiB",
    "${FRAMEFUSE_FUZZ_UNSET}", "${FRAMEFUSE_FUZZ_PASS:-}", "a b", "\xc3\xa9t\xc3\xa9", "fraction", "pixels",
    "letterbox", "fill", "hwc", "uint8", "rtsp://", "/nonexistent/clip.mp4", "lobby", "cls", "det"};

//! One seeded edit of `text`, line-wise: a value replaced, a line deleted, duplicated, re-indented
//! or swapped, a key misspelt, bytes inserted, or the text cut short.
std::string mutate(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  const size_t i = pick(lines.size());
  std::string& line = lines[i];
  switch (rng() % 8) {
    case 0:
    case 1: {   // a scalar after "key:" (a whole line's value, or inside a flow map)
      std::vector<size_t> colons;
      for (size_t at = line.find(": "); at != std::string::npos; at = line.find(": ", at + 1)) colons.push_back(at + 2);
      if (colons.empty()) break;
      const size_t from = colons[pick(colons.size())];
      size_t to = from;
      while (to < line.size() && line[to] != ',' && line[to] != '}' && line[to] != '#') ++to;
      line.replace(from, to - from, kJunk[pick(std::size(kJunk))]);
      break;
    }
    case 2: lines.erase(lines.begin() + std::ptrdiff_t(i)); break;
    case 3: lines.insert(lines.begin() + std::ptrdiff_t(i), line); break;
    case 4: {
      const size_t lead = line.find_first_not_of(' ');
      if (rng() % 2 && lead != std::string::npos && lead > 0) {
        line.erase(0, std::min<size_t>(lead, 1 + pick(4)));
      } else {
        line.insert(0, 1 + pick(4), ' ');
      }
      break;
    }
    case 5: std::swap(line, lines[pick(lines.size())]); break;
    case 6: {   // a key misspelt: one letter before the first ':' changed
      const size_t colon = line.find(':');
      const size_t lead = line.find_first_not_of(" -");
      if (colon == std::string::npos || lead == std::string::npos || lead >= colon) break;
      line[lead + pick(colon - lead)] = char('a' + pick(26));
      break;
    }
    case 7: {
      std::string bytes(1 + pick(6), '\0');
      for (char& b : bytes) b = char(rng() % 256);
      line.insert(pick(line.size() + 1), bytes);
      break;
    }
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  if (rng() % 16 == 0) out.resize(pick(out.size() + 1));   // sometimes also cut short
  return out;
}

TEST(ConfigFuzz, AnyEditOfAGoodConfigLoadsOrNamesItsLineAndKey) {
  const TempDir dir;
  const fs::path clip = dir.write("clip.mp4", "not decoded at load time");
  const ScopedEnv pass("FRAMEFUSE_FUZZ_PASS", "pa55");
  const ScopedEnv unset("FRAMEFUSE_FUZZ_UNSET", std::nullopt);
  const std::string seeds[] = {default_config_yaml(), rich_config(clip)};
  for (const std::string& seed : seeds) ASSERT_NO_THROW(load_string(seed, "fuzz.yaml", dir.path())) << seed;

  // Errors: `fuzz.yaml:<line>:<col>: <message>` on one line, the line inside the text (or just past it).
  const std::regex located(R"(fuzz\.yaml:(\d+):(\d+): (.+))");
  FrameInfo hd;
  hd.width = 1920;
  hd.height = 1080;
  hd.format = ops::PixelFormat::Nv12;
  FrameInfo tiny = hd;
  tiny.width = 64;
  tiny.height = 36;
  std::mt19937 rng(20261201);
  constexpr int kEdits = 6000;
  int loaded = 0, planned = 0;
  std::set<std::string> messages;
  for (int n = 0; n < kEdits; ++n) {
    const std::string& seed = seeds[n % std::size(seeds)];
    const std::string text = mutate(seed, rng);
    const size_t text_lines = size_t(std::count(text.begin(), text.end(), '\n')) + 1;
    try {
      const DaemonConfig c = load_string(text, "fuzz.yaml", dir.path());
      ++loaded;
      // What loads must plan, or be refused by planning with a message naming the output.
      for (const PipelineSpec& p : c.pipelines) {
        for (const FrameInfo& frame : {hd, tiny}) {
          try {
            EXPECT_EQ(make_output_plans(p, frame).size(), p.outputs.size());
            ++planned;
          } catch (const ConfigError& e) {
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("output"), std::string::npos) << e.what() << "\n" << text;
          }
        }
      }
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      std::smatch m;
      if (!std::regex_match(message, m, located)) {
        ADD_FAILURE() << "not `fuzz.yaml:LINE:COL: message`: " << message << "\n--- edit " << n << ":\n" << text;
      } else {
        EXPECT_GE(std::stoul(m[1]), 1u) << message;
        EXPECT_LE(std::stoul(m[1]), text_lines) << message << "\n" << text;
        messages.insert(m[3].str().substr(0, m[3].str().find(':')));   // the key path, or the syntax error
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "escaped as " << typeid(e).name() << ": " << e.what() << "\n--- edit " << n << ":\n" << text;
    }
    if (HasFailure()) break;   // one reproduction is enough
  }
  std::printf("config fuzz: %d edits, %d loaded, %d pipeline plans made, %zu distinct keys or errors refused\n", kEdits,
              loaded, planned, messages.size());
  // The edits must reach validation deep in the schema, not only the YAML parser.
  EXPECT_GT(loaded, kEdits / 10) << "too few edits still load";
  EXPECT_GT(planned, 0);
  EXPECT_GT(messages.size(), 60u) << "too few distinct keys refused";
}

}  // namespace
}  // namespace framefuse::config
