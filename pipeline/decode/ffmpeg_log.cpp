#include "pipeline/decode/ffmpeg_log.hpp"

extern "C" {
#include <libavutil/log.h>
}

#include <spdlog/spdlog.h>

#include <cstdarg>
#include <regex>
#include <string>

#include "pipeline/util/log_limiter.hpp"
#include "pipeline/util/redact.hpp"

namespace framefuse {
namespace {

spdlog::level::level_enum level_for(int av_level) {
  if (av_level <= AV_LOG_ERROR) return spdlog::level::warn;
  if (av_level <= AV_LOG_WARNING) return spdlog::level::debug;
  return spdlog::level::trace;
}

void on_av_log(void* avcl, int av_level, const char* fmt, va_list args) {
  if (av_level > av_log_get_level()) return;
  const auto level = level_for(av_level);
  if (!spdlog::should_log(level)) return;
  // FFmpeg may emit one line in several calls: assemble per thread, emit at the newline.
  thread_local std::string line;
  thread_local int print_prefix = 1;
  char buf[1024];
  av_log_format_line2(avcl, av_level, fmt, args, buf, sizeof buf, &print_prefix);
  line += buf;
  if (line.empty() || line.back() != '\n') return;
  line.pop_back();
  // A camera that stays down makes FFmpeg repeat the same error on every reconnect: show each
  // distinct line (object addresses removed) at most every 30 s, with its repeat count.
  static LogLimiter limiter;
  static const std::regex address(" @ 0x[0-9a-f]+");
  const std::string text = redact_text(line);
  line.clear();
  const auto verdict = limiter.admit(std::regex_replace(text, address, ""));
  if (!verdict.show) return;
  if (verdict.repeats > 1) {
    spdlog::log(level, "ffmpeg: {} (repeated {} times)", text, verdict.repeats);
  } else {
    spdlog::log(level, "ffmpeg: {}", text);
  }
}

}  // namespace

void route_ffmpeg_logs() {
  av_log_set_level(AV_LOG_WARNING);
  av_log_set_callback(on_av_log);
}

}  // namespace framefuse
