#pragma once
//! Process-wide logging setup: spdlog to stderr (journald picks it up), text or JSON lines.
#include <string>

namespace framefuse::daemon {

enum class LogFormat { Text, Json };

//! Throws std::invalid_argument for an unknown level name.
void setup_logging(const std::string& level, LogFormat format);

//! Throws std::invalid_argument naming `level` and the level names when it is none of them.
void check_log_level(const std::string& level);

}  // namespace framefuse::daemon
