#include "pipeline/sinks/shm_sink.hpp"

#include <cstring>
#include <spdlog/fmt/fmt.h>

namespace framefuse {

ShmSink::ShmSink(const std::string& name, int32_t slots, std::vector<OutputPlan> plans, const std::string& pipeline)
    : RingSink(name, slots, std::move(plans), pipeline, shm::RingMemory::Host,
               fmt::format("pipeline '{}': sink shm '{}'", pipeline, name)) {
  publish();
}

void ShmSink::put_tensors(uint64_t c, std::span<const std::byte* const> outputs) {
  std::byte* const slot_base = slot(c);
  for (size_t k = 0; k < outputs.size(); ++k)
    std::memcpy(slot_base + header().output[k].offset, outputs[k], header().output[k].bytes);
}

}  // namespace framefuse
