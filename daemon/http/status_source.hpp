#pragma once
//! What the HTTP layer asks the daemon: a read-only view of its state. Implemented by the daemon's
//! App; every method is called from HTTP threads concurrently with the daemon's own work.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "daemon/process_stats.hpp"
#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/exec/device.hpp"
#include "pipeline/runtime/batch_group.hpp"
#include "pipeline/runtime/pipeline_stats.hpp"
#include "pipeline/spec.hpp"

namespace framefuse::daemon {

//! What one decoder of hybrid decode carries (DecodeBalancer): NVDEC of a GPU, or the host's cores.
//! Rates in 1080p H.264 frames per second (a stream of another codec counts at its cost there).
struct DecodeLoad {
  std::string decoder;          //!< "nvdec" or "cpu"
  std::string device;           //!< "cuda:0"; "host" for the cores
  double capacity_fps = 0;      //!< config `decode:`
  double paced_fps = 0;         //!< what its paced streams (cameras, realtime files) need
  int32_t unpaced_streams = 0;  //!< files decoding there as fast as they can
};

struct DaemonSnapshot {
  std::string version;
  double uptime_s = 0;
  bool ready = false;
  std::string device;                 //!< the daemon's default device, "cpu", "cuda:0"
  uint64_t reloads_ok = 0, reloads_failed = 0;
  double last_reload_unix_s = 0;      //!< wall-clock time of the last (re)load attempt
  bool last_reload_ok = true;
  std::string config_path;
  std::vector<GpuMemory> gpus;        //!< CUDA devices the pipelines run on; empty on CPU-only hosts
  std::vector<DecodeLoad> decode;     //!< the cores, then NVDEC of each CUDA device the pipelines run on
  std::vector<BatchGroupSnapshot> batch_groups;   //!< `batching` groups, by name
  ProcessStats process;               //!< the daemon process' CPU time, memory and descriptors
};

//! Pipelines currently decoding with NVDEC (each holds one NVDEC session).
inline uint64_t nvdec_sessions(std::span<const PipelineSnapshot> pipelines) {
  uint64_t n = 0;
  for (const auto& p : pipelines) n += p.decoder == "nvdec";
  return n;
}

//! How long latest_frame() waits for a frame when its pipeline keeps none, and how long after a
//! preview its pipeline keeps frames (the page at / asks every 2 s).
constexpr std::chrono::milliseconds kPreviewWait{1000};
constexpr std::chrono::seconds kPreviewKeep{30};

//! All methods are thread-safe.
class StatusSource {
 public:
  virtual ~StatusSource() = default;
  virtual DaemonSnapshot daemon() = 0;
  virtual std::vector<PipelineSnapshot> pipelines() = 0;
  //! A current frame of the pipeline for a preview. Pipelines keep one only while previews are
  //! asked for, so this may wait a moment for the next decoded frame (never on the I/O thread).
  //! nullopt: unknown pipeline, or no frame (none decoded within kPreviewWait).
  virtual std::optional<DecodedFrame> latest_frame(const std::string& pipeline) = 0;
  //! The running spec of a pipeline (outputs for per-output previews); nullopt: unknown pipeline.
  virtual std::optional<PipelineSpec> pipeline_spec(const std::string& pipeline) = 0;
};

}  // namespace framefuse::daemon
