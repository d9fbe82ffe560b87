#pragma once
//! Writes output tensors as numpy .npy (format 1.0, C order, little endian):
//!   frames_per_file == 1: <directory>/<output>/<frame index:08d>.npy, shape = plan.shape
//!   frames_per_file == N: <directory>/<output>/<first frame index:08d>.npy, shape [n, ...plan.shape],
//!                         n = N, or fewer for the file a flush() completes.
//! Files appear complete or not at all: they are written under a temporary name, then renamed.
//! Each output folder also gets a metadata.json (shape, dtype, layout, channels, normalization);
//! pipelines with control append one JSON line per frame to <directory>/control.jsonl.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/sinks/sink.hpp"

namespace framefuse {

class NpySink final : public Sink {
 public:
  //! Creates the output folders. Throws ConfigError (frames_per_file < 1, empty directory, output
  //! names that are not plain unique folder names) or SinkError (folder cannot be created).
  NpySink(std::string directory, std::vector<OutputPlan> plans, int32_t frames_per_file, std::string pipeline);
  //! Completes a partial stacked file; errors are logged, not thrown (call flush() to see them).
  ~NpySink() override;
  NpySink(const NpySink&) = delete;
  NpySink& operator=(const NpySink&) = delete;

  void write(int64_t frame_index, std::span<const std::byte* const> outputs) override;
  void write_control(int64_t frame_index, const control::ControlRecord& record) override;
  void flush() override;

 private:
  struct Output;
  std::vector<Output> outputs_;
  std::string directory_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> control_log_{nullptr, &std::fclose};   //!< control.jsonl, opened lazily
  int32_t frames_per_file_;
  std::string pipeline_;
};

}  // namespace framefuse
