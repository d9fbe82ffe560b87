#include "pipeline/exec/device.hpp"

#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"

#if FRAMEFUSE_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "pipeline/exec/cuda_executor.hpp"
#endif

namespace framefuse {

CudaProbe probe_cuda() {
#if FRAMEFUSE_HAVE_CUDA
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();   // clear the sticky-free error so later calls start clean
    return {0, cudaGetErrorString(err)};
  }
  if (n == 0) return {0, "no CUDA device"};
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  return {n, prop.name};
#else
  return {0, "built without CUDA"};
#endif
}

std::vector<GpuMemory> gpu_memory(std::span<const int32_t> devices) {
  std::vector<GpuMemory> out;
#if FRAMEFUSE_HAVE_CUDA
  int previous = 0;
  if (devices.empty() || cudaGetDevice(&previous) != cudaSuccess) {
    cudaGetLastError();
    return out;
  }
  for (const int32_t d : devices) {
    size_t free = 0, total = 0;
    if (cudaSetDevice(d) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    out.push_back({d, static_cast<uint64_t>(total - free), static_cast<uint64_t>(total)});
  }
  cudaSetDevice(previous);
#else
  (void)devices;
#endif
  return out;
}

DeviceSpec resolve_device(const DeviceSpec& want, const CudaProbe& probe) {
  switch (want.kind) {
    case DeviceKind::Cpu: return want;
    case DeviceKind::Auto: return probe.devices > 0 ? DeviceSpec{DeviceKind::Cuda, 0} : DeviceSpec{DeviceKind::Cpu, 0};
    case DeviceKind::Cuda:
      if (want.index < 0 || want.index >= probe.devices)
        throw DeviceError(fmt::format("device cuda:{} requested but {} CUDA device(s) are available ({})",
                                      want.index, probe.devices, probe.detail));
      return want;
  }
  return want;
}

std::unique_ptr<Executor> make_executor(const DeviceSpec& device, int cpu_threads, bool host_outputs) {
#if FRAMEFUSE_HAVE_CUDA
  if (device.kind == DeviceKind::Cuda)
    return std::make_unique<CudaExecutor>(device.index, CudaEngineOptions{.host_outputs = host_outputs});
#endif
  if (device.kind == DeviceKind::Cuda) throw DeviceError("this build has no CUDA backend");
  (void)host_outputs;   // the CPU executor writes host memory, where the caller's buffers are
  return make_cpu_executor(cpu_threads);
}

std::string to_string(const DeviceSpec& d) {
  switch (d.kind) {
    case DeviceKind::Auto: return "auto";
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Cuda: break;
  }
  return fmt::format("cuda:{}", d.index);
}

}  // namespace framefuse
