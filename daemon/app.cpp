#include "daemon/app.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <set>
#include <thread>
#include <vector>

#include "config/load.hpp"
#include "daemon/http/http_server.hpp"
#include "daemon/logging.hpp"
#include "daemon/process_stats.hpp"
#include "daemon/version.hpp"
#include "pipeline/error.hpp"
#include "pipeline/sinks/sink.hpp"
#include "pipeline/util/redact.hpp"

namespace framefuse::daemon {

namespace {
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

//! Hybrid decode's capacities and codec costs as `decode:` sets them.
DecodeBalancer::Capacity capacity_of(const config::DecodeConfig& d) {
  return decode_capacity(d.nvdec_fps, d.cpu_fps, d.codec_costs);
}

}  // namespace

App::App(config::DaemonConfig config, Overrides overrides) : overrides_(std::move(overrides)) {
  last_reload_unix_s_ = unix_now();   // the first load is the first (re)load attempt
  apply_overrides(config);
  probe_ = probe_cuda();
  config_ = std::make_shared<const config::DaemonConfig>(std::move(config));
  balancer_.set_capacity(capacity_of(config_->decode));
  check_devices(*config_);
  const DeviceSpec resolved = resolve_device(config_->device, probe_);
  if (probe_.devices == 0) {
    spdlog::info("no usable CUDA device ({}): pipelines run on the CPU backend", probe_.detail);
  } else {
    spdlog::info("{} CUDA device(s), first: {}; default device {}", probe_.devices, probe_.detail,
                 to_string(resolved));
  }
}

App::~App() {
  http_.reset();   // stop serving before the runners it reads go away
  std::lock_guard lock(mu_);
  for (auto& [name, r] : runners_) r->request_stop();
  runners_.clear();   // each destructor joins: queued frames drained, sinks flushed
  stuck_.clear();     // done by now: run() waited for them (or exited)
  groups_.clear();    // members gone: nothing waits in them; each destructor joins
  stuck_groups_.clear();
}

void App::apply_overrides(config::DaemonConfig& c) const {
  if (overrides_.device) {
    c.device = config::parse_device(*overrides_.device);
    for (auto& p : c.pipelines) p.device.reset();   // the command line wins for every pipeline
    for (auto& g : c.batching) g.device.reset();     // and every batch group
  }
  if (overrides_.log_level) c.log.level = *overrides_.log_level;
  if (overrides_.http_bind) c.http.bind = *overrides_.http_bind;
  if (overrides_.http_port) c.http.port = static_cast<uint16_t>(*overrides_.http_port);
  if (overrides_.no_http) c.http.enabled = false;
}

DeviceSpec App::device_for(const PipelineSpec& p) const {
  return resolve_device(p.device.value_or(config_->device), probe_);
}

DeviceSpec App::device_for(const BatchGroupSpec& g) const {
  return resolve_device(g.device.value_or(config_->device), probe_);
}

DeviceSpec App::resolve_checked(const config::DaemonConfig& c, const std::optional<DeviceSpec>& own,
                                std::string_view key) const {
  try {
    return resolve_device(own.value_or(c.device), probe_);
  } catch (const DeviceError& e) {
    const std::string where = own ? std::string(key) : overrides_.device ? "--device" : "device";
    throw ConfigError(c.path.empty() ? fmt::format("{}: {}", where, e.what())
                                     : fmt::format("{}: {}: {}", c.path, where, e.what()));
  }
}

void App::check_devices(const config::DaemonConfig& c) const {
  resolve_checked(c, std::nullopt, "device");
  for (size_t i = 0; i < c.batching.size(); ++i) {
    const BatchGroupSpec& g = c.batching[i];
    resolve_checked(c, g.device, fmt::format("batching[{}].device (group '{}')", i, g.name));
  }
  for (size_t i = 0; i < c.pipelines.size(); ++i) {
    const PipelineSpec& p = c.pipelines[i];
    const std::string key = fmt::format("pipelines[{}].device (pipeline '{}')", i, p.name);
    check_sink_device(p.sink, resolve_checked(c, p.device, key), p.name);
  }
}

void App::start_group(const BatchGroupSpec& g) {
  auto group = std::make_unique<BatchGroup>(g, device_for(g), config_->cpu_threads);
  spdlog::info("batch group '{}': starting (batches of up to {} frames, max wait {} us, device {})", g.name,
               g.max_batch, g.max_wait.count(), to_string(group->device()));
  groups_[g.name] = std::move(group);
}

void App::start_pipeline(const PipelineSpec& p) {
  BatchGroup* group = p.batch_group.empty() ? nullptr : groups_.at(p.batch_group).get();
  auto runner =
      std::make_unique<PipelineRunner>(p, device_for(p), config_->cpu_threads, group, &decoder_share_, &balancer_);
  spdlog::info("pipeline '{}': starting ({} -> {} output(s), device {}{})", p.name, redact_uri(p.source.uri),
               p.outputs.size(), to_string(runner->device()),
               group ? fmt::format(", batch group '{}'", p.batch_group) : std::string());
  runner->start();
  runners_[p.name] = std::move(runner);
}

uint16_t App::http_port() const { return http_ ? http_->port() : 0; }

int App::run() {
  {
    std::lock_guard lock(mu_);
    for (const auto& g : config_->batching) start_group(g);
    for (const auto& p : config_->pipelines) start_pipeline(p);
  }
  if (config_->http.enabled) {
    const auto& h = config_->http;
    http_ = std::make_unique<HttpServer>(
        HttpServerOptions{h.bind, h.port, h.max_connections, h.idle_timeout, h.max_header_bytes}, *this);
    spdlog::info("http: serving /metrics, /status, /livez, /readyz, /preview on {}:{}", h.bind, http_->port());
  }
  notifier_.send("READY=1\nSTATUS=pipelines started");

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  auto next_progress = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status = 0;
  while (true) {
    const timespec tick{0, 200'000'000};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      spdlog::info("received {}: draining in-flight frames and stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
      notifier_.send("STOPPING=1");
      break;
    }
    if (sig == SIGHUP) {
      notifier_.send("RELOADING=1");
      if (reload()) {
        // Stopped pipelines' memory is freed but stays resident until the heap hands it back.
        if (const uint64_t released = release_free_heap(); released >= (uint64_t{1} << 20))
          spdlog::info("reload: {} MiB of freed memory returned to the system", released >> 20);
      }
      notifier_.send("READY=1");
    }
    feed_watchdog();
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_progress) {
      log_progress();
      next_progress = now + std::chrono::seconds(5);
    }
    if (all_done()) break;
  }
  // Bounded: a stuck sink or device must not keep the service from stopping. The runners stay in
  // runners_ (and /metrics answers) while they drain; only this thread removes any.
  std::vector<PipelineRunner*> stopping;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, r] : runners_) {
      r->request_stop();
      stopping.push_back(r.get());
    }
  }
  for (const auto& r : stuck_) stopping.push_back(r.get());
  if (!drain(stopping, "pipelines")) {
    spdlog::error("exiting without waiting for them");
    std::_Exit(1);
  }
  http_.reset();
  {
    std::lock_guard lock(mu_);
    for (auto& [name, r] : runners_) r->join();
    for (auto& [name, r] : runners_)
      if (static_cast<SourceState>(r->stats().state.load()) == SourceState::Failed) status = 1;
  }
  log_summary();
  return status;
}

bool App::drain(const std::vector<PipelineRunner*>& runners, std::string_view what) {
  constexpr auto kStopGrace = std::chrono::seconds(2);
  const auto done = [&] { return std::ranges::all_of(runners, [](PipelineRunner* r) { return r->done(); }); };
  const auto wait_done = [&](std::chrono::steady_clock::duration d) {
    const auto deadline = std::chrono::steady_clock::now() + d;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      feed_watchdog();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
  };
  if (wait_done(config_->drain_timeout)) return true;
  uint64_t dropped = 0;
  for (PipelineRunner* r : runners) dropped += r->discard_queued();
  if (config_->drain_timeout.count() > 0 || dropped > 0)
    spdlog::warn("{}: drain did not finish within {} ms: {} queued frame(s) dropped", what,
                 config_->drain_timeout.count(), dropped);
  if (wait_done(kStopGrace)) return true;
  for (PipelineRunner* r : runners)
    if (!r->done())
      spdlog::error("pipeline '{}' did not stop within {} ms of the drain (a stuck sink or device?)", r->spec().name,
                    std::chrono::duration_cast<std::chrono::milliseconds>(kStopGrace).count());
  return false;
}

void App::feed_watchdog() {
  const auto now = std::chrono::steady_clock::now();
  if (const auto wd = notifier_.watchdog_interval(); wd && now >= next_watchdog_) {
    notifier_.send("WATCHDOG=1");
    next_watchdog_ = now + *wd;
  }
}

bool App::all_done() {
  std::lock_guard lock(mu_);
  for (auto& [name, r] : runners_)
    if (!r->done()) return false;
  return true;
}

bool App::reload() {
  const auto path = config_->path;
  config::DaemonConfig next;
  try {
    next = config::load_file(path);
    apply_overrides(next);
    check_devices(next);
  } catch (const std::exception& e) {
    std::lock_guard lock(mu_);
    ++reloads_failed_;
    last_reload_ok_ = false;
    last_reload_unix_s_ = unix_now();
    spdlog::error("reload refused, keeping the running config: {}", e.what());
    return false;
  }
  // Logging is switched first so that this reload's own messages follow the new settings.
  setup_logging(next.log.level,
                next.log.format == config::LogConfig::Format::Json ? LogFormat::Json : LogFormat::Text);
  if (next.http != config_->http)
    spdlog::warn("reload: http settings changed; the HTTP server keeps its startup settings until a restart");
  // Under mu_, the pipelines and groups that go leave the maps; they drain outside it, so that
  // /metrics, /status and /livez are answered meanwhile. Their replacements start after they are
  // gone (a sink's files or ring are free again; a group's members stop before the group).
  std::vector<std::unique_ptr<PipelineRunner>> retired;
  std::vector<std::unique_ptr<BatchGroup>> retired_groups;
  std::set<std::string> running, kept_groups;
  int restarted = 0, unchanged = 0;
  {
    std::lock_guard lock(mu_);
    std::set<std::string> keep;
    for (const auto& p : next.pipelines) keep.insert(p.name);
    for (auto it = runners_.begin(); it != runners_.end();) {
      if (!keep.count(it->first)) {
        spdlog::info("reload: pipeline '{}' removed, draining", it->first);
        retired.push_back(std::move(it->second));
        it = runners_.erase(it);
      } else {
        ++it;
      }
    }
    config_ = std::make_shared<const config::DaemonConfig>(std::move(next));
    balancer_.set_capacity(capacity_of(config_->decode));   // streams keep their decoders until they reopen
    // A batch group is kept when its spec and device are; a replaced one is replaced with all its
    // members.
    for (const auto& g : config_->batching) {
      const auto it = groups_.find(g.name);
      if (it != groups_.end() && it->second->spec() == g && it->second->device() == device_for(g))
        kept_groups.insert(g.name);
    }
    for (const auto& p : config_->pipelines) {
      const auto it = runners_.find(p.name);
      if (it == runners_.end()) continue;
      if (it->second->spec() == p && it->second->device() == device_for(p) &&
          (p.batch_group.empty() || kept_groups.count(p.batch_group))) {
        running.insert(p.name);
        ++unchanged;
      } else {
        retired.push_back(std::move(it->second));
        runners_.erase(it);
        ++restarted;
      }
    }
    for (auto it = groups_.begin(); it != groups_.end();) {
      if (kept_groups.count(it->first)) {
        ++it;
      } else {
        spdlog::info("reload: batch group '{}' removed or changed, stopping", it->first);
        retired_groups.push_back(std::move(it->second));
        it = groups_.erase(it);
      }
    }
  }
  for (const auto& r : retired) r->request_stop();   // they drain side by side
  std::vector<PipelineRunner*> stopping;
  for (const auto& r : retired) stopping.push_back(r.get());
  if (!drain(stopping, "reload")) {
    // Kept running apart, with the groups they may still feed: their replacements start beside them.
    for (auto& r : retired)
      if (!r->done()) stuck_.push_back(std::move(r));
    for (auto& g : retired_groups) stuck_groups_.push_back(std::move(g));
    retired_groups.clear();
  }
  retired.clear();          // each destructor joins: all of them are done
  retired_groups.clear();   // their members are gone: nothing left to wait for
  std::lock_guard lock(mu_);
  for (const auto& g : config_->batching)
    if (!kept_groups.count(g.name)) start_group(g);
  for (const auto& p : config_->pipelines) {
    if (running.count(p.name)) continue;
    start_pipeline(p);
  }
  const int started = static_cast<int>(config_->pipelines.size()) - unchanged - restarted;
  ++reloads_ok_;
  last_reload_ok_ = true;
  last_reload_unix_s_ = unix_now();
  spdlog::info("reload applied: {} unchanged, {} restarted, {} started", unchanged, restarted, started);
  return true;
}

void App::log_progress() {
  for (const auto& s : pipelines()) {
    spdlog::info("pipeline '{}': {} decoded, {} processed, {:.1f} fps, queue {}, state {}", s.name,
                 s.frames_decoded, s.frames_processed, s.fps, s.queue_depth,
                 kSourceStateNames[static_cast<size_t>(s.state)]);
  }
}

void App::log_summary() {
  std::lock_guard lock(mu_);
  for (auto& [name, r] : runners_) {
    const auto s = r->stats().snapshot();
    uint64_t dropped = 0;
    for (auto d : s.dropped) dropped += d;
    const double lat_ms = 1e3 * s.latency.mean_s().value_or(0);
    const std::string target = sink_target(r->spec().sink);
    const std::string where = target.empty() ? "null sink" : target;
    // The pipeline's own run: from its first decoded frame to its last output.
    const std::string rate =
        s.active_s > 0 ? fmt::format("{:.1f} fps from the first frame decoded to the last output ({:.2f} s)",
                                     s.frames_processed / s.active_s, s.active_s)
                       : std::string("no output");
    spdlog::info("summary '{}': {} frames decoded, {} processed, {} dropped, {}, mean decode->output {:.2f} ms, "
                 "state {}, outputs in {}",
                 name, s.frames_decoded, s.frames_processed, dropped, rate, lat_ms,
                 kSourceStateNames[static_cast<size_t>(s.state)], where);
    if (!s.last_error.empty()) spdlog::info("summary '{}': last error: {}", name, s.last_error);
  }
  for (const auto& [name, g] : groups_) {
    const BatchGroupSnapshot s = g->snapshot();
    spdlog::info("summary batch group '{}': {} batches, {} frames, mean fill {:.1f} % of {}, {} left on max_wait", name,
                 s.batches, s.frames, 100 * s.mean_fill(), s.max_batch, s.wait_timeouts);
  }
}

bool App::ready() {
  std::lock_guard lock(mu_);
  if (runners_.empty()) return false;
  int up = 0;
  for (auto& [name, r] : runners_) {
    const auto st = static_cast<SourceState>(r->stats().state.load());
    if ((st == SourceState::Streaming || st == SourceState::Finished) && r->stats().frames_processed.load() > 0) ++up;
  }
  return config_->readiness == config::ReadinessPolicy::Any ? up > 0 : up == static_cast<int>(runners_.size());
}

DaemonSnapshot App::daemon() {
  DaemonSnapshot d;
  d.version = kVersion;
  d.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  d.ready = ready();
  std::vector<int32_t> cuda;   // each CUDA device a running pipeline uses, once
  {
    std::lock_guard lock(mu_);
    d.device = to_string(config_->device);
    d.reloads_ok = reloads_ok_;
    d.reloads_failed = reloads_failed_;
    d.last_reload_unix_s = last_reload_unix_s_;
    d.last_reload_ok = last_reload_ok_;
    d.config_path = config_->path;
    for (const auto& [name, r] : runners_)
      if (r->device().kind == DeviceKind::Cuda) cuda.push_back(r->device().index);
    for (const auto& [name, g] : groups_) d.batch_groups.push_back(g->snapshot());
  }
  std::sort(cuda.begin(), cuda.end());
  cuda.erase(std::unique(cuda.begin(), cuda.end()), cuda.end());
  d.gpus = gpu_memory(cuda);
  const auto load = [](const char* decoder, std::string device, const DecodeBalancer::Load& l) {
    const double fps = pixels_per_s_1080p(1);
    return DecodeLoad{decoder, std::move(device), l.capacity / fps, l.paced / fps, l.unpaced};
  };
  d.decode.push_back(load("cpu", "host", balancer_.cpu()));
  for (const int32_t i : cuda) d.decode.push_back(load("nvdec", fmt::format("cuda:{}", i), balancer_.nvdec(i)));
  d.process = read_process_stats();
  return d;
}

std::vector<PipelineSnapshot> App::pipelines() {
  std::lock_guard lock(mu_);
  std::vector<PipelineSnapshot> out;
  for (auto& [name, r] : runners_) {
    auto s = r->stats().snapshot();
    s.name = name;
    s.device = to_string(r->device());
    s.source = redact_uri(r->spec().source.uri);
    for (const auto& o : r->spec().outputs) s.outputs.push_back(o.name);
    s.sink_type = sink_type_name(r->spec().sink.kind);
    s.sink_target = sink_target(r->spec().sink);
    out.push_back(std::move(s));
  }
  return out;
}

std::optional<DecodedFrame> App::latest_frame(const std::string& pipeline) {
  std::shared_ptr<PreviewFrame> preview;
  bool streaming = false;
  {
    std::lock_guard lock(mu_);
    const auto it = runners_.find(pipeline);
    if (it == runners_.end()) return std::nullopt;
    preview = it->second->preview();
    streaming = static_cast<SourceState>(it->second->stats().state.load()) == SourceState::Streaming;
  }
  // Outside mu_: a reload need not wait for it. Only a streaming source is waited for: a camera
  // that is reconnecting or stalled would hold the preview worker for nothing.
  return preview->want(kPreviewKeep, streaming ? kPreviewWait : PreviewFrame::Clock::duration::zero());
}

std::optional<PipelineSpec> App::pipeline_spec(const std::string& pipeline) {
  std::lock_guard lock(mu_);
  const auto it = runners_.find(pipeline);
  if (it == runners_.end()) return std::nullopt;
  return it->second->spec();
}

}  // namespace framefuse::daemon
