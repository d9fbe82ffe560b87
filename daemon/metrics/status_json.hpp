#pragma once
//! The /status document: daemon state plus one object per pipeline, as JSON. Every string is
//! escaped; source URIs and errors are passed through redact_uri once more before they leave.
#include <span>
#include <string>

#include "daemon/http/status_source.hpp"

namespace framefuse::daemon {

std::string render_status_json(const DaemonSnapshot& daemon, std::span<const PipelineSnapshot> pipelines);

}  // namespace framefuse::daemon
