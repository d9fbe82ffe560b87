#pragma once
//! Command line of framefused. Parsing is pure (no I/O) so it is unit-tested.
#include <optional>
#include <string>
#include <vector>

#include "daemon/bench.hpp"

namespace framefuse::daemon {

enum class Command { Run, CheckConfig, PrintDefaultConfig, Bench, Help, Version };

struct CliOptions {
  Command command = Command::Help;
  std::string config_path;
  std::optional<std::string> device;      //!< --device cpu|cuda[:N]|auto, overrides the config
  std::optional<std::string> log_level;   //!< --log-level, overrides the config
  std::optional<std::string> http_bind;   //!< --http-bind, overrides the config (e.g. 0.0.0.0 in a container)
  std::optional<int> http_port;           //!< --http-port, overrides the config (0 = ephemeral)
  bool no_http = false;                   //!< --no-http
  BenchOptions bench;                     //!< bench: its options (clip not yet checked to exist)
};

//! Throws std::invalid_argument with a one-line message on bad usage.
CliOptions parse_cli(const std::vector<std::string>& args);

std::string usage();

}  // namespace framefuse::daemon
