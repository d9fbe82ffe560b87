#include "tests/bench/unfused_kernels.hpp"

#include "pipeline/ops/dispatch.hpp"

namespace framefuse::bench {
namespace {

constexpr int kBx = 32, kBy = 8;

//! Reads an RGB f32 HWC image (the to_rgb intermediate) as Resize::sample's source.
struct RgbF32Reader {
  const float* data;
  int32_t width;
  FF_HD ops::Vec3 rgb(int x, int y) const {
    const float* p = data + (int64_t(y) * width + x) * 3;
    return {p[0], p[1], p[2]};
  }
};

__device__ __forceinline__ void put(float* img, int32_t w, int x, int y, ops::Vec3 v) {
  float* p = img + (int64_t(y) * w + x) * 3;
  p[0] = v.x;
  p[1] = v.y;
  p[2] = v.z;
}

__global__ void empty_kernel() {}

template <ops::PixelFormat F>
__global__ void to_rgb_kernel(const FrameSlot* frames, float* rgb, int32_t w, int32_t h) {
  const int x = blockIdx.x * kBx + threadIdx.x, y = blockIdx.y * kBy + threadIdx.y, b = blockIdx.z;
  if (x >= w || y >= h) return;
  const ops::FrameReader<F> src{frames[b].image, frames[b].color};
  put(rgb + int64_t(b) * w * h * 3, w, x, y, src.rgb(x, y));
}

__global__ void resize_kernel(const float* rgb, int32_t frame_w, int32_t frame_h, ops::Resize::Params p, float* dst) {
  const int x = blockIdx.x * kBx + threadIdx.x, y = blockIdx.y * kBy + threadIdx.y, b = blockIdx.z;
  if (x >= p.dst_w || y >= p.dst_h) return;
  const RgbF32Reader src{rgb + int64_t(b) * frame_w * frame_h * 3, frame_w};
  put(dst + int64_t(b) * p.dst_w * p.dst_h * 3, p.dst_w, x, y, ops::Resize::sample(src, p, x, y));
}

__global__ void window_kernel(const float* resized, ops::Chain::Params p, float* dst) {
  const int x = blockIdx.x * kBx + threadIdx.x, y = blockIdx.y * kBy + threadIdx.y, b = blockIdx.z;
  const int w = p.store.width, h = p.store.height;
  if (x >= w || y >= h) return;
  const int rx = x + p.off_x, ry = y + p.off_y, rw = p.resize.dst_w, rh = p.resize.dst_h;
  const ops::Vec3 v = rx < 0 || ry < 0 || rx >= rw || ry >= rh
                          ? ops::Vec3{p.pad[0], p.pad[1], p.pad[2]}
                          : RgbF32Reader{resized + int64_t(b) * rw * rh * 3, rw}.rgb(rx, ry);
  put(dst + int64_t(b) * w * h * 3, w, x, y, v);
}

__global__ void normalize_kernel(float* data, int64_t n, ops::Normalize::Params p) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) data[i] = ops::Normalize::apply(data[i], int(i % 3), p);
}

__global__ void store_kernel(const float* src, ops::Store::Params st, int64_t frame_stride) {
  const int x = blockIdx.x * kBx + threadIdx.x, y = blockIdx.y * kBy + threadIdx.y, b = blockIdx.z;
  if (x >= st.width || y >= st.height) return;
  const float* p = src + ((int64_t(b) * st.height + y) * st.width + x) * 3;
  st.data = static_cast<uint8_t*>(st.data) + frame_stride * b;
  for (int c = 0; c < 3; ++c) ops::Store::apply(st, x, y, c, p[c]);
}

dim3 grid_2d(int w, int h, int batch) {
  return dim3(unsigned((w + kBx - 1) / kBx), unsigned((h + kBy - 1) / kBy), unsigned(batch));
}

}  // namespace

void UnfusedPreprocess::setup(const FrameInfo& frame, std::span<const OutputPlan> plans, int max_batch) {
  frame_ = frame;
  rgb_ = cuda::alloc_device(size_t(frame.width) * frame.height * 3 * sizeof(float) * max_batch);
  outputs_.clear();
  for (const auto& plan : plans) {
    const ops::Chain::Params& p = plan.params;
    if (p.channels != ops::Channels::Rgb)
      throw ConfigError("unfused baseline: output '" + plan.name + "' must be rgb");
    Output o{p, p.off_x != 0 || p.off_y != 0 || p.store.width != p.resize.dst_w || p.store.height != p.resize.dst_h,
             cuda::alloc_device(size_t(p.resize.dst_w) * p.resize.dst_h * 3 * sizeof(float) * max_batch), {}};
    if (o.windowed)
      o.window = cuda::alloc_device(size_t(p.store.width) * p.store.height * 3 * sizeof(float) * max_batch);
    outputs_.push_back(std::move(o));
  }
}

int UnfusedPreprocess::launches() const {
  int n = 1;
  for (const auto& o : outputs_) n += o.windowed ? 4 : 3;
  return n;
}

cudaError_t launch_empty(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

void UnfusedPreprocess::run(const FrameSlot* frames, int batch, std::span<void* const> outs,
                            cudaStream_t stream) const {
  const int w = frame_.width, h = frame_.height;
  ops::dispatch_format(frame_.format, [&](auto tag) {
    to_rgb_kernel<decltype(tag)::value>
        <<<grid_2d(w, h, batch), dim3(kBx, kBy), 0, stream>>>(frames, rgb_.as<float>(), w, h);
    return 0;
  });
  cuda::check(cudaGetLastError(), "unfused to_rgb");
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const Output& o = outputs_[k];
    const auto& p = o.chain;
    resize_kernel<<<grid_2d(p.resize.dst_w, p.resize.dst_h, batch), dim3(kBx, kBy), 0, stream>>>(
        rgb_.as<float>(), w, h, p.resize, o.resized.as<float>());
    cuda::check(cudaGetLastError(), "unfused resize");
    float* cur = o.resized.as<float>();
    if (o.windowed) {
      window_kernel<<<grid_2d(p.store.width, p.store.height, batch), dim3(kBx, kBy), 0, stream>>>(
          cur, p, o.window.as<float>());
      cuda::check(cudaGetLastError(), "unfused window");
      cur = o.window.as<float>();
    }
    const int64_t n = int64_t(p.store.width) * p.store.height * 3 * batch;
    normalize_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(cur, n, p.norm);
    cuda::check(cudaGetLastError(), "unfused normalize");
    ops::Store::Params st = p.store;
    st.data = outs[k];
    store_kernel<<<grid_2d(p.store.width, p.store.height, batch), dim3(kBx, kBy), 0, stream>>>(cur, st, p.frame_stride);
    cuda::check(cudaGetLastError(), "unfused store");
  }
}

}  // namespace framefuse::bench
