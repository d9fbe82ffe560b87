#pragma once
//! The fused chain on one CUDA device. Per batch: frames are staged into pinned memory and copied
//! on the copy stream; the compute stream waits on that event, runs the fused launch, and the copy
//! stream brings outputs back after the kernel's event. process() waits for the outputs (host sinks).
#include <vector>

#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/exec/executor.hpp"
#include "pipeline/fused/fused_preprocess.hpp"

namespace framefuse {

class CudaExecutor final : public Executor {
 public:
  //! Binds to device `index` (its primary context). Throws DeviceError when unusable.
  explicit CudaExecutor(int index);
  std::string name() const override;
  void setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
             int max_batch) override;
  void process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) override;

 private:
  int device_;
  std::string device_name_;
  FrameInfo frame_{};
  ops::ColorParams color_{};
  size_t frame_bytes_ = 0;
  std::vector<size_t> out_bytes_;   //!< per output, per frame
  cuda::Stream copy_, compute_;
  cuda::Event uploaded_, computed_, downloaded_;
  cuda::PinnedBuffer host_in_, host_out_;
  cuda::DeviceBuffer dev_in_, dev_out_;
  FusedPreprocess fused_;
};

}  // namespace framefuse
