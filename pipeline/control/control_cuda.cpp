#include "pipeline/control/control_cuda.hpp"

#include <atomic>
#include <cstring>
#include <spdlog/fmt/fmt.h>

#include "pipeline/control/control_engine.hpp"

namespace framefuse::control {
namespace {

constexpr size_t kThumbBytes = sizeof(float) * kThumbPixels;

}  // namespace

void CudaControl::setup(const ControlParams& params, int max_batch, cudaStream_t stream) {
  const ops::Chain::Params& t = params.thumbnail;
  if (t.store.width != kThumbW || t.store.height != kThumbH || t.store.channels != 1 ||
      t.store.dtype != ops::DType::F32 || t.frame_stride != int64_t(kThumbBytes))
    throw ConfigError(fmt::format("cuda control: the thumbnail output must be a {}x{} gray f32 tensor", kThumbW,
                                  kThumbH));
  if (params.delay < 1 || params.delay > kMaxDelay || params.depth != params.delay + 1 || params.num_outputs < 1 ||
      params.num_outputs > kMaxOutputs - 1)
    throw ConfigError(fmt::format("cuda control: delay {} / depth {} / {} outputs were not planned by "
                                  "make_control_params",
                                  params.delay, params.depth, params.num_outputs));
  if (max_batch < 1 || max_batch > kMaxBatch)
    throw ConfigError(fmt::format("cuda control: a batch of 1..{} frames, got {}", kMaxBatch, max_batch));
  params_ = params;
  max_batch_ = max_batch;

  const size_t params_at = 0;
  const size_t block_at = cuda::align_up(params_at + sizeof(ControlParams));
  const size_t slots_at = cuda::align_up(block_at + sizeof(ControlBlock));
  const size_t previous_at = cuda::align_up(slots_at + sizeof(Slot) * size_t(params.depth));
  memory_ = cuda::alloc_device(previous_at + kThumbBytes);
  thumbnails_ = cuda::alloc_device(kThumbBytes * size_t(max_batch));
  records_ = cuda::alloc_mapped(sizeof(PublishedRecord) * kRecordRing);
  std::memset(records_.as(), 0, records_.size());
  void* records = nullptr;
  cuda::check(cudaHostGetDevicePointer(&records, records_.as(), 0), "cudaHostGetDevicePointer");
  std::byte* const base = memory_.as();
  device_.params = reinterpret_cast<const ControlParams*>(base + params_at);
  device_.block = reinterpret_cast<ControlBlock*>(base + block_at);
  device_.slots = reinterpret_cast<Slot*>(base + slots_at);
  device_.previous = reinterpret_cast<float*>(base + previous_at);
  device_.records = static_cast<PublishedRecord*>(records);

  const ControlBlock initial = initial_block(params);
  cuda::check(cudaMemcpyAsync(base + params_at, &params_, sizeof params_, cudaMemcpyHostToDevice, stream),
              "upload control parameters");
  cuda::check(cudaMemcpyAsync(device_.block, &initial, sizeof initial, cudaMemcpyHostToDevice, stream),
              "upload control block");
  cuda::check(cudaMemsetAsync(device_.slots, 0, sizeof(Slot) * size_t(params.depth), stream), "clear control slots");
  cuda::check(cudaMemsetAsync(device_.previous, 0, kThumbBytes, stream), "clear previous thumbnail");
  cuda::check(cudaMemsetAsync(thumbnails_.as(), 0, thumbnails_.size(), stream), "clear thumbnails");
  cuda::check(cudaStreamSynchronize(stream), "control setup");   // `initial` is a local
}

OutputPlan CudaControl::thumbnail_plan() const {
  OutputPlan plan;
  plan.name = thumbnail_spec().name;
  plan.params = params_.thumbnail;
  plan.shape = {1, kThumbH, kThumbW};
  plan.bytes_per_frame = kThumbBytes;
  return plan;
}

void CudaControl::run(const FusedPreprocess& fused, int frames, cudaStream_t stream) const {
  if (frames < 1 || frames > max_batch_)
    throw ConfigError(fmt::format("cuda control: {} frames, the batch holds 1..{}", frames, max_batch_));
  fused.upload(stream);
  for (int b = 0; b < frames; ++b) {
    control_step(stream);
    fused.launch(b, 1, stream);
    stats_step(b, stream);
  }
}

void CudaControl::control_step(cudaStream_t stream) const {
  cuda::check(launch_control_step(device_, stream), "control step launch");
}

void CudaControl::stats_step(int frame, cudaStream_t stream) const {
  if (frame < 0 || frame >= max_batch_)
    throw ConfigError(fmt::format("cuda control: frame {} outside the batch of {}", frame, max_batch_));
  cuda::check(launch_control_stats(device_, thumbnails() + size_t(frame) * kThumbPixels, stream),
              "control statistics launch");
}

std::optional<ControlRecord> CudaControl::record() const {
  PublishedRecord* const ring = records_.as<PublishedRecord>();
  if (!ring) return std::nullopt;
  uint64_t newest = 0;
  ControlRecord out{};
  for (int e = 0; e < kRecordRing; ++e) {
    std::atomic_ref<uint64_t> seq(ring[e].seq);
    const uint64_t before = seq.load(std::memory_order_acquire);
    if (before == 0 || before % 2 != 0 || before <= newest) continue;   // empty, being written, older
    ControlRecord copy;
    std::memcpy(&copy, &ring[e].record, sizeof copy);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq.load(std::memory_order_relaxed) != before) continue;   // rewritten while copied
    newest = before;
    out = copy;
  }
  if (newest == 0) return std::nullopt;
  return out;
}

}  // namespace framefuse::control
