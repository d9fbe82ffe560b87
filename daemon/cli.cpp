#include "daemon/cli.hpp"

#include <stdexcept>

namespace framefuse::daemon {

std::string usage() {
  return R"(framefused - real-time video preprocessing daemon

Usage:
  framefused run --config FILE [--device auto|cpu|cuda[:N]] [--log-level LEVEL]
                               [--http-port PORT] [--no-http]
  framefused check-config FILE       validate a config file and exit (0 = valid)
  framefused print-default-config    print every config key with its default
  framefused --help | --version

Signals: SIGINT/SIGTERM drain in-flight frames and stop; SIGHUP reloads the config.
Exit status: 0 success, 1 runtime failure, 2 bad usage or invalid config.
)";
}

CliOptions parse_cli(const std::vector<std::string>& args) {
  CliOptions o;
  if (args.empty()) throw std::invalid_argument("missing command (try --help)");
  size_t i = 0;
  const std::string& cmd = args[i++];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    o.command = Command::Help;
    return o;
  }
  if (cmd == "--version" || cmd == "-V" || cmd == "version") {
    o.command = Command::Version;
    return o;
  }
  auto value = [&](const std::string& flag) -> const std::string& {
    if (i >= args.size()) throw std::invalid_argument("option " + flag + " needs a value");
    return args[i++];
  };
  if (cmd == "check-config") {
    o.command = Command::CheckConfig;
    if (i >= args.size()) throw std::invalid_argument("check-config needs a FILE");
    o.config_path = args[i++];
  } else if (cmd == "print-default-config") {
    o.command = Command::PrintDefaultConfig;
  } else if (cmd == "run") {
    o.command = Command::Run;
    while (i < args.size()) {
      const std::string& flag = args[i++];
      if (flag == "--config" || flag == "-c") {
        o.config_path = value(flag);
      } else if (flag == "--device") {
        o.device = value(flag);
      } else if (flag == "--log-level") {
        o.log_level = value(flag);
      } else if (flag == "--http-port") {
        const std::string& v = value(flag);
        size_t used = 0;
        int port = -1;
        try {
          port = std::stoi(v, &used);
        } catch (const std::exception&) {
        }
        if (used != v.size() || port < 0 || port > 65535)
          throw std::invalid_argument("--http-port: '" + v + "' is not a port number (0-65535)");
        o.http_port = port;
      } else if (flag == "--no-http") {
        o.no_http = true;
      } else {
        throw std::invalid_argument("unknown option '" + flag + "' for run (try --help)");
      }
    }
    if (o.config_path.empty()) throw std::invalid_argument("run needs --config FILE");
  } else {
    throw std::invalid_argument("unknown command '" + cmd + "' (try --help)");
  }
  if (i < args.size()) throw std::invalid_argument("unexpected argument '" + args[i] + "'");
  return o;
}

}  // namespace framefuse::daemon
