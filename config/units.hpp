#pragma once
//! Units in config values, without YAML. Each parser throws ConfigError with a one-line message
//! about the text alone; the loader adds file, line and key.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace framefuse::config {

//! "100us", "250ms", "5s", "1.5s", "1m", "2h": a non-negative decimal number and a unit, exact to
//! the microsecond. A plain number is rejected: the unit is required.
std::chrono::microseconds parse_duration(std::string_view text);

//! "8192" (bytes), "512B", "8KiB", "64MiB", "1GiB", "10kB", "5MB", "1GB": whole bytes.
uint64_t parse_size(std::string_view text);

//! The shortest exact spelling parse_duration reads back: 1500ms -> "1500ms", 60s -> "1m".
std::string format_duration(std::chrono::microseconds d);

}  // namespace framefuse::config
