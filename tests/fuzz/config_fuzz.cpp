// Fuzz target: the YAML config loader (config/load.cpp), which reads what users write and what a
// SIGHUP reload hands over. Properties: every input either loads or is refused with one ConfigError
// whose one-line message starts with the file's name (nothing else thrown, no crash), and a config
// that loads has pipelines with unique names. Relative paths resolve as from config/examples/ of a
// scratch tree whose samples/ holds (empty) clips, so the examples and tests/data/bad_configs seed it.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>
#include <unistd.h>

#include "config/load.hpp"
#include "pipeline/error.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {

//! The scratch tree, made on first use and removed when the process exits.
struct ScratchTree {
  std::filesystem::path root =
      std::filesystem::temp_directory_path() / ("framefuse-config-fuzz-" + std::to_string(getpid()));
  ScratchTree() {
    std::filesystem::create_directories(root / "config" / "examples");
    std::filesystem::create_directories(root / "samples");
    for (const char* clip : {"sample_720p.mp4", "sample_1080p.mp4"}) std::ofstream(root / "samples" / clip).put('\0');
  }
  ~ScratchTree() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};

std::filesystem::path base_dir() {
  static const ScratchTree tree;
  return tree.root / "config" / "examples";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using framefuse::fuzz::check;
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = framefuse::config::load_string(yaml, "fuzz.yaml", base_dir());
    check(!config.pipelines.empty(), "a config loaded without pipelines");
    std::set<std::string> names;
    for (const auto& p : config.pipelines) check(names.insert(p.name).second, "two pipelines share a name");
  } catch (const framefuse::ConfigError& e) {
    const std::string_view what = e.what();
    check(what.starts_with("fuzz.yaml"), "a ConfigError that does not name the file");
    check(what.find('\n') == std::string_view::npos, "a ConfigError of more than one line");
  }
  return 0;
}
