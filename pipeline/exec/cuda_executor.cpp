#include "pipeline/exec/cuda_executor.hpp"

#include <cstring>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"

namespace framefuse {
CudaExecutor::CudaExecutor(int index) : device_(index) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  cuda::check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  device_name_ = prop.name;
}

std::string CudaExecutor::name() const { return fmt::format("cuda:{} ({})", device_, device_name_); }

void CudaExecutor::setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                         int max_batch) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  frame_ = frame;
  color_ = color;
  plans_.assign(plans.begin(), plans.end());
  max_batch_ = max_batch;
  control_.reset();
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
  uploaded_ = cuda::make_event();
  decoded_ = cuda::make_event();
  computed_ = cuda::make_event();
  downloaded_ = cuda::make_event();
  host_in_ = cuda::alloc_pinned(frame_bytes_ * max_batch);
  dev_in_ = cuda::alloc_device(frame_bytes_ * max_batch);
  host_out_ = cuda::alloc_pinned(out_total);
  dev_out_ = cuda::alloc_device(out_total);
  fused_.setup(frame, plans, max_batch);
  slots_.assign(size_t(max_batch), FrameSlot{});
  dev_outs_.clear();
  for (const size_t offset : out_offsets_) dev_outs_.push_back(dev_out_.as() + offset);
}

void CudaExecutor::setup_control(const control::ControlParams& params) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  if (params.num_outputs != static_cast<int32_t>(plans_.size()) || params.frame_w != frame_.width ||
      params.frame_h != frame_.height)
    throw ConfigError(name() + ": control was planned for other outputs or frames than setup()");
  control::CudaControl control;
  control.setup(params, max_batch_, compute_);
  std::vector<OutputPlan> plans = plans_;
  plans.push_back(control.thumbnail_plan());
  fused_.setup(frame_, plans, max_batch_);
  control_ = std::move(control);
  fused_.set_control(control_->device_state());
  dev_outs_.resize(plans_.size());
  dev_outs_.push_back(control_->thumbnails());
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
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  enqueue(frames, memory);
  cuda::check(cudaEventSynchronize(downloaded_), "wait for outputs");
  for (size_t k = 0; k < out_bytes_.size(); ++k)
    std::memcpy(outs[k], host_out_.as() + out_offsets_[k], out_bytes_[k] * frames.size());
}

void CudaExecutor::enqueue(std::span<const ops::ImageView> frames, std::span<const FrameMemory> memory) {
  bool device_frames = false;
  for (size_t b = 0; b < frames.size(); ++b) {
    if (memory[b] == FrameMemory::Device) {
      slots_[b] = {frames[b], color_};
      device_frames = true;
      continue;
    }
    // Host and Pinned frames go to slot b of dev_in_, tightly packed.
    std::byte* const dev = dev_in_.as() + b * frame_bytes_;
    std::byte* const staged = host_in_.as() + b * frame_bytes_;
    ops::ImageView view{};
    view.width = frame_.width;
    view.height = frame_.height;
    view.format = frame_.format;
    for (int i = 0; i < ops::plane_count(frame_.format); ++i) {
      const auto s = ops::plane_shape(frame_.format, frame_.width, frame_.height, i);
      const size_t offset = plane_offsets_[size_t(i)];
      const uint8_t* src = frames[b].data[i];
      if (memory[b] == FrameMemory::Pinned) {
        cuda::check(cudaMemcpy2DAsync(dev + offset, s.row_bytes, src, frames[b].pitch[i], s.row_bytes, s.rows,
                                      cudaMemcpyHostToDevice, copy_),
                    "upload pinned frame");
      } else {
        for (int r = 0; r < s.rows; ++r)
          std::memcpy(staged + offset + size_t(r) * s.row_bytes, src + size_t(r) * frames[b].pitch[i], s.row_bytes);
      }
      view.data[i] = reinterpret_cast<const uint8_t*>(dev + offset);
      view.pitch[i] = s.row_bytes;
    }
    if (memory[b] == FrameMemory::Host)
      cuda::check(cudaMemcpyAsync(dev, staged, frame_bytes_, cudaMemcpyHostToDevice, copy_), "upload frame");
    slots_[b] = {view, color_};
  }
  fused_.set_batch(std::span(slots_).first(frames.size()), dev_outs_);

  cuda::check(cudaEventRecord(uploaded_, copy_), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(compute_, uploaded_, 0), "cudaStreamWaitEvent");
  if (device_frames) {   // FFmpeg's NVDEC copies its output on the legacy default stream
    cuda::check(cudaEventRecord(decoded_, cudaStreamLegacy), "cudaEventRecord");
    cuda::check(cudaStreamWaitEvent(compute_, decoded_, 0), "cudaStreamWaitEvent");
  }
  if (control_) {
    control_->run(fused_, static_cast<int>(frames.size()), compute_);
  } else {
    fused_.run(compute_);
  }
  cuda::check(cudaEventRecord(computed_, compute_), "cudaEventRecord");   // frame memory is free from here
  cuda::check(cudaStreamWaitEvent(copy_, computed_, 0), "cudaStreamWaitEvent");
  for (size_t k = 0; k < out_bytes_.size(); ++k) {
    cuda::check(cudaMemcpyAsync(host_out_.as() + out_offsets_[k], dev_outs_[k], out_bytes_[k] * frames.size(),
                                cudaMemcpyDeviceToHost, copy_),
                "download outputs");
  }
  cuda::check(cudaEventRecord(downloaded_, copy_), "cudaEventRecord");
}

}  // namespace framefuse
