#pragma once
//! The fused chain on one CUDA device. Per batch, by where each frame is (FrameMemory): Host frames
//! are staged into pinned memory and copied on the copy stream, Pinned frames are copied straight
//! from the frame (cudaMemcpy2DAsync), Device frames (NVDEC surfaces) are read in place by the
//! kernel. The compute stream waits for the uploads (and, for Device frames, for NVDEC's copies on
//! the legacy default stream), runs the fused launch and records `computed_`: from that event on
//! no frame memory is read, which is when an asynchronous caller could release the frames. The
//! copy stream brings outputs back after it; process() waits for them (host sinks).
//! With control, each frame of a batch is one iteration on the compute stream (CudaControl::run:
//! control step, the fused kernel of that frame, statistics); control_record() reads the newest
//! record the device published, without synchronising.
#include <array>
#include <optional>
#include <vector>

#include "pipeline/control/control_cuda.hpp"
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
  //! All frames Host (process_frames with FrameMemory::Host each).
  void process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) override;
  void process_frames(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                      std::span<std::byte* const> outs) override;
  //! Re-plans the fused launch with the control thumbnail as its last output. Throws ConfigError
  //! when `params` was planned for other outputs or frames than setup().
  void setup_control(const control::ControlParams& params) override;
  std::optional<control::ControlRecord> control_record() const override;

 private:
  //! Enqueues uploads, the launch and the output download of one batch; waits for nothing.
  void enqueue(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory);

  int device_;
  std::string device_name_;
  FrameInfo frame_{};
  ops::ColorParams color_{};
  std::vector<OutputPlan> plans_;           //!< the visible outputs of setup()
  int max_batch_ = 0;
  size_t frame_bytes_ = 0;                  //!< one frame slot of host_in_/dev_in_, planes aligned
  std::array<size_t, 3> plane_offsets_{};   //!< plane i of a slot starts here
  std::vector<size_t> out_bytes_;           //!< per output, per frame
  std::vector<size_t> out_offsets_;         //!< per output: its [max_batch, ...] region in host_out_/dev_out_
  cuda::Stream copy_, compute_;
  cuda::Event uploaded_, decoded_, computed_, downloaded_;
  cuda::PinnedBuffer host_in_, host_out_;
  cuda::DeviceBuffer dev_in_, dev_out_;
  std::vector<FrameSlot> slots_;   //!< per batch frame, max_batch of them
  std::vector<void*> dev_outs_;    //!< per fused output: its tensor of frame 0 (with control, the thumbnail last)
  FusedPreprocess fused_;
  std::optional<control::CudaControl> control_;
};

}  // namespace framefuse
