#pragma once
//! The fused chain on one CUDA device, as a ring of in-flight iterations (one batch each).
//!
//! Per iteration, in ring slot s (each slot has its own device input/output buffers, pinned
//! output buffer, parameter block, events and graphs; the device input buffer is allocated by the
//! slot's first upload, the one allocation after setup(), as NVDEC pipelines never upload):
//! - inputs: Host and Pinned frames are copied into the slot's device input on the copy stream
//!   (cudaMemcpy2DAsync straight from the frame: pinned frames by DMA, host frames through the
//!   driver's staging) between the events input_begun and input_ready; Device frames (NVDEC
//!   surfaces) are read in place, input_ready recorded on the legacy default stream, where
//!   FFmpeg's NVDEC copies its output.
//! - the compute stream waits for input_ready and runs the iteration: the parameter upload + fused
//!   kernel (with control: CudaControl::run, one launch per frame), then the outputs'
//!   device-to-host copies into the slot's pinned buffer; `ready` is recorded after it.
//! With graphs (the default) each slot's iteration is captured at setup, once per batch size,
//! and replayed with one cudaGraphLaunch: the per-frame variation (frame pointers) reaches the
//! graph through the parameter block its staging kernel re-reads from pinned memory, so replays
//! never re-capture. The uploads stay ordinary copy-stream work outside the graph (a pooled
//! frame's address changes every frame; updating memcpy nodes per frame would cost as much as the
//! copies' own calls) and the events stay stream operations around the launch: with the waits
//! and records as graph event nodes a submit cost more host time on the H200 (21.3 µs per frame,
//! against 8.7-14.7 µs without; tests/bench/RESULTS.md). Without graphs the same iteration is
//! enqueued call by call.
//! Iterations run in submission order on the one compute stream (control's state carries from
//! frame to frame); the upload of n+1 overlaps the compute of n. The host waits only for the
//! oldest slot's `ready`, in complete(); never for the whole device.
#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "pipeline/control/control_cuda.hpp"
#include "pipeline/cuda/cuda_raii.hpp"
#include "pipeline/exec/executor.hpp"
#include "pipeline/fused/fused_preprocess.hpp"

namespace framefuse {

//! How a CudaExecutor runs its iterations.
struct CudaEngineOptions {
  int in_flight = 2;           //!< ring slots: iterations submitted and not completed, >= 1
  bool graphs = true;          //!< replay captured iterations; false: launch them call by call
  //! Keep the event times of the last completed iteration (last_times()): adds event nodes
  //! between the kernels and the output copies, for benchmarks.
  bool record_times = false;
};

//! Device-clock times of one iteration, milliseconds since the executor's last setup().
struct IterationTimes {
  bool uploaded = false;           //!< it copied frames in (else all were Device frames)
  double input_begin = 0;          //!< uploads began (Device frames: the decoder's copies were done)
  double input_ready = 0;          //!< uploads done
  double compute_begin = 0, consumed = 0;   //!< the slot's compute
  double ready = 0;                //!< outputs in host memory
};

class CudaExecutor final : public Executor {
 public:
  //! Binds to device `index` (its primary context). Throws DeviceError when unusable, ConfigError
  //! for options.in_flight < 1.
  explicit CudaExecutor(int index, CudaEngineOptions options = {});
  //! Waits for the iterations in flight, then drops their frames.
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  std::string name() const override;
  //! Waits for (and discards) iterations in flight, then allocates options.in_flight slots.
  void setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
             int max_batch) override;
  //! All frames Host (process_frames with FrameMemory::Host each).
  void process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) override;
  //! submit() + complete(); throws DeviceError with iterations in flight.
  void process_frames(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                      std::span<std::byte* const> outs) override;
  int max_in_flight() const override { return options_.in_flight; }
  int in_flight() const override { return in_flight_; }
  //! Enqueues the batch in the next slot and returns; first drops the frames of earlier iterations
  //! whose inputs were consumed (an event query each, no wait). Throws DeviceError when every slot
  //! is in flight.
  void submit(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
              std::span<const std::shared_ptr<const void>> owners) override;
  //! Waits for the oldest slot's `ready` event, copies its outputs out (none when `outs` is
  //! empty: a caller that discards them), drops its frames.
  Completion complete(std::span<std::byte* const> outs) override;
  //! Attaches control to every slot's fused launch (waits for and discards iterations in
  //! flight; graphs are captured again). Throws ConfigError when `params` was planned for other outputs
  //! or frames than setup().
  void setup_control(const control::ControlParams& params) override;
  std::optional<control::ControlRecord> control_record() const override;

  //! With options.record_times: the times of the last completed iteration (nullopt before one, or
  //! when the device could not time it).
  std::optional<IterationTimes> last_times() const { return last_times_; }
  //! Graphs captured since construction (each slot once per batch size at each setup).
  int captures() const { return captures_; }

 private:
  struct Slot {
    cuda::Event input_begun, input_ready, compute_begun, consumed, ready;
    cuda::DeviceBuffer dev_in, dev_out;
    cuda::PinnedBuffer host_out;
    FusedPreprocess fused;
    std::vector<FrameSlot> frames;                  //!< max_batch of them
    std::vector<void*> dev_outs;                    //!< per fused output: its tensor of frame 0
    std::vector<cuda::CapturedGraph> graphs;        //!< per batch size - 1; empty: launch call by call
    std::vector<std::shared_ptr<const void>> owners;   //!< the frames of the iteration in flight
    int batch = 0;
    bool uploaded = false, device_frames = false;
  };
  //! Puts the compute part of one iteration of `slot` (batch of `frames`) on `stream`;
  //! `capturing`: the timing events (record_times) as external event nodes of a graph.
  void enqueue_iteration(const Slot& slot, int frames, cudaStream_t stream, bool capturing) const;
  //! Captures every slot's iteration for every batch size (with options_.graphs). A capture that
  //! another thread's device-wide call invalidated is retried; after 5 failures that slot and
  //! batch size launch call by call (logged).
  void capture_graphs();
  //! Drops the frames of in-flight iterations, oldest first, while their inputs are consumed.
  void release_consumed();
  //! Waits for every iteration in flight and drops its frames and outputs. Never throws.
  void drain() noexcept;
  //! (Re)plans every slot's fused launch for plans_ (attached to the control, if any) and
  //! captures its graphs again.
  void setup_fused();

  int device_;
  std::string device_name_;
  CudaEngineOptions options_;
  FrameInfo frame_{};
  ops::ColorParams color_{};
  std::vector<OutputPlan> plans_;           //!< the visible outputs of setup()
  int max_batch_ = 0;
  size_t frame_bytes_ = 0;                  //!< one frame of a slot's dev_in, planes aligned
  std::array<size_t, 3> plane_offsets_{};   //!< plane i of a frame starts here
  std::vector<size_t> out_bytes_;           //!< per output, per frame
  std::vector<size_t> out_offsets_;         //!< per output: its [max_batch, ...] region in host_out/dev_out
  cuda::Stream copy_, compute_;
  cuda::Event epoch_;                       //!< recorded at setup: the origin of IterationTimes
  std::vector<Slot> ring_;
  size_t oldest_ = 0;                       //!< ring index of the oldest iteration in flight
  int in_flight_ = 0;
  int captures_ = 0;
  std::optional<IterationTimes> last_times_;
  std::optional<control::CudaControl> control_;
};

}  // namespace framefuse
