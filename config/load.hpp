#pragma once
//! Loading the daemon configuration from YAML. Every failure is a framefuse::ConfigError with one
//! line `<file>:<line>:<col>: <key.path>: <message>` (see config/REFERENCE.md for the keys).
#include <filesystem>
#include <string>
#include <string_view>

#include "config/schema.hpp"

namespace framefuse::config {

//! Reads and validates `path`. Relative paths inside resolve against the file's folder.
DaemonConfig load_file(const std::filesystem::path& path);

//! Validates YAML text. `name` starts error messages; relative paths resolve against `base_dir`
//! (made absolute). File sources must exist.
DaemonConfig load_string(std::string_view yaml, const std::string& name, const std::filesystem::path& base_dir);

//! A complete config showing every key with its default and a one-line comment; it loads as is
//! (one rtsp pipeline with one output).
std::string default_config_yaml();

//! "auto" | "cpu" | "cuda" (= cuda:0) | "cuda:N". Throws ConfigError naming the bad text.
DeviceSpec parse_device(std::string_view s);

//! Whether `s` is a numeric IPv4 or IPv6 address (what `http.bind` accepts).
bool is_ip_address(const std::string& s);

}  // namespace framefuse::config
