#pragma once
//! Helpers of the tests that decode media: temporary folders, clips made with the ffmpeg CLI or
//! remuxed with FFmpeg's libraries, and frame planes without their row padding.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "pipeline/decode/decoded_frame.hpp"

namespace framefuse::test {

using Planes = std::vector<std::vector<uint8_t>>;

inline bool have_ffmpeg() { return std::system("ffmpeg -version >/dev/null 2>&1") == 0; }

//! A clip that tools/make_sample_clip writes (`name`, e.g. "sample_720p.mp4"), under samples/ of the
//! source tree (FRAMEFUSE_SOURCE_DIR, which ctest sets; else the working folder). It may not exist.
inline std::filesystem::path sample_clip(const char* name) {
  const char* root = std::getenv("FRAMEFUSE_SOURCE_DIR");
  return std::filesystem::path(root ? root : ".") / "samples" / name;
}

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

//! Writes the video streams of `clips`, one after the other, as one MPEG-TS file at `out` (stream
//! copy with libavformat, no encoder: works with a minimal FFmpeg): each clip becomes a complete TS
//! segment and the segments are joined byte for byte, as a broadcast splice would, so a decoder
//! reading `out` meets each clip's own parameter sets (size, format) where its segment starts. At
//! most `max_frames_each` packets of each clip (-1: all; packets are cut in decode order, so every
//! kept frame stays decodable). Throws std::runtime_error naming the clip and what failed.
void concat_as_mpegts(std::span<const std::filesystem::path> clips, const std::filesystem::path& out,
                      int max_frames_each = -1);

//! Every file under `dir`, by path relative to it ("out/00000003.npy"), with its bytes: what a
//! sink wrote, to compare between runs.
std::map<std::string, std::string> read_files(const std::filesystem::path& dir);

//! The shape in a .npy (format 1.0) file's header, {} when it has none.
std::vector<int64_t> npy_shape(const std::string& npy);
//! The array bytes of a .npy (format 1.0) file, after its header.
std::span<const std::byte> npy_payload(const std::string& npy);

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
