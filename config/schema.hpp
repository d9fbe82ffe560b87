#pragma once
//! The daemon's typed configuration: what config/load.hpp produces from YAML and daemon/ runs.
//! Pure data; pipelines are pipeline/spec.hpp's PipelineSpec. Every value here has passed the static
//! checks of the loader; frame-size dependent checks happen in make_output_plan.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/decode/codec_cost.hpp"
#include "pipeline/spec.hpp"

namespace framefuse::config {

struct LogConfig {
  std::string level = "info";   //!< trace | debug | info | warn | error
  enum class Format : uint8_t { Text, Json } format = Format::Text;
};

struct HttpConfig {
  bool enabled = true;
  std::string bind = "127.0.0.1";               //!< IPv4 or IPv6 address literal
  uint16_t port = 9400;                         //!< 1..65535
  int max_connections = 64;                     //!< concurrent connections; more are refused
  std::chrono::milliseconds idle_timeout{30000};   //!< keep-alive connection closed when idle this long
  size_t max_header_bytes = 8192;               //!< larger request headers are rejected
  bool operator==(const HttpConfig&) const = default;
};

//! Hybrid decode (pipeline/decode/decode_balancer.hpp): what NVDEC and the cores decode, in 1080p
//! H.264 frames per second; `decoder: auto` streams of CUDA pipelines are spread over both.
struct DecodeConfig {
  //! Per GPU. Serves live streams (an H200's NVDEC held 512 1080p30 streams, 15,360 fps: all of them
  //! stay on NVDEC) and the split of unpaced files (each NVDEC session decodes ~500-600 fps; 8 files
  //! 4,126 fps on NVDEC alone, 1.04x that spread 7 + 1; tests/bench/RESULTS.md, sessions 13-14).
  double nvdec_fps = 15360;
  double cpu_fps = 0;        //!< the host's cores; 0 = auto (decode_capacity(): 100 per hardware thread)
  //! What a pixel of each codec costs against both (codec_cost.hpp): the measured table, with
  //! `codec_costs:` entries over it.
  CodecCosts codec_costs = measured_codec_costs();
  bool operator==(const DecodeConfig&) const = default;
};

//! What /readyz requires: every pipeline streaming, or at least one.
enum class ReadinessPolicy : uint8_t { All, Any };

struct DaemonConfig {
  LogConfig log;
  HttpConfig http;
  DecodeConfig decode;
  DeviceSpec device;                            //!< default for pipelines without their own
  ReadinessPolicy readiness = ReadinessPolicy::All;
  std::chrono::milliseconds drain_timeout{5000};   //!< shutdown: time for queued frames to finish
  int cpu_threads = 0;                          //!< CPU executor threads; 0 = one per core
  std::vector<BatchGroupSpec> batching;         //!< batch groups, each with at least one member pipeline
  std::vector<PipelineSpec> pipelines;          //!< at least one; paths already absolute
  std::string path;                             //!< absolute config file path (load_string: its name)
};

}  // namespace framefuse::config
