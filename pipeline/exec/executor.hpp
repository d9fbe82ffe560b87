#pragma once
//! The backend seam: the same fused chain on the CPU or on a CUDA device.
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipeline/control/control_step.hpp"
#include "pipeline/error.hpp"
#include "pipeline/fused/plan.hpp"
#include "pipeline/memory/frame_memory.hpp"

namespace framefuse {

//! What complete() reports about the batch it completed.
struct Completion {
  //! Seconds from the batch's start on the device (the first upload, or for Device frames the
  //! decoder's copy) to its outputs being in host memory (written, when on_device), from device
  //! events; nullopt where the backend does not measure it (then only the caller's clock tells).
  std::optional<double> device_seconds;
  //! Output k of the batch's frame 0 at outputs[k] (frame b at + b * bytes_per_frame): the
  //! caller's `outs`, or, when complete() got none from a caller of an executor that keeps_outputs(),
  //! the executor's own memory, valid until the next submit(). Empty when neither.
  std::span<std::byte* const> outputs;
  //! `outputs` are device addresses: an executor that leaves them in device memory (made for
  //! sinks that do not read host memory, make_executor()).
  bool on_device = false;
};

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
  //! Asynchronous use, strictly in order: submit() starts a batch (as process_frames(), outputs
  //! kept by the executor) and returns; complete() waits for the OLDEST submitted batch, copies its
  //! outputs into `outs` (as process()), or with no `outs` where keeps_outputs() leaves them in
  //! its own memory (Completion::outputs), and drops its `owners`. At most max_in_flight() batches may
  //! be submitted and not completed; call setup() and setup_control() with none in flight.
  //! `owners` keep the frames' memory alive (DecodedFrame::owner): the executor
  //! drops them once nothing reads the frames any more, at the latest in complete().
  //! `device_outs` (optional, executors that leave their outputs in device memory): the batch's
  //! outputs are written there instead of the executor's own memory, output k of frame b at
  //! device_outs[k] + b * bytes_per_frame, and complete() hands those addresses out; the memory must
  //! stay untouched until then (a sink's ring slot, written in place: Sink::place_outputs()).
  //! The default is synchronous: submit() keeps the batch, complete() runs process_frames() on it.
  virtual int max_in_flight() const { return 1; }
  //! Whether complete() can hand out the outputs in the executor's own memory (Completion::outputs)
  //! instead of copying them into the caller's: call it with no `outs` then.
  virtual bool keeps_outputs() const { return false; }
  virtual int in_flight() const { return pending_.active ? 1 : 0; }
  virtual void submit(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                      std::span<const std::shared_ptr<const void>> owners,
                      std::span<std::byte* const> device_outs = {}) {
    if (!device_outs.empty()) throw DeviceError(name() + ": cannot write its outputs into device memory");
    if (pending_.active) throw DeviceError(name() + ": submit() with a batch in flight; complete() it first");
    pending_.frames.assign(frames.begin(), frames.end());   // capacity kept from frame to frame
    pending_.memory.assign(memory.begin(), memory.end());
    pending_.owners.assign(owners.begin(), owners.end());
    pending_.active = true;
  }
  virtual Completion complete(std::span<std::byte* const> outs) {
    if (!pending_.active) throw DeviceError(name() + ": complete() without a batch in flight");
    pending_.active = false;
    struct Release {   // the frames are dropped also when processing throws
      Pending& batch;
      ~Release() { batch.owners.clear(); }
    } release{pending_};
    process_frames(pending_.frames, pending_.memory, outs);
    return {.device_seconds = std::nullopt, .outputs = outs};
  }

  //! Adds monitoring statistics and control loops (control/control_step.hpp) to the frames of the
  //! last setup(), which turns them off; call after it. Each frame of a batch is then one control
  //! iteration, in order. Throws ConfigError when the backend cannot run them.
  virtual void setup_control(const control::ControlParams& params) = 0;
  //! The last control iteration completed, or nullopt without control. The record may trail the
  //! last processed frame by a few iterations (backends that publish asynchronously).
  virtual std::optional<control::ControlRecord> control_record() const = 0;

 protected:
  //! The default submit()'s batch; backends with their own submit() leave it alone.
  struct Pending {
    std::vector<ops::ImageView> frames;
    std::vector<FrameMemory> memory;
    std::vector<std::shared_ptr<const void>> owners;
    bool active = false;   //!< submitted, not completed
  };
  Pending pending_;
};

//! CPU executor on `threads` worker threads (0 = all hardware threads).
std::unique_ptr<Executor> make_cpu_executor(int threads = 0);

}  // namespace framefuse
