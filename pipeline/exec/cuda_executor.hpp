#pragma once
//! The fused chain on one CUDA device, as a ring of in-flight iterations (one batch each).
//!
//! Per iteration, in ring slot s (each slot has its own device input buffer, device and pinned
//! output buffers, parameter blocks, events and graphs; the device input is allocated by the slot's
//! first upload, the one allocation after setup(), as NVDEC pipelines never upload):
//! - Pinned frames are uploaded into the slot's device input by a kernel that reads them through
//!   their unified addresses (upload_kernel.hpp; the sources come from the slot's pinned job
//!   block); Device frames (NVDEC surfaces) are read in place;
//! - the parameter staging + fused kernel (with control: CudaControl::run, one launch per frame)
//!   write the outputs into the slot's device output buffer, and, for sinks that read host memory
//!   (CudaEngineOptions::host_outputs), the copy engine downloads them into its pinned output
//!   buffer (one copy, or one per output for a partial batch); `ready` is recorded. Not the
//!   kernels writing pinned memory through its unified address (the fused kernel itself, or a
//!   copy kernel after it): NVDEC pipelines then ran 14-25 % slower on the
//!   H200 (8 pipelines 2,338 vs 2,644-2,669 fps, one pipeline 455 vs 566-570; alternating runs of
//!   one call). The copy node costs ~2 us of host time per submit (tests/bench/RESULTS.md,
//!   session 7).
//! With graphs (the default) each slot's iteration is captured at setup, once per batch size
//! with and once without the upload, and replayed with ONE cudaGraphLaunch: the per-frame
//! variation (frame pointers, upload sources) reaches the graph through pinned parameter blocks
//! its kernels read when they run, and `ready` is an event record node. Without graphs the same
//! iteration is enqueued call by call.
//! Ordering: iterations run in submission order on one non-blocking stream of the executor's own
//! (control's state carries from frame to frame). Device frames are finished when submitted (an
//! NVDEC source's thread waits for each frame's copy: LegacyStreamFence), so a submit makes no call
//! besides the launch and one query (release of completed frames). Host (pageable) frames are
//! copied by cudaMemcpy2DAsync on the stream before the launch. Graphs are captured on another
//! stream (one per device, shared).
//! The host waits only for the oldest slot's `ready`, in complete(); never for the whole device. It
//! polls (yielding, then sleeping 20 us between queries): a blocking-sync `ready` cost more host
//! time per submit than the polls it saves.
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
  int in_flight = kExecutorRing;   //!< ring slots: iterations submitted and not completed, >= 1
  bool graphs = true;          //!< replay captured iterations; false: launch them call by call
  //! Keep the event times of the last completed iteration (last_times()) and report
  //! Completion::device_seconds: two more event nodes per iteration, for benchmarks.
  bool record_times = false;
  //! Download the outputs into pinned host memory (what complete() hands out). False: they stay
  //! in the slot's device memory and complete() hands out device addresses (Completion::on_device):
  //! for sinks that read no outputs or read device memory. One copy node less per iteration
  //! (~1.4 us of host time per submit on the H200 host) and no pinned outputs (host RSS).
  bool host_outputs = true;
};

//! Device-clock times of one iteration, milliseconds since the executor's last setup().
struct IterationTimes {
  bool uploaded = false;           //!< it uploaded frames (else all were Device frames)
  double input_begin = 0;          //!< the iteration began
  double input_ready = 0;          //!< uploads done, kernels begin
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
  //! The outputs stay in the completed slot's pinned buffer, where the kernels wrote them.
  bool keeps_outputs() const override { return true; }
  //! Enqueues the batch in the next slot and returns; first drops the frames of earlier iterations
  //! that completed (an event query each while they hold frames, no wait). Throws DeviceError when
  //! every slot is in flight, or for `device_outs` with options.host_outputs (the download reads
  //! the slot's own device outputs). `device_outs` reach the kernels through the parameter block,
  //! so graphs replay as captured.
  void submit(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
              std::span<const std::shared_ptr<const void>> owners,
              std::span<std::byte* const> device_outs = {}) override;
  //! Waits for the oldest slot's `ready` event (polling), drops its frames and copies its outputs into
  //! `outs`; with no `outs`, Completion::outputs points into the slot's pinned buffer instead (its
  //! device buffer without options.host_outputs, which throws DeviceError when given `outs`).
  //! device_seconds only with options.record_times (from the iteration's start; Host frames'
  //! copies not included).
  Completion complete(std::span<std::byte* const> outs) override;
  //! Attaches control to every slot's fused launch (waits for and discards iterations in
  //! flight; graphs are captured again). Throws ConfigError when `params` was planned for other outputs
  //! or frames than setup().
  void setup_control(const control::ControlParams& params) override;
  std::optional<control::ControlRecord> control_record() const override;

  //! With options.record_times: the times of the last completed iteration (nullopt before one, or
  //! when the device could not time it).
  std::optional<IterationTimes> last_times() const { return last_times_; }
  //! Graphs captured since construction (each slot twice per batch size at each setup: with and
  //! without the upload).
  int captures() const { return captures_; }

 private:
  struct Slot {
    cuda::Event begun, times_input;                 //!< with record_times: the iteration began, its upload ended
    //! The outputs are in host_out (dev_out without host_outputs). A plain event that complete()
    //! polls: a blocking-sync one's record node costs ~1 us more of each launch's host time (the
    //! bench's "submit path" lines, tests/bench/RESULTS.md).
    cuda::Event ready;
    cuda::DeviceBuffer dev_in;
    std::byte* dev_out = nullptr;                   //!< the outputs, written by the kernels (in dev_outs_)
    cuda::PinnedBuffer host_out;                    //!< the same layout, downloaded from dev_out (host_outputs only)
    cuda::PinnedBuffer uploads;                     //!< UploadJob per plane of the batch
    FusedPreprocess fused;
    std::vector<FrameSlot> frames;                  //!< max_batch of them
    std::vector<void*> outs;                        //!< per fused output: its tensor of frame 0 (in dev_out)
    std::vector<std::byte*> done_outs;              //!< per output: what complete() hands out (host_out's, or outs)
    std::vector<std::byte*> placed_outs;            //!< the in-flight batch's submit() `device_outs`; empty: none
    //! [batch size - 1][uploads]: captured iterations; an empty exec: launch call by call
    std::vector<std::array<cuda::CapturedGraph, 2>> graphs;
    std::vector<std::shared_ptr<const void>> owners;   //!< the frames of the iteration in flight
    int batch = 0;
    bool uploaded = false;
  };
  //! Puts one iteration of `slot` (batch of `frames`, with the upload kernel when `upload`) on
  //! `stream`; `capturing`: the events as event record nodes of a graph.
  void enqueue_iteration(const Slot& slot, int frames, bool upload, cudaStream_t stream, bool capturing) const;
  //! Captures every slot's iteration for every batch size (with options_.graphs). A capture that
  //! another thread's device-wide call invalidated is retried; after 5 failures that slot and
  //! batch size launch call by call (logged).
  void capture_graphs();
  //! Drops the frames of in-flight iterations, oldest first, while they are complete.
  void release_completed();
  //! Waits for every iteration in flight and drops its frames and outputs. Never throws.
  void drain() noexcept;
  //! setup()'s work after the drain; throws with the ring half made (setup() clears it).
  void configure(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                 int max_batch);
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
  std::vector<size_t> out_offsets_;         //!< per output: its [max_batch, ...] region in dev_out and host_out
  size_t out_total_ = 0;                    //!< one slot's outputs, bytes (the regions, aligned)
  cuda::DeviceBuffer dev_outs_;             //!< every slot's dev_out, one after another
  int upload_blocks_ = 1;                   //!< launch_upload's blocks per job for this frame shape
  //! The iterations, in submission order. One stream per slot (iteration n + 1's upload beside
  //! iteration n's kernel) measured slower on the H200: both move their bytes over PCIe (the upload
  //! reads pinned frames, the kernel writes pinned outputs), so executor throughput fell 21 % and
  //! latency grew 2.4x (tests/bench/RESULTS.md).
  cuda::Stream stream_;                     //!< the iterations' stream
  cuda::Event epoch_;                       //!< recorded at setup: the origin of IterationTimes
  std::vector<Slot> ring_;
  size_t oldest_ = 0;                       //!< ring index of the oldest iteration in flight
  int in_flight_ = 0;
  int captures_ = 0;
  std::optional<IterationTimes> last_times_;
  std::optional<control::CudaControl> control_;
};

}  // namespace framefuse
