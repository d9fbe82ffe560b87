#pragma once
//! The daemon's lifecycle: owns the immutable config snapshot, one PipelineRunner per pipeline and
//! one BatchGroup per `batching` group and the HTTP server; handles signals (stop, reload); answers
//! the HTTP layer's questions. Shutdown order is RAII: HTTP server first (no more readers), then
//! runners (drain, flush sinks), then batch groups (their members no longer feed them).
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/schema.hpp"
#include "daemon/http/status_source.hpp"
#include "daemon/notify.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/decode/video_source.hpp"
#include "pipeline/runtime/pipeline_runner.hpp"

namespace framefuse::daemon {

//! Command-line values that win over the file (they survive reloads).
struct Overrides {
  std::optional<std::string> device, log_level, http_bind;
  std::optional<int> http_port;
  bool no_http = false;
};

class App final : public StatusSource {
 public:
  App(config::DaemonConfig config, Overrides overrides);
  ~App() override;

  //! Starts pipelines and the HTTP server, then waits for signals (SIGINT/SIGTERM stop, SIGHUP
  //! reloads) or for every finite pipeline to finish. The caller blocks those signals in all threads
  //! before constructing the App. Returns the process exit status.
  int run();

  //! Re-reads the config file: a valid one is applied (unchanged pipelines untouched, changed ones
  //! restarted, removed ones drained, new ones started; log settings switched; changed http settings
  //! only warned about, they need a restart); an invalid one is refused and the old one keeps
  //! running. Returns whether it was applied.
  bool reload();

  DaemonSnapshot daemon() override;
  std::vector<PipelineSnapshot> pipelines() override;
  std::optional<DecodedFrame> latest_frame(const std::string& pipeline) override;
  std::optional<PipelineSpec> pipeline_spec(const std::string& pipeline) override;
  //! Bound HTTP port (0 when HTTP is off).
  uint16_t http_port() const;

 private:
  void apply_overrides(config::DaemonConfig& c) const;
  DeviceSpec device_for(const PipelineSpec& p) const;
  DeviceSpec device_for(const BatchGroupSpec& g) const;
  //! Resolves the device of every pipeline and batch group of `c` and checks that each pipeline's
  //! sink can take outputs made there. Throws ConfigError naming the file and the key whose device
  //! this host lacks (a pipeline's or group's own `device`, else the daemon's, or `--device`).
  void check_devices(const config::DaemonConfig& c) const;
  //! `own` (a pipeline's or group's `device`, at key `key`), else `c.device`, resolved on this host
  //! (check_devices()'s errors).
  DeviceSpec resolve_checked(const config::DaemonConfig& c, const std::optional<DeviceSpec>& own,
                             std::string_view key) const;
  void start_group(const BatchGroupSpec& g);
  void start_pipeline(const PipelineSpec& p);
  //! Stops `runners` (request_stop already called) within bounds: drain_timeout for their queued
  //! frames, then what is still queued is dropped (`shutdown`) and they get kStopGrace more. Feeds
  //! the systemd watchdog meanwhile. Returns whether every one is done; `what` names them in logs.
  bool drain(const std::vector<PipelineRunner*>& runners, std::string_view what);
  void feed_watchdog();
  bool all_done();
  void log_progress();
  void log_summary();
  bool ready();

  Overrides overrides_;
  CudaProbe probe_;
  Notifier notifier_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;   //!< guards config_, groups_, runners_ and reload counters against HTTP readers
  std::shared_ptr<const config::DaemonConfig> config_;
  DecoderShare decoder_share_;   //!< the runners' software decoders of files share the cores; outlives them
  DecodeBalancer balancer_{{}};   //!< hybrid decode over NVDEC and the cores (config_->decode); outlives the runners
  std::map<std::string, std::unique_ptr<BatchGroup>> groups_;        //!< outlive their member runners
  std::map<std::string, std::unique_ptr<PipelineRunner>> runners_;
  //! Pipelines a reload stopped that did not finish within drain(), and the batch groups retired
  //! with them (a stuck member may still use its group): kept, not joined, so a reload returns;
  //! shutdown waits for them as for the others. Touched only by the signal thread.
  std::vector<std::unique_ptr<PipelineRunner>> stuck_;
  std::vector<std::unique_ptr<BatchGroup>> stuck_groups_;
  std::chrono::steady_clock::time_point next_watchdog_{};
  uint64_t reloads_ok_ = 0, reloads_failed_ = 0;
  double last_reload_unix_s_ = 0;
  bool last_reload_ok_ = true;
  std::unique_ptr<class HttpServer> http_;
};

}  // namespace framefuse::daemon
