#pragma once
//! Helpers of the tests that decode media: temporary folders, clips made with the ffmpeg CLI, and
//! frame planes without their row padding.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/decode/decoded_frame.hpp"

namespace framefuse::test {

using Planes = std::vector<std::vector<uint8_t>>;

inline bool have_ffmpeg() { return std::system("ffmpeg -version >/dev/null 2>&1") == 0; }

//! A fresh folder in the system's temporary folder, removed with its contents.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "framefuse_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

//! Runs the ffmpeg CLI quietly with `args`; a failure fails the test.
inline void ffmpeg(const std::string& args) {
  const std::string cmd = "ffmpeg -hide_banner -loglevel error -nostdin -y " + args;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

//! Rows of every plane of `f` (host memory), without pitch padding, in the ops' plane layout.
inline Planes tight_planes(const DecodedFrame& f) {
  Planes out;
  for (int i = 0; i < ops::plane_count(f.view.format); ++i) {
    const auto s = ops::plane_shape(f.view.format, f.view.width, f.view.height, i);
    std::vector<uint8_t> p;
    for (int y = 0; y < s.rows; ++y) {
      const uint8_t* row = f.view.data[i] + ptrdiff_t(y) * f.view.pitch[i];
      p.insert(p.end(), row, row + s.row_bytes);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace framefuse::test
