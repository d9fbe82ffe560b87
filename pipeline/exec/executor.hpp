#pragma once
//! The backend seam: the same fused chain on the CPU or on a CUDA device.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "pipeline/control/control_step.hpp"
#include "pipeline/error.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/memory/frame_memory.hpp"

namespace framefuse {

//! Runs every planned output of a pipeline over batches of decoded frames.
//! Contract: setup() allocates and may throw; process() neither allocates nor re-plans.
class Executor {
 public:
  virtual ~Executor() = default;
  //! "cpu (2 threads)", "cuda:0 (NVIDIA H200)".
  virtual std::string name() const = 0;
  //! Prepares for frames of `frame`'s shape, `plans` outputs and up to `max_batch` frames per call.
  virtual void setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                     int max_batch) = 0;
  //! Processes frames (host memory, described by the FrameInfo of setup()). outs[k] is host memory
  //! for output k of all frames, frame b at outs[k] + b * plans[k].bytes_per_frame. Blocks until the
  //! outputs are written.
  virtual void process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) = 0;
  //! process() for frames whose memory is given per frame: memory[b] for frames[b]
  //! (DecodedFrame::memory). The frames' owners must stay alive until it returns. By default Host
  //! and Pinned frames are read as host memory and Device frames throw DeviceError; backends that
  //! read device memory override it.
  virtual void process_frames(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                              std::span<std::byte* const> outs) {
    for (const FrameMemory m : memory) {
      if (m == FrameMemory::Device) throw DeviceError(name() + ": cannot read frames in device memory");
    }
    process(frames, outs);
  }
  //! Adds monitoring statistics and control loops (control/control_step.hpp) to the frames of the
  //! last setup(), which turns them off; call after it. Each frame of a batch is then one control
  //! iteration, in order. Throws ConfigError when the backend cannot run them.
  virtual void setup_control(const control::ControlParams& params) = 0;
  //! The last control iteration completed, or nullopt without control. The record may trail the
  //! last processed frame by a few iterations (backends that publish asynchronously).
  virtual std::optional<control::ControlRecord> control_record() const = 0;
};

//! CPU executor on `threads` worker threads (0 = all hardware threads).
std::unique_ptr<Executor> make_cpu_executor(int threads = 0);

}  // namespace framefuse
