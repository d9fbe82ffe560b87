#pragma once
//! Keeps each frame's output tensors in a ring in GPU memory that other processes on the host
//! open with CUDA IPC and read in place: PyTorch or CuPy tensors over the ring's slots, no copy
//! through the host (layout and protocol: shm_ring.hpp, memory Cuda; tools/framefuse_shm.py).
//! A pipeline's own executor writes each frame's outputs straight into its slot
//! (place_outputs()); outputs made elsewhere (a batch group's) are copied in. The ring's
//! description and slot protocol live in /dev/shm/<name>, as for the shm sink.
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/sinks/ring_sink.hpp"

namespace framefuse {

class CudaIpcSink final : public RingSink {
 public:
  //! Allocates the device ring on CUDA device `device` (one cudaMalloc of slots x the outputs,
  //! exported with cudaIpcGetMemHandle) and creates /dev/shm/<name> describing it. Throws as
  //! RingSink's constructor, and SinkError when the ring cannot be allocated or exported.
  CudaIpcSink(int device, const std::string& name, int32_t slots, std::vector<OutputPlan> plans,
              const std::string& pipeline);
  //! Closes the ring before its device memory is freed (readers must then close their handles).
  ~CudaIpcSink() override;

 private:
  //! outputs[k]: device or host memory (unified addresses). Outputs made in the slot itself
  //! (place_outputs()) stay; others are copied on the sink's stream, waited for before the slot
  //! says it is complete.
  void put_tensors(uint64_t c, std::span<const std::byte* const> outputs) override;
  std::byte* device_slot(uint64_t c) override;

  int device_;
  cuda::DeviceBuffer ring_;   //!< slots x header().device_slot_bytes
  cuda::Stream stream_;
};

}  // namespace framefuse
