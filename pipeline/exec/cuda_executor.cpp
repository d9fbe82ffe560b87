#include "pipeline/exec/cuda_executor.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "pipeline/error.hpp"
#include "pipeline/exec/upload_kernel.hpp"

namespace framefuse {

namespace {

//! An event, timed when `timing`.
cuda::Event make_slot_event(bool timing) {
  cudaEvent_t e{};
  cuda::check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  return cuda::Event(e);
}

//! Queries before the first sleep, yielding the core between them, and the sleep between later ones.
constexpr int kPollYields = 8;
constexpr auto kPollSleep = std::chrono::microseconds(20);

//! Waits until `e` completed, polling: many pipelines share the host's cores, so a waiting one
//! yields, then sleeps between queries. Not a blocking-sync event, which sleeps in the driver but
//! costs ~1.4 us more host time per graph launch to record (framefused bench on the H200 host:
//! submit 3.1 vs 4.6 us, and p50 latency no worse; tests/bench/RESULTS.md). Returns the
//! event's error, if any.
cudaError_t wait_for(cudaEvent_t e) {
  for (int polls = 0;; ++polls) {
    const cudaError_t r = cudaEventQuery(e);
    if (r != cudaErrorNotReady) return r;
    if (polls < kPollYields) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
}

//! The stream graphs are captured on: one per device for the process, one capture at a time (a
//! capture takes well under a millisecond and happens at set-up only). Never the iterations' own
//! stream, where a pipeline's decoder may be copying frames meanwhile (its copies would land in
//! the capture), and no stream per executor that only ever captures. Never destroyed, as the
//! decoders' CUDA devices (cuda_device_context.hpp): at exit that would race the runtime's teardown.
struct CaptureStream {
  std::mutex mu;                   //!< held for every capture on `stream`
  cudaStream_t stream = nullptr;
};
CaptureStream& capture_stream(int device) {
  static std::mutex mu;
  static auto* streams = new std::map<int, CaptureStream>();
  std::lock_guard lock(mu);
  if (const auto it = streams->find(device); it != streams->end()) return it->second;
  cudaStream_t s{};
  cuda::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  CaptureStream& made = (*streams)[device];
  made.stream = s;
  return made;
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
  stream_ = cuda::make_stream();
}

CudaExecutor::~CudaExecutor() { drain(); }

std::string CudaExecutor::name() const { return fmt::format("cuda:{} ({})", device_, device_name_); }

void CudaExecutor::drain() noexcept {
  while (in_flight_ > 0) {
    Slot& slot = ring_[oldest_];
    wait_for(slot.ready);   // an error leaves nothing better to do than to go on
    slot.owners.clear();
    oldest_ = (oldest_ + 1) % ring_.size();
    --in_flight_;
  }
  // Work a failed submit() left enqueued (part of an iteration, a pageable copy) is not in flight:
  // the stream has it.
  if (stream_) cudaStreamSynchronize(stream_);
  cudaGetLastError();
}

void CudaExecutor::setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                         int max_batch) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  drain();
  try {
    configure(frame, color, plans, max_batch);
  } catch (...) {   // no half-made ring: submit() says "before setup()" until one succeeds
    ring_.clear();
    throw;
  }
}

void CudaExecutor::configure(const FrameInfo& frame, const ops::ColorParams& color,
                             std::span<const OutputPlan> plans, int max_batch) {
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
  const auto largest = ops::plane_shape(frame.format, frame.width, frame.height, 0);
  upload_blocks_ = upload_blocks_per_job(size_t(largest.row_bytes) * largest.rows);
  out_bytes_.clear();
  out_offsets_.clear();
  size_t out_total = 0;
  for (const auto& p : plans) {
    out_bytes_.push_back(p.bytes_per_frame);
    out_offsets_.push_back(out_total);
    out_total = cuda::align_up(out_total + p.bytes_per_frame * max_batch);
  }
  out_total_ = out_total;
  ring_.clear();
  ring_.resize(size_t(options_.in_flight));
  oldest_ = 0;
  // Every slot's outputs in one allocation: cudaMalloc rounds each to whole 2 MiB pages, so a slot
  // of its own costs up to 2 MiB more (3 MB of outputs take 4 MiB).
  const size_t slot_stride = cuda::align_up(std::max<size_t>(out_total, 1));
  dev_outs_ = {};
  dev_outs_ = cuda::alloc_device(slot_stride * ring_.size());
  const size_t jobs = size_t(ops::plane_count(frame.format)) * size_t(max_batch);
  for (size_t i = 0; i < ring_.size(); ++i) {
    Slot& slot = ring_[i];
    slot.begun = make_slot_event(true);
    slot.times_input = make_slot_event(true);
    slot.ready = make_slot_event(options_.record_times);
    slot.dev_in = {};   // on the first upload: pipelines decoding with NVDEC never need it
    slot.dev_out = dev_outs_.as() + i * slot_stride;
    slot.host_out = options_.host_outputs ? cuda::alloc_pinned(slot_stride) : cuda::PinnedBuffer{};
    slot.uploads = cuda::alloc_pinned(sizeof(UploadJob) * jobs);
    std::memset(slot.uploads.as(), 0, slot.uploads.size());
    slot.frames.assign(size_t(max_batch), FrameSlot{});
  }
  setup_fused();
  epoch_ = make_slot_event(true);
  cuda::check(cudaEventRecord(epoch_, stream_), "cudaEventRecord");
  cuda::check(cudaEventSynchronize(epoch_), "cudaEventSynchronize");
}

void CudaExecutor::setup_fused() {
  for (Slot& slot : ring_) {
    slot.fused.setup(frame_, plans_, max_batch_);
    if (control_) control_->attach(slot.fused);
    slot.outs.clear();
    slot.done_outs.clear();
    for (const size_t offset : out_offsets_) {
      slot.outs.push_back(slot.dev_out + offset);
      slot.done_outs.push_back((options_.host_outputs ? slot.host_out.as() : slot.dev_out) + offset);
    }
  }
  capture_graphs();
}

void CudaExecutor::capture_graphs() {
  constexpr int kAttempts = 5;
  CaptureStream& capture = capture_stream(device_);
  const std::lock_guard lock(capture.mu);
  for (Slot& slot : ring_) {
    slot.graphs.clear();
    slot.graphs.resize(size_t(max_batch_));
    for (int frames = 1; options_.graphs && frames <= max_batch_; ++frames) {
      for (const bool upload : {false, true}) {
        for (int attempt = 1;; ++attempt) {
          try {
            slot.graphs[size_t(frames - 1)][upload] = cuda::capture_graph(
                capture.stream, [&](cudaStream_t s) { enqueue_iteration(slot, frames, upload, s, true); });
            ++captures_;
            break;
          } catch (const DeviceError& e) {
            // A device-wide call on another thread (a decoder's set-up, say) can invalidate a
            // capture in progress; end it, clear the error and capture again.
            cudaStreamCaptureStatus status{};
            if (cudaStreamIsCapturing(capture.stream, &status) == cudaSuccess &&
                status != cudaStreamCaptureStatusNone) {
              cudaGraph_t broken{};
              if (cudaStreamEndCapture(capture.stream, &broken) == cudaSuccess && broken) cudaGraphDestroy(broken);
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
}

void CudaExecutor::setup_control(const control::ControlParams& params) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  if (params.num_outputs != static_cast<int32_t>(plans_.size()) || params.frame_w != frame_.width ||
      params.frame_h != frame_.height)
    throw ConfigError(name() + ": control was planned for other outputs or frames than setup()");
  drain();
  control::CudaControl control;
  control.setup(params, stream_);
  control_ = std::move(control);
  try {
    setup_fused();
  } catch (...) {   // as in setup()
    ring_.clear();
    throw;
  }
}

std::optional<control::ControlRecord> CudaExecutor::control_record() const {
  if (!control_) return std::nullopt;
  return control_->record();
}

void CudaExecutor::process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) {
  static constexpr std::array<FrameMemory, kMaxBatch> kHost{};   // value-initialised: FrameMemory::Host
  if (frames.size() > kHost.size())
    throw ConfigError(name() + fmt::format(": a batch of {} frames, at most {}", frames.size(), kHost.size()));
  process_frames(frames, std::span(kHost).first(frames.size()), outs);
}

void CudaExecutor::process_frames(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                                  std::span<std::byte* const> outs) {
  if (in_flight_ > 0) throw DeviceError(name() + ": process_frames() with iterations in flight");
  submit(frames, memory, {});
  complete(outs);
}

void CudaExecutor::release_completed() {
  for (int i = 0; i < in_flight_; ++i) {
    Slot& slot = ring_[(oldest_ + size_t(i)) % ring_.size()];
    if (slot.owners.empty()) continue;
    const cudaError_t e = cudaEventQuery(slot.ready);
    if (e == cudaErrorNotReady) return;
    cuda::check(e, "query iteration done");
    slot.owners.clear();
  }
}

void CudaExecutor::submit(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory,
                          std::span<const std::shared_ptr<const void>> owners, std::span<std::byte* const> device_outs) {
  if (ring_.empty()) throw DeviceError(name() + ": submit() before setup()");
  if (!device_outs.empty() && (options_.host_outputs || device_outs.size() != out_bytes_.size()))
    throw DeviceError(name() + fmt::format(": {} output addresses given for {} outputs{}", device_outs.size(),
                                           out_bytes_.size(), options_.host_outputs ? " downloaded to the host" : ""));
  if (in_flight_ == options_.in_flight)
    throw DeviceError(name() + fmt::format(": submit() with all {} slots in flight", options_.in_flight));
  if (frames.empty() || frames.size() > size_t(max_batch_))
    throw ConfigError(name() + fmt::format(": a batch of {} frames, set up for 1 to {}", frames.size(), max_batch_));
  if (memory.size() != frames.size() || (!owners.empty() && owners.size() != frames.size()))
    throw ConfigError(name() + fmt::format(": {} frames with {} memory kinds and {} owners", frames.size(),
                                           memory.size(), owners.size()));
  // cudaSetDevice costs ~0.35 us of host time on the H200 host even when nothing changes; the
  // query is a thread-local read.
  if (int current = -1; cudaGetDevice(&current) != cudaSuccess || current != device_)
    cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  release_completed();
  Slot& slot = ring_[(oldest_ + size_t(in_flight_)) % ring_.size()];

  // The slot's previous iteration has completed (complete() waited for it): its job block and
  // parameter staging are free to rewrite.
  const int planes = ops::plane_count(frame_.format);
  auto* const jobs = slot.uploads.as<UploadJob>();
  slot.uploaded = false;
  for (size_t b = 0; b < frames.size(); ++b) {
    UploadJob* const job = jobs + b * size_t(planes);
    for (int i = 0; i < planes; ++i) job[i].rows = 0;
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
    for (int i = 0; i < planes; ++i) {
      const auto s = ops::plane_shape(frame_.format, frame_.width, frame_.height, i);
      auto* const plane = reinterpret_cast<uint8_t*>(dev + plane_offsets_[size_t(i)]);
      if (memory[b] == FrameMemory::Pinned) {
        job[i] = {frames[b].data[i], plane, frames[b].pitch[i], s.row_bytes, s.row_bytes, s.rows};
        slot.uploaded = true;
      } else {   // pageable: the driver stages it, before the iteration on the same stream
        cuda::check(cudaMemcpy2DAsync(plane, s.row_bytes, frames[b].data[i], frames[b].pitch[i], s.row_bytes, s.rows,
                                      cudaMemcpyHostToDevice, stream_),
                    "upload frame");
      }
      view.data[i] = plane;
      view.pitch[i] = s.row_bytes;
    }
    slot.frames[b] = {view, color_};
  }
  slot.placed_outs.assign(device_outs.begin(), device_outs.end());   // capacity kept from frame to frame
  if (device_outs.empty()) {
    slot.fused.set_batch(std::span(slot.frames).first(frames.size()), slot.outs);
  } else {
    std::array<void*, kMaxOutputs> placed{};
    std::copy(device_outs.begin(), device_outs.end(), placed.begin());
    slot.fused.set_batch(std::span(slot.frames).first(frames.size()), std::span(placed).first(device_outs.size()));
  }
  slot.batch = static_cast<int>(frames.size());
  slot.owners.assign(owners.begin(), owners.end());

  try {
    if (const cuda::CapturedGraph& graph = slot.graphs[frames.size() - 1][slot.uploaded]; graph.exec) {
      cuda::check(cudaGraphLaunch(graph.exec, stream_), "cudaGraphLaunch");
    } else {
      enqueue_iteration(slot, slot.batch, slot.uploaded, stream_, false);
    }
  } catch (...) {   // part of the iteration may be enqueued: the frames go once the stream is done with them
    cudaStreamSynchronize(stream_);
    cudaGetLastError();
    slot.owners.clear();
    throw;
  }
  ++in_flight_;
}

void CudaExecutor::enqueue_iteration(const Slot& slot, int frames, bool upload, cudaStream_t stream,
                                     bool capturing) const {
  const unsigned record = capturing ? cudaEventRecordExternal : cudaEventRecordDefault;
  if (options_.record_times) cuda::check(cudaEventRecordWithFlags(slot.begun, stream, record), "cudaEventRecord");
  if (upload)
    cuda::check(launch_upload(slot.uploads.as<UploadJob>(), frames * ops::plane_count(frame_.format), upload_blocks_,
                              stream),
                "upload frames");
  if (options_.record_times)
    cuda::check(cudaEventRecordWithFlags(slot.times_input, stream, record), "cudaEventRecord");
  if (control_) {
    control_->run(slot.fused, frames, stream);
  } else {
    slot.fused.run(stream);
  }
  // With host outputs, the download of `frames` frames: all of dev_out in one copy for a full
  // batch, else each output's first frames (output 0 starts at offset 0).
  if (options_.host_outputs) {
    const bool whole = frames == max_batch_;
    for (size_t k = 0; k < (whole ? 1 : out_offsets_.size()); ++k)
      cuda::check(cudaMemcpyAsync(slot.host_out.as() + out_offsets_[k], slot.dev_out + out_offsets_[k],
                                  whole ? out_total_ : out_bytes_[k] * size_t(frames),
                                  cudaMemcpyDeviceToHost, stream),
                  "download outputs");
  }
  cuda::check(cudaEventRecordWithFlags(slot.ready, stream, record), "cudaEventRecord");
}

Completion CudaExecutor::complete(std::span<std::byte* const> outs) {
  if (in_flight_ == 0) throw DeviceError(name() + ": complete() without an iteration in flight");
  if (!outs.empty() && !options_.host_outputs)
    throw DeviceError(name() + ": complete() given host buffers, but the outputs stay in device memory");
  Slot& slot = ring_[oldest_];
  cuda::check(wait_for(slot.ready), "wait for outputs");   // failed: still in flight, its frames still held
  oldest_ = (oldest_ + 1) % ring_.size();
  --in_flight_;
  slot.owners.clear();
  for (size_t k = 0; k < out_bytes_.size() && !outs.empty(); ++k)
    std::memcpy(outs[k], slot.host_out.as() + out_offsets_[k], out_bytes_[k] * size_t(slot.batch));

  Completion done;
  done.outputs = !outs.empty()                ? outs
                 : !slot.placed_outs.empty() ? std::span<std::byte* const>(slot.placed_outs)
                                             : std::span<std::byte* const>(slot.done_outs);
  done.on_device = !options_.host_outputs;
  if (options_.record_times) {
    if (const auto ms = elapsed_ms(slot.begun, slot.ready)) done.device_seconds = *ms * 1e-3;
    const auto at = [&](cudaEvent_t e) { return elapsed_ms(epoch_, e); };
    const auto begin = at(slot.begun), input = at(slot.times_input), ready = at(slot.ready);
    last_times_.reset();
    if (begin && input && ready) last_times_ = IterationTimes{slot.uploaded, *begin, *input, *ready};
  }
  return done;
}

}  // namespace framefuse
