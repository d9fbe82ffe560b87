#pragma once
//! Which backend a pipeline runs on. Probing never fails: a host without a driver has 0 devices.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pipeline/exec/executor.hpp"
#include "pipeline/spec.hpp"


namespace framefuse {

struct CudaProbe {
  int devices = 0;      //!< usable CUDA devices
  std::string detail;   //!< why none, or the first device's name
};

//! Asks the CUDA runtime (when built with CUDA) how many devices there are.
CudaProbe probe_cuda();

//! Memory of one CUDA device, bytes.
struct GpuMemory {
  int32_t device = 0;   //!< CUDA device index
  uint64_t used_bytes = 0, total_bytes = 0;
  bool operator==(const GpuMemory&) const = default;
};

//! Used and total memory (cudaMemGetInfo) of each listed CUDA device, in that order; devices the
//! runtime cannot query are left out. Empty when built without CUDA. Only devices already in use
//! should be listed: querying one creates its CUDA context. The calling thread's current device is
//! restored.
std::vector<GpuMemory> gpu_memory(std::span<const int32_t> devices);

//! The backend `want` resolves to on this host: Auto -> Cuda when a device exists, else Cpu.
//! Throws DeviceError when Cuda is requested but not available.
DeviceSpec resolve_device(const DeviceSpec& want, const CudaProbe& probe);

//! An executor for a resolved device. `cpu_threads` 0 = all hardware threads. `host_outputs`
//! false: a CUDA executor leaves the outputs in device memory (Completion::on_device), for sinks
//! that read none (reads_host_outputs()); the CPU executor writes host memory either way.
std::unique_ptr<Executor> make_executor(const DeviceSpec& device, int cpu_threads = 0, bool host_outputs = true);

//! "cpu", "cuda:0"
std::string to_string(const DeviceSpec& d);

}  // namespace framefuse
