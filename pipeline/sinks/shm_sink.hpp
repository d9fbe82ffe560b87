#pragma once
//! Writes each frame's output tensors into a shared-memory ring (layout and protocol: shm_ring.hpp)
//! that processes on the same host map and read without a copy through the kernel.
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/sinks/ring_sink.hpp"

namespace framefuse {

class ShmSink final : public RingSink {
 public:
  //! Creates /dev/shm/<name> with the tensors in its slots; throws as RingSink's constructor.
  ShmSink(const std::string& name, int32_t slots, std::vector<OutputPlan> plans, const std::string& pipeline);

 private:
  void put_tensors(uint64_t c, std::span<const std::byte* const> outputs) override;
};

}  // namespace framefuse
