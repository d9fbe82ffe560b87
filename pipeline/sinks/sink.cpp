#include "pipeline/sinks/sink.hpp"

#include "pipeline/sinks/npy_sink.hpp"
#include "pipeline/sinks/shm_sink.hpp"

namespace framefuse {
namespace {

//! Discards outputs (benchmarks measure the pipeline without storage).
class NullSink final : public Sink {
 public:
  void write(int64_t, std::span<const std::byte* const>) override {}
  void flush() override {}
};

}  // namespace

bool reads_host_outputs(const SinkSpec& spec) { return spec.kind != SinkKind::Null; }

const char* sink_type_name(SinkKind kind) {
  switch (kind) {
    case SinkKind::Npy: return "npy";
    case SinkKind::Shm: return "shm";
    case SinkKind::Null: break;
  }
  return "null";
}

std::string sink_target(const SinkSpec& spec) {
  switch (spec.kind) {
    case SinkKind::Npy: return spec.directory;
    case SinkKind::Shm: return "/dev/shm/" + spec.shm_name;
    case SinkKind::Null: break;
  }
  return {};
}

std::unique_ptr<Sink> make_sink(const SinkSpec& spec, std::span<const OutputPlan> plans, const std::string& pipeline) {
  std::vector<OutputPlan> copied(plans.begin(), plans.end());
  switch (spec.kind) {
    case SinkKind::Null: return std::make_unique<NullSink>();
    case SinkKind::Shm: return std::make_unique<ShmSink>(spec.shm_name, spec.slots, std::move(copied), pipeline);
    case SinkKind::Npy: break;
  }
  return std::make_unique<NpySink>(spec.directory, std::move(copied), spec.frames_per_file, pipeline);
}

}  // namespace framefuse
