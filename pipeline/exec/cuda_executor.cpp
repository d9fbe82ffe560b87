#include "pipeline/exec/cuda_executor.hpp"

#include <cstring>
#include <spdlog/fmt/fmt.h>

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
  frame_bytes_ = 0;
  for (int i = 0; i < ops::plane_count(frame.format); ++i) {
    const auto s = ops::plane_shape(frame.format, frame.width, frame.height, i);
    frame_bytes_ += size_t(s.row_bytes) * s.rows;
  }
  out_bytes_.clear();
  size_t out_total = 0;
  for (const auto& p : plans) {
    out_bytes_.push_back(p.bytes_per_frame);
    out_total += p.bytes_per_frame * max_batch;
  }
  copy_ = cuda::make_stream();
  compute_ = cuda::make_stream();
  uploaded_ = cuda::make_event();
  computed_ = cuda::make_event();
  downloaded_ = cuda::make_event();
  host_in_ = cuda::alloc_pinned(frame_bytes_ * max_batch);
  dev_in_ = cuda::alloc_device(frame_bytes_ * max_batch);
  host_out_ = cuda::alloc_pinned(out_total);
  dev_out_ = cuda::alloc_device(out_total);
  fused_.setup(frame, plans, max_batch);
}

void CudaExecutor::process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) {
  cuda::check(cudaSetDevice(device_), "cudaSetDevice");
  // Stage tightly packed planes into pinned memory; describe the device copy of each frame.
  std::vector<FrameSlot> slots(frames.size());
  for (size_t b = 0; b < frames.size(); ++b) {
    std::byte* host = host_in_.as() + b * frame_bytes_;
    std::byte* dev = dev_in_.as() + b * frame_bytes_;
    ops::ImageView view{};
    view.width = frame_.width;
    view.height = frame_.height;
    view.format = frame_.format;
    for (int i = 0; i < ops::plane_count(frame_.format); ++i) {
      const auto s = ops::plane_shape(frame_.format, frame_.width, frame_.height, i);
      for (int r = 0; r < s.rows; ++r)
        std::memcpy(host + size_t(r) * s.row_bytes, frames[b].data[i] + size_t(r) * frames[b].pitch[i], s.row_bytes);
      view.data[i] = reinterpret_cast<const uint8_t*>(dev);
      view.pitch[i] = s.row_bytes;
      host += size_t(s.row_bytes) * s.rows;
      dev += size_t(s.row_bytes) * s.rows;
    }
    slots[b] = {view, color_};
  }
  std::vector<void*> dev_outs(out_bytes_.size());
  size_t offset = 0;
  for (size_t k = 0; k < out_bytes_.size(); ++k) {
    dev_outs[k] = dev_out_.as() + offset;
    offset += out_bytes_[k] * fused_.max_batch();
  }
  fused_.set_batch(slots, dev_outs);

  cuda::check(cudaMemcpyAsync(dev_in_.as(), host_in_.as(), frame_bytes_ * frames.size(), cudaMemcpyHostToDevice, copy_),
              "upload frames");
  cuda::check(cudaEventRecord(uploaded_, copy_), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(compute_, uploaded_, 0), "cudaStreamWaitEvent");
  fused_.run(compute_);
  cuda::check(cudaEventRecord(computed_, compute_), "cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(copy_, computed_, 0), "cudaStreamWaitEvent");
  offset = 0;
  for (size_t k = 0; k < out_bytes_.size(); ++k) {
    cuda::check(cudaMemcpyAsync(host_out_.as() + offset, dev_outs[k], out_bytes_[k] * frames.size(),
                                cudaMemcpyDeviceToHost, copy_),
                "download outputs");
    offset += out_bytes_[k] * fused_.max_batch();
  }
  cuda::check(cudaEventRecord(downloaded_, copy_), "cudaEventRecord");
  cuda::check(cudaEventSynchronize(downloaded_), "wait for outputs");
  offset = 0;
  for (size_t k = 0; k < out_bytes_.size(); ++k) {
    std::memcpy(outs[k], host_out_.as() + offset, out_bytes_[k] * frames.size());
    offset += out_bytes_[k] * fused_.max_batch();
  }
}

}  // namespace framefuse
