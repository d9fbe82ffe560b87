#include "daemon/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

#include "pipeline/util/text_escape.hpp"

namespace framefuse::daemon {
namespace {

//! %j: the message as a JSON string literal (pipeline/util/text_escape.hpp's json_string).
class JsonMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string text = json_string(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessage>(); }
};

}  // namespace

void check_log_level(const std::string& level) {
  if (spdlog::level::from_str(level) == spdlog::level::off && level != "off")
    throw std::invalid_argument("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
}

void setup_logging(const std::string& level, LogFormat format) {
  check_log_level(level);
  const auto lvl = spdlog::level::from_str(level);
  auto logger = spdlog::get("framefused");
  if (!logger) logger = spdlog::stderr_logger_mt("framefused");
  spdlog::set_default_logger(logger);
  spdlog::set_level(lvl);
  if (format == LogFormat::Json) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonMessage>('j').set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":%j})");
    spdlog::set_formatter(std::move(f));
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
}

}  // namespace framefuse::daemon
