#pragma once
//! Prometheus text exposition (format 0.0.4) of the daemon and its pipelines: `framefuse_` prefix
//! (and the client libraries' standard `process_` families for the process itself), base units,
//! one HELP/TYPE block per family, labels limited to pipeline, output, reason, state, result,
//! decoder, condition, device (cuda:N), group (batch group).
#include <span>
#include <string>

#include "daemon/http/status_source.hpp"

namespace framefuse::daemon {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string render_metrics(const DaemonSnapshot& daemon, std::span<const PipelineSnapshot> pipelines);

}  // namespace framefuse::daemon
