#include "pipeline/sinks/cuda_ipc_sink.hpp"

#include <cstring>
#include <spdlog/fmt/fmt.h>

#include "pipeline/memory/frame_memory.hpp"

namespace framefuse {
namespace {

//! Throws SinkError("<where>: <what>: <cuda error string>") unless err is cudaSuccess.
void check(cudaError_t err, const std::string& where, const char* what) {
  if (err != cudaSuccess) throw SinkError(fmt::format("{}: {}: {}", where, what, cudaGetErrorString(err)));
}

}  // namespace

CudaIpcSink::CudaIpcSink(int device, const std::string& name, int32_t slots, std::vector<OutputPlan> plans,
                         const std::string& pipeline)
    : RingSink(name, slots, std::move(plans), pipeline, shm::RingMemory::Cuda,
               fmt::format("pipeline '{}': sink cuda_ipc '{}'", pipeline, name)),
      device_(device) {
  if (slots < kMinDeviceRingSlots)   // the frames in flight are made in their slots
    throw ConfigError(fmt::format("{}: slots must be at least {}, got {}", where(), kMinDeviceRingSlots, slots));
  check(cudaSetDevice(device_), where(), "cudaSetDevice");
  shm::ShmHeader& h = header();
  void* ring = nullptr;
  check(cudaMalloc(&ring, size_t(h.slots) * h.device_slot_bytes), where(), "cudaMalloc of the device ring");
  ring_ = cuda::DeviceBuffer(ring, size_t(h.slots) * h.device_slot_bytes);
  cudaStream_t s{};
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), where(), "cudaStreamCreate");
  stream_ = cuda::Stream(s);
  // Zeroed like the host ring's slots: a reader never sees another allocation's bytes. Finished
  // before the first kernel (on the executor's non-blocking stream) writes into a slot.
  check(cudaMemsetAsync(ring, 0, ring_.size(), stream_), where(), "cudaMemset of the device ring");
  check(cudaStreamSynchronize(stream_), where(), "cudaMemset of the device ring");
  cudaIpcMemHandle_t handle{};
  check(cudaIpcGetMemHandle(&handle, ring), where(), "cudaIpcGetMemHandle");
  static_assert(sizeof handle == sizeof h.ipc_handle);
  std::memcpy(h.ipc_handle, &handle, sizeof handle);
  check(cudaDeviceGetPCIBusId(h.pci_bus_id, sizeof h.pci_bus_id - 1, device_), where(), "cudaDeviceGetPCIBusId");
  publish();
}

CudaIpcSink::~CudaIpcSink() {
  flush();
  cudaSetDevice(device_);
}

std::byte* CudaIpcSink::device_slot(uint64_t c) {
  return ring_.as() + (c % header().slots) * header().device_slot_bytes;
}

void CudaIpcSink::put_tensors(uint64_t c, std::span<const std::byte* const> outputs) {
  const shm::ShmHeader& h = header();
  std::byte* const slot_base = device_slot(c);
  bool copied = false;
  for (size_t k = 0; k < outputs.size(); ++k) {
    std::byte* const dst = slot_base + h.output[k].offset;
    if (outputs[k] == dst) continue;   // made in place
    if (!copied) check(cudaSetDevice(device_), where(), "cudaSetDevice");
    check(cudaMemcpyAsync(dst, outputs[k], h.output[k].bytes, cudaMemcpyDefault, stream_), where(),
          "copy into the device ring");
    copied = true;
  }
  if (copied) check(cudaStreamSynchronize(stream_), where(), "copy into the device ring");
}

}  // namespace framefuse
