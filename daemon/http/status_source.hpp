#pragma once
//! What the HTTP layer asks the daemon: a read-only view of its state. Implemented by the daemon's
//! App; every method is called from HTTP threads concurrently with the daemon's own work.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/runtime/pipeline_stats.hpp"

namespace framefuse::daemon {

struct DaemonSnapshot {
  std::string version;
  double uptime_s = 0;
  bool ready = false;
  std::string device;                 //!< the daemon's default device, "cpu", "cuda:0"
  uint64_t reloads_ok = 0, reloads_failed = 0;
  double last_reload_unix_s = 0;      //!< wall-clock time of the last (re)load attempt
  bool last_reload_ok = true;
  std::string config_path;
};

//! All methods are thread-safe.
class StatusSource {
 public:
  virtual ~StatusSource() = default;
  virtual DaemonSnapshot daemon() = 0;
  virtual std::vector<PipelineSnapshot> pipelines() = 0;
  //! nullopt: unknown pipeline or no frame decoded yet.
  virtual std::optional<DecodedFrame> latest_frame(const std::string& pipeline) = 0;
};

}  // namespace framefuse::daemon
