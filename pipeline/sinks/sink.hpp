#pragma once
//! Where a pipeline's output tensors go. A sink is driven by one thread (the pipeline's process
//! thread): write() per frame in frame order, flush() when the pipeline stops.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "pipeline/control/control_step.hpp"
#include "pipeline/error.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

//! A sink that cannot store what it was given (cannot create a folder, disk full); names the path.
struct SinkError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Sink {
 public:
  virtual ~Sink() = default;
  //! One frame: outputs[k] points at output k's tensor, plans[k].bytes_per_frame bytes, host memory
  //! that only has to stay valid during the call (device addresses, not to be read, for a sink
  //! whose spec !reads_host_outputs()). Throws SinkError.
  virtual void write(int64_t frame_index, std::span<const std::byte* const> outputs) = 0;
  //! Where frame `frame_index`'s outputs are to be made, for a sink that keeps frames in device
  //! memory and publishes them in place (cuda_ipc): the executor writes them there
  //! (Executor::submit's `device_outs`), and the frame's write() publishes them without a copy.
  //! Empty: write() takes the outputs wherever they were made. Called in frame order before the
  //! frame's processing is submitted; each call's frame is written (or the sink dropped) before
  //! more frames than the sink can hold are placed. The span stays valid until the next call.
  virtual std::span<std::byte* const> place_outputs(int64_t /*frame_index*/) { return {}; }
  //! The control record (statistics, gains, crop windows, health) that came with frame
  //! `frame_index`, given before that frame's write(); `record.iteration` says which frame it was
  //! measured on. Sinks that keep no metadata ignore it.
  virtual void write_control(int64_t /*frame_index*/, const control::ControlRecord& /*record*/) {}
  //! Completes everything written so far (partial stacked files are finished). Throws SinkError.
  virtual void flush() = 0;
};

//! Whether the sink `spec` asks for reads the output tensors from host memory. False for the null
//! sink and the cuda_ipc sink: their pipelines leave the outputs in device memory (no download per
//! frame; cuda_ipc copies them device to device into its ring).
bool reads_host_outputs(const SinkSpec& spec);

//! "npy", "shm", "cuda_ipc", "null": the sink's `type` in the config.
const char* sink_type_name(SinkKind kind);

//! Where the sink writes: an npy sink's folder, a ring's /dev/shm/<name>; empty for null.
std::string sink_target(const SinkSpec& spec);

//! Throws ConfigError naming `pipeline` when the sink `spec` cannot take outputs made on the
//! resolved `device` (cuda_ipc needs a CUDA device, and a build with CUDA).
void check_sink_device(const SinkSpec& spec, const DeviceSpec& device, const std::string& pipeline);

//! The sink `spec` asks for, for outputs planned as `plans` (copied) and made on the resolved
//! `device`. Throws ConfigError naming `pipeline` for specs no sink can honour (check_sink_device()),
//! SinkError when the output folders or rings cannot be created.
std::unique_ptr<Sink> make_sink(const SinkSpec& spec, std::span<const OutputPlan> plans, const std::string& pipeline,
                                const DeviceSpec& device);

}  // namespace framefuse
