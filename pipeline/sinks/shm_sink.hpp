#pragma once
//! Writes each frame's output tensors into a shared-memory ring (layout and protocol: shm_ring.hpp)
//! that processes on the same host map and read without a copy through the kernel. Never blocks
//! the pipeline: readers that fall more than `slots` frames behind lose the oldest ones.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "pipeline/sinks/sink.hpp"

namespace framefuse {

class ShmSink final : public Sink {
 public:
  //! Creates /dev/shm/<name> anew (a stale object of that name, left by a writer that died, is
  //! replaced; readers still mapping it keep their mapping). Throws ConfigError (a name that is
  //! not one plain file name, slots < 1, more outputs or dimensions than the ring describes) or
  //! SinkError (the object cannot be created or sized, e.g. /dev/shm full).
  ShmSink(std::string name, int32_t slots, std::vector<OutputPlan> plans, std::string pipeline);
  //! Marks the ring closed and removes its name, unless a newer sink took the name over; mappings
  //! stay valid for readers that have one.
  ~ShmSink() override;
  ShmSink(const ShmSink&) = delete;
  ShmSink& operator=(const ShmSink&) = delete;

  void write(int64_t frame_index, std::span<const std::byte* const> outputs) override;
  //! Kept for the write() of the same frame, which puts it in the frame's slot (callers give a
  //! frame's record before its tensors).
  void write_control(int64_t frame_index, const control::ControlRecord& record) override;
  //! Marks the ring closed: readers know no frame follows (the pipeline stops, or sets up again
  //! with a new sink).
  void flush() override;

 private:
  std::string name_;   //!< with the leading '/' shm_open wants
  std::vector<OutputPlan> plans_;
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;       //!< of the whole object
  uint64_t inode_ = 0;     //!< of the object created: the name is ours while it names this inode
  uint64_t written_ = 0;   //!< frames written: the next one's c
  std::optional<std::pair<int64_t, control::ControlRecord>> control_;   //!< a record and its frame, until written
};

//! Whether `name` can name a shared-memory ring: 1-200 of letters, digits, '.', '_', '-', not
//! starting with '.'.
bool valid_shm_name(const std::string& name);

}  // namespace framefuse
