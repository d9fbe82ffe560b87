// Prometheus exposition and the escaping behind /metrics and /status: exact series and values for
// known snapshots, a line-by-line format check, and promtool's own check when it is installed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/metrics/prometheus.hpp"
#include "daemon/metrics/status_json.hpp"
#include "pipeline/runtime/pipeline_stats.hpp"
#include "pipeline/util/text_escape.hpp"

namespace framefuse::daemon {
namespace {

DaemonSnapshot known_daemon() {
  DaemonSnapshot d;
  d.version = "0.1.0";
  d.uptime_s = 12.5;
  d.ready = true;
  d.device = "cpu";
  d.reloads_ok = 3;
  d.reloads_failed = 2;
  d.last_reload_unix_s = 1700000000.25;
  d.last_reload_ok = false;
  d.config_path = "/etc/framefuse/framefuse.yaml";
  d.process = {.cpu_seconds = 42.25,
               .resident_bytes = 734'003'200,
               .virtual_bytes = 12'884'901'888,
               .start_time_unix_s = 1699999000.5,
               .open_fds = 57,
               .max_fds = 1'048'576};
  return d;
}

PipelineSnapshot known_pipeline(std::string name, uint64_t base) {
  PipelineSnapshot p;
  p.name = std::move(name);
  p.device = "cpu";
  p.source = "rtsp://cam/stream";
  p.state = SourceState::Streaming;
  p.frames_decoded = base + 1234;
  p.frames_processed = base + 1200;
  p.decode_errors = base + 5;
  p.reconnects = base + 2;
  p.dropped = {base + 7, base + 11, base + 13};
  p.queue_depth = 3;
  p.last_frame_age_s = 0.04;
  p.fps = 29.97;
  p.active_s = 40.04;
  for (size_t i = 0; i < p.latency.counts.size(); ++i) p.latency.counts[i] = base + 10 + i;   // never zero
  p.latency.sum_s = 1.75;
  for (size_t i = 0; i < p.queue_wait.counts.size(); ++i) p.queue_wait.counts[i] = base + 1 + 2 * i;
  p.queue_wait.sum_s = 0.5;
  for (size_t i = 0; i < p.submit.counts.size(); ++i) p.submit.counts[i] = base + 2 + i % 3;
  p.submit.sum_s = 0.25;
  p.submit_cpu_s = (68.0 + double(base)) / 4096;   // 2^-12 s per submit of `submit`'s 68 when base = 0
  p.pool_in_use = int64_t(base) + 6;
  p.pool_capacity = int64_t(base) + 16;
  p.decoder = "cpu";
  p.nvdec_fallbacks = base + 1;
  p.outputs = {"cls", "det"};
  return p;
}

//! `d` with two CUDA devices' memory.
DaemonSnapshot with_gpus(DaemonSnapshot d) {
  d.gpus = {{0, 3'221'225'472ull, 150'754'820'096ull}, {2, 1'048'576, 85'899'345'920ull}};
  return d;
}

//! `d` with hybrid decode's loads: the cores and GPU 0's NVDEC.
DaemonSnapshot with_decode(DaemonSnapshot d) {
  d.decode = {{"cpu", "host", 1600, 30, 2}, {"nvdec", "cuda:0", 7680, 1875.5, 0}};
  return d;
}

//! `d` with two batch groups: one that ran 40 batches of 8 (256 frames), one before its first batch.
DaemonSnapshot with_batch_groups(DaemonSnapshot d) {
  d.batch_groups = {{"lobby", "cuda:0", 8, 40, 256, 7, 5, 4}, {"dock", "cpu", 4, 0, 0, 0, 0, 2}};
  return d;
}

//! `p` with a control snapshot: two outputs, black raised, events on two conditions.
PipelineSnapshot with_control(PipelineSnapshot p) {
  ControlSnapshot c;
  c.frames = 90;
  c.mean_luma = 0.25;
  c.luma_variance = 0.0625;
  c.motion = 0.125;
  c.black_fraction = 0.5;
  c.white_fraction = 0.03125;
  c.scene_distance = 0.75;
  c.health[control::Health::kBlack] = true;
  c.health_events[control::Health::kBlack] = 2;
  c.health_events[control::Health::kSceneChange] = 5;
  c.outputs = {{"cls", 2.5, 0.45, 0.0625, 100, 40, 224, 224}, {"det", 1, 0.25, 0.125, 0, 0, 1280, 720}};
  p.control = std::move(c);
  return p;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Metrics, DaemonSeriesHaveExactValues) {
  const auto p = known_pipeline("lobby", 0);
  const std::string m = render_metrics(known_daemon(), std::span(&p, 1));
  EXPECT_TRUE(has_line(m, R"(framefuse_build_info{version="0.1.0"} 1)")) << m;
  EXPECT_TRUE(has_line(m, "framefuse_uptime_seconds 12.5")) << m;
  EXPECT_TRUE(has_line(m, "framefuse_ready 1")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_config_reloads_total{result="success"} 3)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_config_reloads_total{result="failure"} 2)")) << m;
  EXPECT_TRUE(has_line(m, "framefuse_config_last_reload_success 0")) << m;
  EXPECT_TRUE(has_line(m, "framefuse_config_last_reload_timestamp_seconds 1700000000.25")) << m;
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_config_reloads_total counter")) << m;
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_uptime_seconds gauge")) << m;
  // The process itself, under the client libraries' standard names.
  EXPECT_TRUE(has_line(m, "process_cpu_seconds_total 42.25")) << m;
  EXPECT_TRUE(has_line(m, "# TYPE process_cpu_seconds_total counter")) << m;
  EXPECT_TRUE(has_line(m, "process_resident_memory_bytes 734003200")) << m;
  EXPECT_TRUE(has_line(m, "process_virtual_memory_bytes 12884901888")) << m;
  EXPECT_TRUE(has_line(m, "process_start_time_seconds 1699999000.5")) << m;
  EXPECT_TRUE(has_line(m, "process_open_fds 57")) << m;
  EXPECT_TRUE(has_line(m, "process_max_fds 1048576")) << m;
}

TEST(Metrics, PipelineSeriesHaveExactValues) {
  const PipelineSnapshot ps[] = {known_pipeline("lobby", 0), known_pipeline("dock", 1000)};
  const std::string m = render_metrics(known_daemon(), ps);
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_decoded_total{pipeline="lobby"} 1234)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_decoded_total{pipeline="dock"} 2234)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_processed_total{pipeline="lobby"} 1200)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_dropped_total{pipeline="lobby",reason="queue_full"} 7)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_dropped_total{pipeline="lobby",reason="decode_error"} 11)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_dropped_total{pipeline="dock",reason="process_error"} 1013)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_decode_errors_total{pipeline="lobby"} 5)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_source_reconnects_total{pipeline="dock"} 1002)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_queue_depth{pipeline="lobby"} 3)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_last_frame_age_seconds{pipeline="lobby"} 0.04)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_frames_per_second{pipeline="lobby"} 29.97)")) << m;
  for (size_t s = 0; s < kSourceStateNames.size(); ++s) {
    const int want = s == static_cast<size_t>(SourceState::Streaming) ? 1 : 0;
    EXPECT_TRUE(has_line(m, std::string(R"(framefuse_source_state{pipeline="lobby",state=")") +
                                kSourceStateNames[s] + "\"} " + std::to_string(want)))
        << kSourceStateNames[s] << "\n" << m;
  }
}

TEST(Metrics, ControlSeriesHaveExactValues) {
  const PipelineSnapshot ps[] = {with_control(known_pipeline("lobby", 0)), known_pipeline("dock", 1000)};
  const std::string m = render_metrics(known_daemon(), ps);
  for (const char* line : {
           R"(framefuse_frame_luma_mean{pipeline="lobby"} 0.25)",
           R"(framefuse_frame_motion{pipeline="lobby"} 0.125)",
           R"(framefuse_output_gain{pipeline="lobby",output="cls"} 2.5)",
           R"(framefuse_output_gain{pipeline="lobby",output="det"} 1)",
           R"(framefuse_output_luma_mean{pipeline="lobby",output="cls"} 0.45)",
           R"(framefuse_output_roi_x_pixels{pipeline="lobby",output="cls"} 100)",
           R"(framefuse_output_roi_y_pixels{pipeline="lobby",output="cls"} 40)",
           R"(framefuse_output_roi_width_pixels{pipeline="lobby",output="det"} 1280)",
           R"(framefuse_output_roi_height_pixels{pipeline="lobby",output="det"} 720)",
           R"(framefuse_health{pipeline="lobby",condition="black"} 1)",
           R"(framefuse_health{pipeline="lobby",condition="frozen"} 0)",
           R"(framefuse_health_events_total{pipeline="lobby",condition="black"} 2)",
           R"(framefuse_health_events_total{pipeline="lobby",condition="scene_change"} 5)",
           R"(framefuse_health_events_total{pipeline="lobby",condition="overexposed"} 0)",
           "# TYPE framefuse_health_events_total counter",
           "# TYPE framefuse_output_gain gauge",
       })
    EXPECT_TRUE(has_line(m, line)) << line << "\n" << m;
  // A pipeline without control has no control series; without any, the families are absent too.
  EXPECT_EQ(m.find(R"(framefuse_frame_luma_mean{pipeline="dock"})"), std::string::npos) << m;
  const std::string none = render_metrics(known_daemon(), std::span(&ps[1], 1));
  EXPECT_EQ(none.find("framefuse_health"), std::string::npos) << none;
}

TEST(Metrics, PoolDecoderAndGpuSeriesHaveExactValues) {
  PipelineSnapshot ps[] = {known_pipeline("lobby", 0), known_pipeline("dock", 1000), known_pipeline("gate", 20),
                           known_pipeline("yard", 30)};
  ps[0].decoder = "nvdec";
  ps[0].codec = "hevc Main 10";
  ps[1].codec = "h264 High";
  ps[2].decoder = "";   // source not opened yet
  ps[3].decoder = "nvdec";
  const std::string m = render_metrics(with_decode(with_gpus(known_daemon())), ps);
  EXPECT_EQ(m.find(R"(framefuse_source_codec_info{pipeline="gate")"), std::string::npos) << m;
  for (const char* line : {
           R"(framefuse_pool_frames_in_use{pipeline="lobby"} 6)",
           R"(framefuse_pool_frames_in_use{pipeline="dock"} 1006)",
           R"(framefuse_pool_frames{pipeline="lobby"} 16)",
           R"(framefuse_pool_frames{pipeline="dock"} 1016)",
           R"(framefuse_nvdec_fallbacks_total{pipeline="lobby"} 1)",
           R"(framefuse_nvdec_fallbacks_total{pipeline="dock"} 1001)",
           R"(framefuse_decoder{pipeline="lobby",decoder="nvdec"} 1)",
           R"(framefuse_decoder{pipeline="lobby",decoder="cpu"} 0)",
           R"(framefuse_decoder{pipeline="dock",decoder="nvdec"} 0)",
           R"(framefuse_decoder{pipeline="dock",decoder="cpu"} 1)",
           R"(framefuse_decoder{pipeline="gate",decoder="nvdec"} 0)",
           R"(framefuse_decoder{pipeline="gate",decoder="cpu"} 0)",
           R"(framefuse_source_codec_info{pipeline="lobby",codec="hevc Main 10"} 1)",
           R"(framefuse_source_codec_info{pipeline="dock",codec="h264 High"} 1)",
           "framefuse_nvdec_sessions 2",
           R"(framefuse_gpu_memory_used_bytes{device="cuda:0"} 3221225472)",
           R"(framefuse_gpu_memory_total_bytes{device="cuda:0"} 150754820096)",
           R"(framefuse_gpu_memory_used_bytes{device="cuda:2"} 1048576)",
           R"(framefuse_gpu_memory_total_bytes{device="cuda:2"} 85899345920)",
           R"(framefuse_decode_capacity_fps{decoder="cpu",device="host"} 1600)",
           R"(framefuse_decode_capacity_fps{decoder="nvdec",device="cuda:0"} 7680)",
           R"(framefuse_decode_paced_fps{decoder="cpu",device="host"} 30)",
           R"(framefuse_decode_paced_fps{decoder="nvdec",device="cuda:0"} 1875.5)",
           R"(framefuse_decode_unpaced_streams{decoder="cpu",device="host"} 2)",
           R"(framefuse_decode_unpaced_streams{decoder="nvdec",device="cuda:0"} 0)",
           "# TYPE framefuse_nvdec_fallbacks_total counter",
           "# TYPE framefuse_pool_frames gauge",
           "# TYPE framefuse_gpu_memory_used_bytes gauge",
       })
    EXPECT_TRUE(has_line(m, line)) << line << "\n" << m;
  // Without CUDA devices (CPU-only hosts) the GPU families are absent; NVDEC sessions are 0.
  const std::string cpu = render_metrics(known_daemon(), std::span(&ps[1], 1));
  EXPECT_EQ(cpu.find("framefuse_gpu_memory"), std::string::npos) << cpu;
  EXPECT_TRUE(has_line(cpu, "framefuse_nvdec_sessions 0")) << cpu;
}

TEST(StatusJson, PoolDecoderCodecOutputsSinkAndGpus) {
  PipelineSnapshot ps[] = {known_pipeline("lobby", 0), known_pipeline("dock", 1000)};
  ps[0].decoder = "nvdec";
  ps[0].codec = "hevc Main 10";
  ps[1].decoder = "";
  ps[0].sink_type = "shm";
  ps[0].sink_target = "/dev/shm/lobby";
  ps[1].sink_type = "null";
  const std::string j = render_status_json(with_decode(with_gpus(known_daemon())), ps);
  EXPECT_NE(j.find(R"("gpus":[{"device":"cuda:0","used_bytes":3221225472,"total_bytes":150754820096},)"
                   R"({"device":"cuda:2","used_bytes":1048576,"total_bytes":85899345920}],"nvdec_sessions":1,)"
                   R"("decode":[{"decoder":"cpu","device":"host","capacity_fps":1600,"paced_fps":30,"unpaced_streams":2},)"
                   R"({"decoder":"nvdec","device":"cuda:0","capacity_fps":7680,"paced_fps":1875.5,"unpaced_streams":0}],)"),
            std::string::npos) << j;
  EXPECT_NE(j.find(R"("pool":{"in_use":6,"capacity":16},"decoder":"nvdec","nvdec_fallbacks":1,"codec":"hevc Main 10",)"
                   R"("outputs":["cls","det"],)"
                   R"("sink":{"type":"shm","target":"/dev/shm/lobby"},)"),
            std::string::npos) << j;
  EXPECT_NE(j.find(R"("sink":{"type":"null","target":null},)"), std::string::npos) << j;
  EXPECT_NE(j.find(R"("pool":{"in_use":1006,"capacity":1016},"decoder":null,"nvdec_fallbacks":1001,"codec":null,)"),
            std::string::npos) << j;
  const std::string cpu = render_status_json(known_daemon(), std::span(&ps[1], 1));
  EXPECT_NE(cpu.find(R"("gpus":[],"nvdec_sessions":0,"decode":[],)"), std::string::npos) << cpu;
}

TEST(StatusJson, RatesNowAndOverTheRun) {
  const PipelineSnapshot p = known_pipeline("lobby", 0);
  const std::string j = render_status_json(known_daemon(), std::span(&p, 1));
  EXPECT_NE(j.find(R"("queue_depth":3,"last_frame_age_s":0.04,"fps":29.97,"active_s":40.04,)"), std::string::npos) << j;
}

TEST(StatusJson, LatencyQueueWaitAndSubmitCountSumMean) {
  const PipelineSnapshot p = known_pipeline("lobby", 0);
  const std::string j = render_status_json(known_daemon(), std::span(&p, 1));
  EXPECT_NE(j.find(R"("latency":{"count":483,"sum_s":1.75,"mean_s":0.0036231884057971015},)"
                   R"("queue_wait":{"count":529,"sum_s":0.5,"mean_s":0.000945179584120983},)"
                   R"("submit":{"count":68,"sum_s":0.25,"mean_s":0.003676470588235294},)"
                   R"("submit_cpu":{"sum_s":0.0166015625,"mean_s":0.000244140625},)"),
            std::string::npos)
      << j;
}

TEST(PipelineStats, ObservesLatencyQueueWaitAndSubmitIntoTheirBuckets) {
  PipelineStats stats;
  stats.observe_latency(0.00025, 0.00005, 0.000004, 0.000003);   // buckets le 0.0003, le 0.0001 and le 0.0001
  stats.observe_latency(0.004, 0.0012, 0.003, 0.00004);          // le 0.004, le 0.0015 and le 0.003
  stats.observe_latency(30.0, 0.0, 0.0006, 0.000011);            // above the last bound, le 0.0001 and le 0.00075
  const PipelineSnapshot s = stats.snapshot();
  EXPECT_EQ(s.latency.count(), 3u);
  EXPECT_EQ(s.latency.counts[2], 1u);
  EXPECT_EQ(s.latency.counts[10], 1u);
  EXPECT_EQ(s.latency.counts.back(), 1u);
  EXPECT_NEAR(s.latency.sum_s, 30.00425, 1e-9);
  EXPECT_EQ(s.queue_wait.counts[0], 2u);
  EXPECT_EQ(s.queue_wait.counts[6], 1u);
  EXPECT_NEAR(s.queue_wait.sum_s, 0.00125, 1e-9);
  EXPECT_EQ(s.submit.count(), 3u);
  EXPECT_EQ(s.submit.counts[0], 1u);
  EXPECT_EQ(s.submit.counts[4], 1u);
  EXPECT_EQ(s.submit.counts[9], 1u);
  EXPECT_NEAR(s.submit.sum_s, 0.003604, 1e-9);
  EXPECT_NEAR(s.submit_cpu_s, 0.000054, 1e-9);
  const LatencyHistogram before = s.latency;
  stats.observe_latency(0.00025, 0.0, 0.0, 0.0);
  const LatencyHistogram after = stats.snapshot().latency.since(before);
  EXPECT_EQ(after.count(), 1u);
  EXPECT_EQ(after.counts[2], 1u);
  EXPECT_NEAR(after.sum_s, 0.00025, 1e-9);
}

TEST(PipelineStats, ActiveTimeRunsFromTheFirstDecodedFrameToTheLastOutput) {
  using namespace std::chrono_literals;
  using Clock = std::chrono::steady_clock;
  PipelineStats stats;
  std::this_thread::sleep_for(60ms);   // opening the source: not part of the run
  EXPECT_EQ(stats.snapshot().active_s, 0.0);
  const Clock::time_point first = Clock::now();
  stats.first_frame_ns.store(steady_ns(first));
  EXPECT_EQ(stats.snapshot().active_s, 0.0) << "no output yet";
  std::this_thread::sleep_for(40ms);
  SubmitCall call;
  call.begun = call.returned = Clock::now();
  stats.observe_frame(first, call, std::nullopt);
  const double bound = std::chrono::duration<double>(Clock::now() - first).count();
  const double active = stats.snapshot().active_s;
  EXPECT_GE(active, 0.04);
  EXPECT_LE(active, bound) << "from the first frame, not from the stats' creation";
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(stats.snapshot().active_s, active) << "it ends at the last output, not now";
}

TEST(StatusJson, ControlObjectOrNull) {
  const PipelineSnapshot ps[] = {with_control(known_pipeline("lobby", 0)), known_pipeline("dock", 1000)};
  const std::string j = render_status_json(known_daemon(), ps);
  const std::string lobby =
      R"("control":{"frames":90,"mean_luma":0.25,"luma_variance":0.0625,"motion":0.125,"black_fraction":0.5,)"
      R"("white_fraction":0.03125,"scene_distance":0.75,)"
      R"("health":{"frozen":false,"black":true,"overexposed":false,"scene_change":false},)"
      R"("health_events":{"frozen":0,"black":2,"overexposed":0,"scene_change":5},)"
      R"("outputs":[{"name":"cls","gain":2.5,"mean_luma":0.45,"motion":0.0625,"roi":{"x":100,"y":40,"w":224,"h":224}},)"
      R"({"name":"det","gain":1,"mean_luma":0.25,"motion":0.125,"roi":{"x":0,"y":0,"w":1280,"h":720}}]}})";
  EXPECT_NE(j.find(lobby), std::string::npos) << j;
  EXPECT_NE(j.find(R"("last_error":"","control":null})"), std::string::npos) << j;
}

TEST(Metrics, HistogramIsCumulativeWithSumAndCount) {
  const auto p = known_pipeline("lobby", 0);
  const std::string m = render_metrics(known_daemon(), std::span(&p, 1));
  // Per-bucket counts are 10, 11, ..., 29 (last = +Inf): cumulative 10, 21, 33, ...
  uint64_t cumulative = 0;
  const char* le[] = {"0.0001", "0.0002", "0.0003", "0.0005", "0.00075", "0.001", "0.0015", "0.002",
                      "0.0025", "0.003",  "0.004",  "0.005",  "0.01",    "0.02",  "0.05",   "0.1",
                      "0.2",    "0.5",    "1",      "2",      "5",       "10",    "+Inf"};
  ASSERT_EQ(std::size(le), p.latency.counts.size());
  for (size_t i = 0; i < p.latency.counts.size(); ++i) {
    cumulative += 10 + i;
    EXPECT_TRUE(has_line(m, std::string(R"(framefuse_decode_to_output_seconds_bucket{pipeline="lobby",le=")") +
                                le[i] + "\"} " + std::to_string(cumulative)))
        << le[i] << "\n" << m;
  }
  EXPECT_EQ(cumulative, 10u * 23 + 253);
  EXPECT_TRUE(has_line(m, R"(framefuse_decode_to_output_seconds_sum{pipeline="lobby"} 1.75)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_decode_to_output_seconds_count{pipeline="lobby"} 483)")) << m;
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_decode_to_output_seconds histogram")) << m;
  // The wait before the submit, the same way: counts 1, 3, 5, ..., 45.
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_queue_wait_seconds histogram")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_queue_wait_seconds_bucket{pipeline="lobby",le="0.0003"} 9)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_queue_wait_seconds_bucket{pipeline="lobby",le="+Inf"} 529)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_queue_wait_seconds_sum{pipeline="lobby"} 0.5)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_queue_wait_seconds_count{pipeline="lobby"} 529)")) << m;
  // The submit call's: counts 2, 3, 4, 2, 3, 4, ... (23 buckets: 68 in all).
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_submit_seconds histogram")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_submit_seconds_bucket{pipeline="lobby",le="0.0005"} 11)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_submit_seconds_bucket{pipeline="lobby",le="+Inf"} 68)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_submit_seconds_sum{pipeline="lobby"} 0.25)")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_submit_seconds_count{pipeline="lobby"} 68)")) << m;
  // The host CPU of those calls: a counter beside the histogram.
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_submit_cpu_seconds_total counter")) << m;
  EXPECT_TRUE(has_line(m, R"(framefuse_submit_cpu_seconds_total{pipeline="lobby"} 0.0166015625)")) << m;
}

TEST(Metrics, AgeIsAbsentBeforeTheFirstFrame) {
  auto p = known_pipeline("lobby", 0);
  p.last_frame_age_s = -1;
  const std::string m = render_metrics(known_daemon(), std::span(&p, 1));
  EXPECT_EQ(m.find("framefuse_last_frame_age_seconds{"), std::string::npos) << m;
  EXPECT_TRUE(has_line(m, "# TYPE framefuse_last_frame_age_seconds gauge")) << m;
}

TEST(Metrics, BatchGroupFamiliesOnlyWithGroupsAndInStatus) {
  const auto p = known_pipeline("lobby", 0);
  const std::string m = render_metrics(with_batch_groups(known_daemon()), std::span(&p, 1));
  for (const char* line : {"framefuse_batch_launches_total{group=\"lobby\"} 40",
                           "framefuse_batch_frames_total{group=\"lobby\"} 256",
                           "framefuse_batch_fill_ratio{group=\"lobby\"} 0.8",
                           "framefuse_batch_wait_timeouts_total{group=\"lobby\"} 7",
                           "framefuse_batch_max_frames{group=\"lobby\"} 8",
                           "framefuse_batch_queue_depth{group=\"lobby\"} 5",
                           "framefuse_batch_members{group=\"lobby\"} 4",
                           "framefuse_batch_fill_ratio{group=\"dock\"} 0",
                           "framefuse_batch_members{group=\"dock\"} 2",
                           "# TYPE framefuse_batch_launches_total counter",
                           "# TYPE framefuse_batch_fill_ratio gauge"})
    EXPECT_TRUE(has_line(m, line)) << line << "\n" << m;
  const std::string none = render_metrics(known_daemon(), std::span(&p, 1));
  EXPECT_EQ(none.find("framefuse_batch_"), std::string::npos) << none;
  const std::string j = render_status_json(with_batch_groups(known_daemon()), std::span(&p, 1));
  EXPECT_NE(j.find(R"("batch_groups":[{"name":"lobby","device":"cuda:0","max_batch":8,"batches":40,"frames":256,)"
                   R"("mean_fill":0.8,"wait_timeouts":7,"queue_depth":5,"members":4},{"name":"dock",)"),
            std::string::npos)
      << j;
  EXPECT_NE(render_status_json(known_daemon(), std::span(&p, 1)).find(R"("batch_groups":[],"pipelines":[)"),
            std::string::npos);
}

TEST(Metrics, LabelValuesAreEscaped) {
  const auto p = known_pipeline("a\"b\\c\nd\xff", 0);
  const std::string m = render_metrics(known_daemon(), std::span(&p, 1));
  EXPECT_TRUE(has_line(m, "framefuse_frames_decoded_total{pipeline=\"a\\\"b\\\\c\\nd\xEF\xBF\xBD\"} 1234")) << m;
}

//! Every line is HELP, TYPE or a sample of a family whose TYPE came first; families appear once
//! and contiguously; counters end in _total; values parse as floats.
TEST(Metrics, TextFormatIsWellFormed) {
  const PipelineSnapshot ps[] = {with_control(known_pipeline("lobby", 0)), known_pipeline("dock \"2\"", 50)};
  const std::string m = render_metrics(with_decode(with_batch_groups(with_gpus(known_daemon()))), ps);
  ASSERT_TRUE(m.ends_with("\n"));
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? (\S+))");
  std::map<std::string, std::string> types;
  std::string current;
  size_t samples = 0;
  for (const auto& l : lines(m)) {
    std::smatch g;
    if (std::regex_match(l, g, help)) {
      EXPECT_EQ(types.count(g[1]), 0u) << "HELP after TYPE or repeated: " << l;
    } else if (std::regex_match(l, g, type)) {
      EXPECT_EQ(types.count(g[1]), 0u) << "family declared twice: " << l;
      types[g[1]] = g[2];
      current = g[1];
      if (g[2] == "counter") EXPECT_TRUE(current.ends_with("_total")) << l;
      if (g[2] != "counter") EXPECT_FALSE(current.ends_with("_total")) << l;
    } else if (std::regex_match(l, g, sample)) {
      ++samples;
      std::string family = g[1];
      if (types[current] == "histogram") {
        for (const char* suffix : {"_bucket", "_sum", "_count"})
          if (family == current + suffix) family = current;
      }
      EXPECT_EQ(family, current) << "sample outside its family block: " << l;
      const std::string value = g[7];
      if (value != "+Inf" && value != "-Inf" && value != "NaN") {
        char* end = nullptr;
        std::strtod(value.c_str(), &end);
        EXPECT_EQ(*end, '\0') << "bad value: " << l;
      }
    } else {
      ADD_FAILURE() << "not a valid exposition line: " << l;
    }
  }
  // Pipeline families, + the process, GPU, decode, control and batch group families.
  EXPECT_EQ(types.size(), 25u + 6u + 2u + 3u + 10u + 7u);
  EXPECT_GT(samples, 60u);
}

TEST(Metrics, PromtoolAcceptsTheExposition) {
  if (std::system("command -v promtool > /dev/null 2>&1") != 0) GTEST_SKIP() << "promtool is not installed";
  const PipelineSnapshot ps[] = {with_control(known_pipeline("lobby", 0)), known_pipeline("dock", 50)};
  const auto path = std::filesystem::temp_directory_path() / ("framefuse_metrics_" + std::to_string(::getpid()) + ".prom");
  {
    std::ofstream(path) << render_metrics(with_decode(with_batch_groups(with_gpus(known_daemon()))), ps);
  }
  const auto out = path.string() + ".out";
  const int rc = std::system(("promtool check metrics < " + path.string() + " > " + out + " 2>&1").c_str());
  std::ifstream report(out);
  const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << text;
  std::filesystem::remove(path);
  std::filesystem::remove(out);
}

TEST(TextEscape, JsonStringsEscapeQuotesBackslashesAndControls) {
  EXPECT_EQ(json_string("plain"), "\"plain\"");
  EXPECT_EQ(json_string("a\"b\\c"), R"("a\"b\\c")");
  EXPECT_EQ(json_string("l1\nl2\r\t"), R"("l1\nl2\r\t")");
  EXPECT_EQ(json_string(std::string_view("\x01\x1f\0", 3)), R"("\u0001\u001f\u0000")");
  EXPECT_EQ(json_string("caf\xC3\xA9"), "\"caf\xC3\xA9\"");   // valid UTF-8 passes through
}

TEST(TextEscape, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(valid_utf8("ok \xE2\x82\xAC"), "ok \xE2\x82\xAC");
  EXPECT_EQ(valid_utf8("latin1 \xE9t\xE9"), "latin1 \xEF\xBF\xBDt\xEF\xBF\xBD");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");             // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");   // surrogate
  EXPECT_EQ(valid_utf8("cut \xE2\x82"), "cut \xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TextEscape, PrintableLineKeepsQuotedInputOnOneLine) {
  EXPECT_EQ(printable_line("fuzz.yaml:3:9: log.level: unknown value 'verbose'"),
            "fuzz.yaml:3:9: log.level: unknown value 'verbose'");
  EXPECT_EQ(printable_line("got 'a\nb\r\tc'"), R"(got 'a\nb\r\tc')");
  EXPECT_EQ(printable_line(std::string_view("\x01\x1f\x7f\0!", 5)), R"(\x01\x1f\x7f\x00!)");
  EXPECT_EQ(printable_line("caf\xC3\xA9 \xE9t\xE9"), "caf\xC3\xA9 \xEF\xBF\xBDt\xEF\xBF\xBD");
}

TEST(TextEscape, JsonNumbersAreFiniteOrNull) {
  EXPECT_EQ(json_number(0.25), "0.25");
  EXPECT_EQ(json_number(-3), "-3");
  EXPECT_EQ(json_number(1e-7), "1e-07");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(std::nan("")), "null");
}

}  // namespace
}  // namespace framefuse::daemon
