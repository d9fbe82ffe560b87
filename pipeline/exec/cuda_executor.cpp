#include "pipeline/exec/cuda_executor.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "pipeline/error.hpp"

namespace framefuse {

namespace {

//! A timing event; `blocking`: host waits sleep instead of spinning (many pipelines share the
//! host's cores, and a wait for outputs is long next to the wake-up).
cuda::Event make_slot_event(bool blocking = false) {
  cudaEvent_t e{};
  cuda::check(cudaEventCreateWithFlags(&e, blocking ? cudaEventBlockingSync : cudaEventDefault), "cudaEventCreate");
  return cuda::Event(e);
}

//! Milliseconds from `from` to `to` (both completed), or nullopt when the device cannot tell (an
//! event not recorded since creation, or recorded by a node the driver does not time).
std::optional<double> elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
    cudaGetLastError();   // not sticky; keep later checks clean
    return std::nullopt;
  }
  return double(ms);
}

}  // namespace

CudaExecutor::CudaExecutor(int index, CudaEngineOptions options) : device_(index), options_(options) {
  if (options_.in_flight < 1)
    throw ConfigError(fmt::format("cuda executor: in_flight must be >= 1, got {}", options_.in_flight));
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  device_name_ = prop.name;
}

CudaExecutor::~CudaExecutor() { drain(); }

std::string CudaExecutor::name() const { return fmt::format("cuda:{} ({})", device_, device_name_); }

void CudaExecutor::drain() noexcept {
  while (in_flight_ > 0) {
    Slot& slot = ring_[oldest_];
    cudaEventSynchronize(slot.ready);   // an error leaves nothing better to do than to go on
    slot.owners.clear();
    oldest_ = (oldest_ + 1) % ring_.size();
    --in_flight_;
  }
  cudaGetLastError();
}

void CudaExecutor::setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                         int max_batch) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  drain();
  frame_ = frame;
  color_ = color;
  plans_.assign(plans.begin(), plans.end());
  max_batch_ = max_batch;
  control_.reset();
  last_times_.reset();
  frame_bytes_ = 0;
  for (int i = 0; i < ops::plane_count(frame.format); ++i) {
    const auto s = ops::plane_shape(frame.format, frame.width, frame.height, i);
    plane_offsets_[size_t(i)] = frame_bytes_;
    frame_bytes_ = cuda::align_up(frame_bytes_ + size_t(s.row_bytes) * s.rows);
  }
  out_bytes_.clear();
  out_offsets_.clear();
  size_t out_total = 0;
  for (const auto& p : plans) {
    out_bytes_.push_back(p.bytes_per_frame);
    out_offsets_.push_back(out_total);
    out_total = cuda::align_up(out_total + p.bytes_per_frame * max_batch);
  }
  copy_ = cuda::make_stream();
  compute_ = cuda::make_stream();
  ring_.clear();
  ring_.resize(size_t(options_.in_flight));
  oldest_ = 0;
  for (Slot& slot : ring_) {
    slot.input_begun = make_slot_event();
    slot.input_ready = make_slot_event();
    slot.compute_begun = make_slot_event();
    slot.consumed = make_slot_event();
    slot.ready = make_slot_event(true);
    slot.dev_in = {};   // on the first upload: pipelines decoding with NVDEC never need it
    slot.dev_out = cuda::alloc_device(out_total);
    slot.host_out = cuda::alloc_pinned(out_total);
    slot.frames.assign(size_t(max_batch), FrameSlot{});
  }
  setup_fused();
  epoch_ = make_slot_event();
  cuda::check(cudaEventRecord(epoch_, copy_), "cudaEventRecord");
  cuda::check(cudaEventSynchronize(epoch_), "cudaEventSynchronize");
}

void CudaExecutor::setup_fused() {
  for (Slot& slot : ring_) {
    slot.fused.setup(frame_, plans_, max_batch_);
    if (control_) control_->attach(slot.fused);
    slot.dev_outs.clear();
    for (const size_t offset : out_offsets_) slot.dev_outs.push_back(slot.dev_out.as() + offset);
  }
  capture_graphs();
}

void CudaExecutor::capture_graphs() {
  constexpr int kAttempts = 5;
  for (Slot& slot : ring_) {
    slot.graphs.clear();
    slot.graphs.resize(size_t(max_batch_));
    for (int frames = 1; options_.graphs && frames <= max_batch_; ++frames) {
      for (int attempt = 1;; ++attempt) {
        try {
          slot.graphs[size_t(frames - 1)] = cuda::capture_graph(
              compute_, [&](cudaStream_t s) { enqueue_iteration(slot, frames, s, true); });
          ++captures_;
          break;
        } catch (const DeviceError& e) {
          // A device-wide call on another thread (a decoder's set-up, say) can invalidate a
          // capture in progress; end it, clear the error and capture again.
          cudaStreamCaptureStatus status{};
          if (cudaStreamIsCapturing(compute_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
            cudaGraph_t broken{};
            if (cudaStreamEndCapture(compute_, &broken) == cudaSuccess && broken) cudaGraphDestroy(broken);
          }
          cudaGetLastError();
          if (attempt == kAttempts) {   // this slot and batch size launch call by call instead
            spdlog::warn("{}: graph capture failed {} times ({}); launching without a graph", name(), kAttempts,
                         e.what());
            break;
          }
        }
      }
    }
  }
}

void CudaExecutor::setup_control(const control::ControlParams& params) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  if (params.num_outputs != static_cast<int32_t>(plans_.size()) || params.frame_w != frame_.width ||
      params.frame_h != frame_.height)
    throw ConfigError(name() + ": control was planned for other outputs or frames than setup()");
  drain();
  control::CudaControl control;
  control.setup(params, compute_);
  control_ = std::move(control);
  setup_fused();
}

std::optional<control::ControlRecord> CudaExecutor::control_record() const {
  if (!control_) return std::nullopt;
  return control_->record();
}

void CudaExecutor::process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) {
  static constexpr std::array<FrameMemory, kMaxBatch> kHost{};   // value-initialised: FrameMemory::Host
  process_frames(frames, std::span(kHost).first(frames.size()), outs);
}

void CudaExecutor::process_frames(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                                  std::span<std::byte* const> outs) {
  if (in_flight_ > 0) throw DeviceError(name() + ": process_frames() with iterations in flight");
  submit(frames, memory, {});
  complete(outs);
}

void CudaExecutor::release_consumed() {
  for (int i = 0; i < in_flight_; ++i) {
    Slot& slot = ring_[(oldest_ + size_t(i)) % ring_.size()];
    if (slot.owners.empty()) continue;
    // Uploaded frames are free once copied; Device frames once the iteration is done.
    const cudaError_t e = cudaEventQuery(slot.device_frames ? slot.ready : slot.input_ready);
    if (e == cudaErrorNotReady) return;
    cuda::check(e, "query inputs consumed");
    slot.owners.clear();
  }
}

void CudaExecutor::submit(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                          std::span<const std::shared_ptr<const void>> owners) {
  if (ring_.empty()) throw DeviceError(name() + ": submit() before setup()");
  if (in_flight_ == options_.in_flight)
    throw DeviceError(name() + fmt::format(": submit() with all {} slots in flight", options_.in_flight));
  if (frames.empty() || frames.size() > size_t(max_batch_))
    throw ConfigError(name() + fmt::format(": a batch of {} frames, set up for 1 to {}", frames.size(), max_batch_));
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  release_consumed();
  Slot& slot = ring_[(oldest_ + size_t(in_flight_)) % ring_.size()];

  slot.device_frames = false;
  slot.uploaded = false;
  for (const FrameMemory m : memory) (m == FrameMemory::Device ? slot.device_frames : slot.uploaded) = true;
  if (!slot.uploaded) {
    // FFmpeg's NVDEC copies its output on the legacy default stream: the iteration waits for it.
    cuda::check(cudaEventRecord(slot.input_ready, cudaStreamLegacy), "cudaEventRecord");
  } else if (slot.device_frames) {
    cuda::check(cudaEventRecord(slot.input_begun, cudaStreamLegacy), "cudaEventRecord");
    cuda::check(cudaStreamWaitEvent(copy_, slot.input_begun, 0), "cudaStreamWaitEvent");
  } else {
    cuda::check(cudaEventRecord(slot.input_begun, copy_), "cudaEventRecord");
  }
  for (size_t b = 0; b < frames.size(); ++b) {
    if (memory[b] == FrameMemory::Device) {
      slot.frames[b] = {frames[b], color_};
      continue;
    }
    // Host and Pinned frames go to frame b of the slot's dev_in, tightly packed.
    if (!slot.dev_in.as()) slot.dev_in = cuda::alloc_device(frame_bytes_ * size_t(max_batch_));
    std::byte* const dev = slot.dev_in.as() + b * frame_bytes_;
    ops::ImageView view{};
    view.width = frame_.width;
    view.height = frame_.height;
    view.format = frame_.format;
    for (int i = 0; i < ops::plane_count(frame_.format); ++i) {
      const auto s = ops::plane_shape(frame_.format, frame_.width, frame_.height, i);
      std::byte* const plane = dev + plane_offsets_[size_t(i)];
      cuda::check(cudaMemcpy2DAsync(plane, s.row_bytes, frames[b].data[i], frames[b].pitch[i], s.row_bytes, s.rows,
                                    cudaMemcpyHostToDevice, copy_),
                  "upload frame");
      view.data[i] = reinterpret_cast<const uint8_t*>(plane);
      view.pitch[i] = s.row_bytes;
    }
    slot.frames[b] = {view, color_};
  }
  if (slot.uploaded) cuda::check(cudaEventRecord(slot.input_ready, copy_), "cudaEventRecord");
  slot.fused.set_batch(std::span(slot.frames).first(frames.size()), slot.dev_outs);
  slot.batch = static_cast<int>(frames.size());
  slot.owners.assign(owners.begin(), owners.end());

  cuda::check(cudaStreamWaitEvent(compute_, slot.input_ready, 0), "wait for the inputs");
  if (const cuda::CapturedGraph& graph = slot.graphs[frames.size() - 1]; graph.exec) {
    cuda::check(cudaGraphLaunch(graph.exec, compute_), "cudaGraphLaunch");
  } else {
    enqueue_iteration(slot, slot.batch, compute_, false);
  }
  cuda::check(cudaEventRecord(slot.ready, compute_), "cudaEventRecord");
  ++in_flight_;
}

void CudaExecutor::enqueue_iteration(const Slot& slot, int frames, cudaStream_t stream, bool capturing) const {
  const unsigned record = capturing ? cudaEventRecordExternal : cudaEventRecordDefault;
  if (options_.record_times)
    cuda::check(cudaEventRecordWithFlags(slot.compute_begun, stream, record), "cudaEventRecord");
  if (control_) {
    control_->run(slot.fused, frames, stream);
  } else {
    slot.fused.run(stream);
  }
  if (options_.record_times) cuda::check(cudaEventRecordWithFlags(slot.consumed, stream, record), "cudaEventRecord");
  for (size_t k = 0; k < out_bytes_.size(); ++k) {
    cuda::check(cudaMemcpyAsync(slot.host_out.as() + out_offsets_[k], slot.dev_outs[k], out_bytes_[k] * size_t(frames),
                                cudaMemcpyDeviceToHost, stream),
                "download outputs");
  }
}

Completion CudaExecutor::complete(std::span<std::byte* const> outs) {
  if (in_flight_ == 0) throw DeviceError(name() + ": complete() without an iteration in flight");
  Slot& slot = ring_[oldest_];
  oldest_ = (oldest_ + 1) % ring_.size();
  --in_flight_;
  cuda::check(cudaEventSynchronize(slot.ready), "wait for outputs");
  slot.owners.clear();
  for (size_t k = 0; k < out_bytes_.size() && !outs.empty(); ++k)
    std::memcpy(outs[k], slot.host_out.as() + out_offsets_[k], out_bytes_[k] * size_t(slot.batch));

  const cudaEvent_t start = slot.uploaded ? slot.input_begun.get() : slot.input_ready.get();
  Completion done;
  if (const auto ms = elapsed_ms(start, slot.ready)) done.device_seconds = *ms * 1e-3;
  if (options_.record_times) {
    const auto at = [&](cudaEvent_t e) { return elapsed_ms(epoch_, e); };
    const auto begin = at(start), input = at(slot.input_ready), compute = at(slot.compute_begun),
               consumed = at(slot.consumed), ready = at(slot.ready);
    last_times_.reset();
    if (begin && input && compute && consumed && ready)
      last_times_ = IterationTimes{slot.uploaded, *begin, *input, *compute, *consumed, *ready};
  }
  return done;
}

}  // namespace framefuse
