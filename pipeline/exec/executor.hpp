#pragma once
//! The backend seam: the same fused chain on the CPU or on a CUDA device.
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "pipeline/fused/plan.hpp"

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
};

//! CPU executor on `threads` worker threads (0 = all hardware threads).
std::unique_ptr<Executor> make_cpu_executor(int threads = 0);

}  // namespace framefuse
