#include "daemon/cli.hpp"

#include <cstdint>
#include <stdexcept>

#include "config/load.hpp"
#include "daemon/logging.hpp"

namespace framefuse::daemon {

std::string usage() {
  return R"(framefused - real-time video preprocessing daemon

Usage:
  framefused run --config FILE [--device auto|cpu|cuda[:N]] [--log-level LEVEL]
                               [--http-bind ADDRESS] [--http-port PORT] [--no-http]
  framefused check-config FILE       validate a config file and exit (0 = valid)
  framefused print-default-config    print every config key with its default
  framefused bench --clip FILE [--streams N] [--frames N] [--decoder auto|nvdec|cpu]
                   [--device auto|cpu|cuda[:N]] [--json FILE] [--live N [--live-seconds S] [--churn]]
                   [--hybrid [--nvdec-fps F] [--cpu-fps F]]
                                     decode ceiling vs full pipeline on N concurrent streams
                                     (default 1 stream x 600 frames; classify + detect outputs);
                                     CUDA: executor submit cost, device times, memory per stream;
                                     --live N: the most streams (<= N) held at the clip's rate;
                                     --churn: beside a source reopening the clip every 10 frames;
                                     --hybrid: streams spread over NVDEC and the cores, vs each alone
                                     (capacities as config `decode:`, 1080p fps; default the daemon's)
  framefused --help | --version

Signals: SIGINT/SIGTERM drain in-flight frames and stop; SIGHUP reloads the config.
Exit status: 0 success, 1 runtime failure, 2 bad usage or invalid config.
)";
}

namespace {

//! `v` as an integer in [lo, hi], else std::invalid_argument naming `flag` and `what` it must be.
int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi, const char* what) {
  size_t used = 0;
  int64_t n = lo - 1;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size() || n < lo || n > hi)
    throw std::invalid_argument(flag + ": '" + v + "' is not " + what);
  return n;
}

DecoderKind parse_decoder(const std::string& v) {
  if (v == "auto") return DecoderKind::Auto;
  if (v == "nvdec") return DecoderKind::Nvdec;
  if (v == "cpu") return DecoderKind::Cpu;
  throw std::invalid_argument("--decoder: '" + v + "' is not auto, nvdec or cpu");
}

}  // namespace

CliOptions parse_cli(const std::vector<std::string>& args) {
  CliOptions o;
  if (args.empty()) throw std::invalid_argument("missing command (try --help)");
  size_t i = 0;
  const std::string& cmd = args[i++];
  const bool help = cmd == "--help" || cmd == "-h" || cmd == "help";
  if (help || cmd == "--version" || cmd == "-V" || cmd == "version") {
    if (i < args.size()) throw std::invalid_argument("unexpected argument '" + args[i] + "' after " + cmd);
    o.command = help ? Command::Help : Command::Version;
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
        try {
          config::parse_device(*o.device);
        } catch (const std::exception& e) {
          throw std::invalid_argument(flag + ": " + e.what());
        }
      } else if (flag == "--log-level") {
        o.log_level = value(flag);
        try {
          check_log_level(*o.log_level);
        } catch (const std::exception& e) {
          throw std::invalid_argument(flag + ": " + e.what());
        }
      } else if (flag == "--http-bind") {
        o.http_bind = value(flag);
        if (!config::is_ip_address(*o.http_bind))
          throw std::invalid_argument(flag + ": '" + *o.http_bind + "' is not an IPv4 or IPv6 address");
      } else if (flag == "--http-port") {
        o.http_port = static_cast<int>(parse_int(flag, value(flag), 0, 65535, "a port number (0-65535)"));
      } else if (flag == "--no-http") {
        o.no_http = true;
      } else {
        throw std::invalid_argument("unknown option '" + flag + "' for run (try --help)");
      }
    }
    if (o.config_path.empty()) throw std::invalid_argument("run needs --config FILE");
  } else if (cmd == "bench") {
    o.command = Command::Bench;
    BenchOptions& b = o.bench;
    bool live_seconds = false, fps = false;   // given: they only mean something with --live, --hybrid
    while (i < args.size()) {
      const std::string& flag = args[i++];
      if (flag == "--clip") {
        b.clip = value(flag);
      } else if (flag == "--streams") {
        b.streams = static_cast<int32_t>(parse_int(flag, value(flag), 1, 256, "a stream count (1-256)"));
      } else if (flag == "--frames") {
        b.frames = parse_int(flag, value(flag), 1, 1'000'000'000, "a frame count (1-1000000000)");
      } else if (flag == "--decoder") {
        b.decoder = parse_decoder(value(flag));
      } else if (flag == "--device") {
        const std::string& v = value(flag);
        try {
          b.device = config::parse_device(v);
        } catch (const std::exception& e) {
          throw std::invalid_argument(std::string("--device: ") + e.what());
        }
      } else if (flag == "--json") {
        b.json_path = value(flag);
      } else if (flag == "--live") {
        b.live_streams = static_cast<int32_t>(parse_int(flag, value(flag), 1, 1024, "a stream count (1-1024)"));
      } else if (flag == "--live-seconds") {
        b.live_seconds = static_cast<int32_t>(parse_int(flag, value(flag), 1, 3600, "seconds (1-3600)"));
        live_seconds = true;
      } else if (flag == "--churn") {
        b.churn = true;
      } else if (flag == "--hybrid") {
        b.hybrid = true;
      } else if (flag == "--nvdec-fps" || flag == "--cpu-fps") {
        (flag == "--nvdec-fps" ? b.nvdec_fps : b.cpu_fps) =
            double(parse_int(flag, value(flag), 1, 1'000'000, "1080p frames per second (1-1000000)"));
        fps = true;
      } else {
        throw std::invalid_argument("unknown option '" + flag + "' for bench (try --help)");
      }
    }
    if (b.clip.empty()) throw std::invalid_argument("bench needs --clip FILE");
    if (b.churn && b.live_streams == 0)
      throw std::invalid_argument("--churn needs --live N (it runs in the live trials)");
    if (live_seconds && b.live_streams == 0)
      throw std::invalid_argument("--live-seconds needs --live N (the live trials' length)");
    if (fps && !b.hybrid) throw std::invalid_argument("--nvdec-fps and --cpu-fps need --hybrid (its capacities)");
  } else {
    throw std::invalid_argument("unknown command '" + cmd + "' (try --help)");
  }
  if (i < args.size()) throw std::invalid_argument("unexpected argument '" + args[i] + "'");
  return o;
}

}  // namespace framefuse::daemon
