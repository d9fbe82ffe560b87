#include "pipeline/sinks/sink.hpp"

#include <spdlog/fmt/fmt.h>

#include "pipeline/sinks/npy_sink.hpp"
#include "pipeline/sinks/shm_sink.hpp"
#if FRAMEFUSE_HAVE_CUDA
#include "pipeline/sinks/cuda_ipc_sink.hpp"
#endif

namespace framefuse {
namespace {

//! Discards outputs (benchmarks measure the pipeline without storage).
class NullSink final : public Sink {
 public:
  void write(int64_t, std::span<const std::byte* const>) override {}
  void flush() override {}
};

}  // namespace

bool reads_host_outputs(const SinkSpec& spec) { return spec.kind != SinkKind::Null && spec.kind != SinkKind::CudaIpc; }

const char* sink_type_name(SinkKind kind) {
  switch (kind) {
    case SinkKind::Npy: return "npy";
    case SinkKind::Shm: return "shm";
    case SinkKind::CudaIpc: return "cuda_ipc";
    case SinkKind::Null: break;
  }
  return "null";
}

std::string sink_target(const SinkSpec& spec) {
  switch (spec.kind) {
    case SinkKind::Npy: return spec.directory;
    case SinkKind::Shm:
    case SinkKind::CudaIpc: return "/dev/shm/" + spec.shm_name;
    case SinkKind::Null: break;
  }
  return {};
}

void check_sink_device(const SinkSpec& spec, const DeviceSpec& device, const std::string& pipeline) {
  if (spec.kind != SinkKind::CudaIpc) return;
#if FRAMEFUSE_HAVE_CUDA
  if (device.kind != DeviceKind::Cuda)
    throw ConfigError(fmt::format("pipeline '{}': sink cuda_ipc needs a CUDA device; the pipeline runs on {}", pipeline,
                                  device.kind == DeviceKind::Cpu ? "the CPU" : "an unresolved device"));
#else
  (void)device;
  throw ConfigError(fmt::format("pipeline '{}': sink cuda_ipc needs a build with CUDA; this framefused has none", pipeline));
#endif
}

std::unique_ptr<Sink> make_sink(const SinkSpec& spec, std::span<const OutputPlan> plans, const std::string& pipeline,
                                const DeviceSpec& device) {
  check_sink_device(spec, device, pipeline);
  std::vector<OutputPlan> copied(plans.begin(), plans.end());
  switch (spec.kind) {
    case SinkKind::Null: return std::make_unique<NullSink>();
    case SinkKind::Shm: return std::make_unique<ShmSink>(spec.shm_name, spec.slots, std::move(copied), pipeline);
    case SinkKind::Npy:
      return std::make_unique<NpySink>(spec.directory, std::move(copied), spec.frames_per_file, pipeline);
    case SinkKind::CudaIpc: break;
  }
#if FRAMEFUSE_HAVE_CUDA
  return std::make_unique<CudaIpcSink>(device.index, spec.shm_name, spec.slots, std::move(copied), pipeline);
#else
  throw ConfigError(fmt::format("pipeline '{}': no sink of this type in this build", pipeline));   // check_sink_device() threw already
#endif
}

}  // namespace framefuse
