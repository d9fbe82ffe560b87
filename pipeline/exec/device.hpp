#pragma once
//! Which backend a pipeline runs on. Probing never fails: a host without a driver has 0 devices.
#include <memory>
#include <string>

#include "pipeline/exec/executor.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

struct CudaProbe {
  int devices = 0;      //!< usable CUDA devices
  std::string detail;   //!< why none, or the first device's name
};

//! Asks the CUDA runtime (when built with CUDA) how many devices there are.
CudaProbe probe_cuda();

//! The backend `want` resolves to on this host: Auto -> Cuda when a device exists, else Cpu.
//! Throws DeviceError when Cuda is requested but not available.
DeviceSpec resolve_device(const DeviceSpec& want, const CudaProbe& probe);

//! An executor for a resolved device. `cpu_threads` 0 = all hardware threads.
std::unique_ptr<Executor> make_executor(const DeviceSpec& device, int cpu_threads = 0);

//! "cpu", "cuda:0"
std::string to_string(const DeviceSpec& d);

}  // namespace framefuse
