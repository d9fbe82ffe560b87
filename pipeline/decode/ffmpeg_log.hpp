#pragma once
//! Routes FFmpeg's own log output (av_log) through spdlog, credentials redacted, so library
//! messages follow the daemon's level and format instead of writing raw lines to stderr.
//! FFmpeg errors become warnings (the pipeline reports the actionable error itself), warnings
//! become debug, everything chattier trace.

namespace framefuse {

//! Installs the callback process-wide. Call once, after logging is configured.
void route_ffmpeg_logs();

}  // namespace framefuse
