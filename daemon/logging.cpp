#include "daemon/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <stdexcept>

namespace framefuse::daemon {
namespace {

//! %j: the message as the body of a JSON string (quotes, backslashes, control characters escaped).
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (const char c : msg.payload) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (u < 0x20) {
        const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 15]};
        dest.append(esc, esc + sizeof(esc));
      } else {
        dest.push_back(c);
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonEscapedMessage>(); }
};

}  // namespace

void setup_logging(const std::string& level, LogFormat format) {
  const auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    throw std::invalid_argument("unknown log level '" + level + "' (trace, debug, info, warn, error, off)");
  auto logger = spdlog::get("framefused");
  if (!logger) logger = spdlog::stderr_logger_mt("framefused");
  spdlog::set_default_logger(logger);
  spdlog::set_level(lvl);
  if (format == LogFormat::Json) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonEscapedMessage>('j').set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":"%j"})");
    spdlog::set_formatter(std::move(f));
  } else {
    spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
}

}  // namespace framefuse::daemon
