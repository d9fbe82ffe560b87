#pragma once
//! What the shm and cuda_ipc sinks share: the ring's shared-memory object (layout and protocol:
//! shm_ring.hpp), created anew by its one writer, and the slot protocol of each frame. Where a
//! frame's tensors go is the sink's own (put_tensors()). Never blocks the pipeline: readers that fall
//! more than `slots` frames behind lose the oldest ones.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/sinks/shm_ring.hpp"
#include "pipeline/sinks/sink.hpp"

namespace framefuse {

class RingSink : public Sink {
 public:
  //! Marks the ring closed and removes its name, unless a newer sink took the name over; mappings
  //! stay valid for readers that have one.
  ~RingSink() override;
  RingSink(const RingSink&) = delete;
  RingSink& operator=(const RingSink&) = delete;

  //! A frame placed here is written in place: its slot is taken now (readers see it as being
  //! written until its write()). Empty for host rings (shm::RingMemory::Host). Throws
  //! SinkError when more frames are placed and not yet written than the ring has slots.
  std::span<std::byte* const> place_outputs(int64_t frame_index) final;
  void write(int64_t frame_index, std::span<const std::byte* const> outputs) final;
  //! Kept for the write() of the same frame, which puts it in the frame's slot (callers give a
  //! frame's record before its tensors).
  void write_control(int64_t frame_index, const control::ControlRecord& record) final;
  //! Marks the ring closed: readers know no frame follows (the pipeline stops, or sets up again
  //! with a new sink).
  void flush() final;

 protected:
  //! Creates /dev/shm/<name> anew for tensors in `memory` (a stale object of that name, left by a
  //! writer that died, is replaced; readers still mapping it keep their mapping), with every field
  //! of the header but the magic: readers ignore the object until publish(). `where` starts every
  //! error message. Throws ConfigError (a name that is not one plain file name, slots < 1, more
  //! outputs or dimensions than the ring describes) or SinkError (the object cannot be created or
  //! sized, e.g. /dev/shm full).
  RingSink(const std::string& name, int32_t slots, std::vector<OutputPlan> plans, const std::string& pipeline,
           shm::RingMemory memory, std::string where);
  //! Makes the ring visible to readers; the derived constructor's last step, once the header is complete.
  void publish();
  //! Puts frame c's tensors (outputs[k] for output k) into slot c % slots: header().output[k]
  //! says where in the slot (an output already there, placed by place_outputs(), stays). Complete
  //! when it returns. Throws SinkError.
  virtual void put_tensors(uint64_t c, std::span<const std::byte* const> outputs) = 0;
  //! Slot c % slots in device memory, where outputs are placed: rings of memory Cuda override it.
  virtual std::byte* device_slot(uint64_t /*c*/) { return nullptr; }

  shm::ShmHeader& header() { return *reinterpret_cast<shm::ShmHeader*>(base_); }
  //! Slot c % slots of the shared-memory object.
  std::byte* slot(uint64_t c) { return base_ + shm::kShmHeaderBytes + (c % header().slots) * header().slot_bytes; }
  const std::vector<OutputPlan>& plans() const { return plans_; }
  const std::string& where() const { return where_; }

 private:
  uint64_t begin_frame();

  std::string name_;   //!< with the leading '/' shm_open wants
  std::vector<OutputPlan> plans_;
  std::string where_;
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;       //!< of the whole object
  uint64_t inode_ = 0;     //!< of the object created: the name is ours while it names this inode
  uint64_t written_ = 0;   //!< frames written or placed: the next one's c
  std::optional<std::pair<int64_t, control::ControlRecord>> control_;   //!< a record and its frame, until written
  // Frames placed and not yet written: c placed_first_ .. placed_first_ + placed_ - 1, frame
  // placed_frames_[c % slots] each (sized at construction: nothing allocates per frame).
  uint64_t placed_first_ = 0;
  uint32_t placed_ = 0;
  std::vector<int64_t> placed_frames_;
  std::vector<std::byte*> placed_outs_;   //!< the last place_outputs()' addresses
};

//! Whether `name` can name a ring: 1-200 of letters, digits, '.', '_', '-', not starting with '.'.
bool valid_shm_name(const std::string& name);

}  // namespace framefuse
