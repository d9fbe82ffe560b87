//! framefused entry point: parse the command line, load the config, run the App.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "config/load.hpp"
#include "daemon/app.hpp"
#include "daemon/bench.hpp"
#include "daemon/cli.hpp"
#include "daemon/crash_report.hpp"
#include "daemon/logging.hpp"
#include "daemon/version.hpp"
#include "pipeline/decode/ffmpeg_log.hpp"
#include "pipeline/error.hpp"

namespace {

using framefuse::daemon::Command;

int fail(int status, const std::string& message) {
  std::fprintf(stderr, "framefused: %s\n", message.c_str());
  return status;
}

//! `framefused bench`: the table on stdout, the JSON to --json; pipeline logs only from warn up.
int bench(const framefuse::daemon::BenchOptions& options) {
  namespace ff = framefuse;
  ff::daemon::setup_logging("warn", ff::daemon::LogFormat::Text);
  ff::route_ffmpeg_logs();
  std::ofstream json;   // opened first: a bad path fails before the measuring
  if (options.json_path) {
    json.open(*options.json_path);
    if (!json) return fail(2, "--json: cannot write '" + *options.json_path + "'");
  }
  ff::daemon::BenchResult result;
  try {
    result = ff::daemon::run_bench(options);
  } catch (const std::invalid_argument& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
  std::cout << ff::daemon::format_bench_table(result);
  if (json.is_open() && !(json << ff::daemon::format_bench_json(result)).flush())
    return fail(1, "--json: cannot write '" + *options.json_path + "'");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace ff = framefuse;
  ff::daemon::install_crash_report();
  ff::daemon::CliOptions cli;
  try {
    cli = ff::daemon::parse_cli(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    return fail(2, e.what());
  }
  switch (cli.command) {
    case Command::Help: std::cout << ff::daemon::usage(); return 0;
    case Command::Version:
      std::cout << "framefused " << ff::kVersion << " (" << ff::kBuildType << ", CUDA "
                << (ff::kBuiltWithCuda ? "enabled" : "disabled") << ")\n";
      return 0;
    case Command::PrintDefaultConfig: std::cout << ff::config::default_config_yaml(); return 0;
    case Command::CheckConfig:
      try {
        const auto c = ff::config::load_file(cli.config_path);
        std::cout << cli.config_path << ": ok (" << c.pipelines.size() << " pipeline(s))\n";
        return 0;
      } catch (const std::exception& e) {
        return fail(2, e.what());
      }
    case Command::Bench: return bench(cli.bench);
    case Command::Run: break;
  }

  // Signals are taken synchronously by App::run (sigtimedwait): block them before any thread exists
  // so every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ff::config::DaemonConfig config;
  try {
    config = ff::config::load_file(cli.config_path);
    ff::daemon::setup_logging(cli.log_level.value_or(config.log.level),
                              config.log.format == ff::config::LogConfig::Format::Json ? ff::daemon::LogFormat::Json
                                                                                      : ff::daemon::LogFormat::Text);
    ff::route_ffmpeg_logs();
  } catch (const std::exception& e) {
    return fail(2, e.what());
  }
  try {
    ff::daemon::App app(std::move(config), {cli.device, cli.log_level, cli.http_bind, cli.http_port, cli.no_http});
    return app.run();
  } catch (const ff::ConfigError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());   // once, in the log's format (logging is set up by now)
    return 1;
  }
}
