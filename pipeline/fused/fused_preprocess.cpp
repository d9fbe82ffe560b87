#include "pipeline/fused/fused_preprocess.hpp"

#include <cstring>
#include <spdlog/fmt/fmt.h>

#include "pipeline/fused/fused_kernel.hpp"

namespace framefuse {

void FusedPreprocess::setup(const FrameInfo& frame, std::span<const OutputPlan> plans, int max_batch) {
  if (plans.empty() || plans.size() > size_t(kMaxOutputs))
    throw ConfigError(fmt::format("fused launch takes 1..{} outputs, got {}", kMaxOutputs, plans.size()));
  if (max_batch < 1 || max_batch > kMaxBatch)
    throw ConfigError(fmt::format("fused launch takes a batch of 1..{} frames, got {}", kMaxBatch, max_batch));
  format_ = frame.format;
  max_batch_ = max_batch;
  staging_ = cuda::alloc_pinned(sizeof(FusedParams));
  device_ = cuda::alloc_device(sizeof(FusedParams));
  FusedParams& p = *staging_.as<FusedParams>();
  std::memset(&p, 0, sizeof(p));
  p.num_outputs = static_cast<int32_t>(plans.size());
  for (size_t k = 0; k < plans.size(); ++k) p.outputs[k] = plans[k].params;
  tiles_ = tile_outputs(p);
}

void FusedPreprocess::set_batch(std::span<const FrameSlot> frames, std::span<void* const> outs) {
  FusedParams& p = *staging_.as<FusedParams>();
  if (frames.empty() || frames.size() > size_t(max_batch_) || outs.size() != size_t(p.num_outputs))
    throw ConfigError("fused launch: batch or output count differs from setup()");
  p.num_frames = static_cast<int32_t>(frames.size());
  std::copy(frames.begin(), frames.end(), p.frames);
  for (size_t k = 0; k < outs.size(); ++k) p.outputs[k].store.data = outs[k];
}

void FusedPreprocess::run(cudaStream_t stream) const {
  cuda::check(cudaMemcpyAsync(device_.as(), staging_.as(), sizeof(FusedParams), cudaMemcpyHostToDevice, stream),
              "upload fused parameters");
  cuda::check(launch_fused(format_, device_.as<FusedParams>(), tiles_, max_batch_, stream), "fused kernel launch");
}

}  // namespace framefuse
