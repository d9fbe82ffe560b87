#include "pipeline/fused/fused_preprocess.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <spdlog/fmt/fmt.h>

#include "pipeline/fused/fused_kernel.hpp"

namespace framefuse {
namespace {

//! Largest choice whose grid still covers the device twice (so the last wave's tail stays short);
//! 1 when even that does not fill it (small outputs, single frames: latency over amortisation).
int pick_rows_per_thread(ops::PixelFormat format, FusedParams& p, int max_batch) {
  int device = 0, sms = 0;
  cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  int best = 1;
  for (const int r : kRowsPerThreadChoices) {
    int per_sm = 0;
    cuda::check(fused_blocks_per_sm(format, r, &per_sm), "fused kernel occupancy");
    if (int64_t(tile_outputs(p, r)) * max_batch >= 2 * int64_t(sms) * per_sm) best = r;
  }
  return best;
}

}  // namespace

void FusedPreprocess::setup(const FrameInfo& frame, std::span<const OutputPlan> plans, int max_batch,
                            int rows_per_thread) {
  if (plans.empty() || plans.size() > size_t(kMaxOutputs))
    throw ConfigError(fmt::format("fused launch takes 1..{} outputs, got {}", kMaxOutputs, plans.size()));
  if (max_batch < 1 || max_batch > kMaxBatch)
    throw ConfigError(fmt::format("fused launch takes a batch of 1..{} frames, got {}", kMaxBatch, max_batch));
  if (rows_per_thread != 0 &&
      std::find(std::begin(kRowsPerThreadChoices), std::end(kRowsPerThreadChoices), rows_per_thread) ==
          std::end(kRowsPerThreadChoices))
    throw ConfigError(
        fmt::format("fused launch: rows_per_thread must be 0 (auto), 1, 2 or 4, got {}", rows_per_thread));
  format_ = frame.format;
  max_batch_ = max_batch;
  staging_ = cuda::alloc_pinned(std::max(sizeof(FusedParams), params_bytes(kMaxBatch)));
  device_ = cuda::alloc_device(params_bytes(max_batch));
  FusedParams& p = *staging_.as<FusedParams>();
  std::memset(&p, 0, sizeof(p));
  p.num_outputs = static_cast<int32_t>(plans.size());
  for (size_t k = 0; k < plans.size(); ++k) p.outputs[k] = plans[k].params;
  rows_per_thread_ = rows_per_thread != 0 ? rows_per_thread : pick_rows_per_thread(format_, p, max_batch);
  tiles_ = tile_outputs(p, rows_per_thread_);
}

void FusedPreprocess::set_batch(std::span<const FrameSlot> frames, std::span<void* const> outs) {
  FusedParams& p = *staging_.as<FusedParams>();
  if (frames.empty() || frames.size() > size_t(max_batch_) || outs.size() != size_t(p.num_outputs))
    throw ConfigError("fused launch: batch or output count differs from setup()");
  for (size_t k = 0; k < outs.size(); ++k) {
    const int element = ops::dtype_size(p.outputs[k].store.dtype);
    if (reinterpret_cast<uintptr_t>(outs[k]) % uintptr_t(element) != 0)
      throw ConfigError(fmt::format("fused launch: output {} tensor at {} is not aligned to its {}-byte elements", k,
                                    outs[k], element));
  }
  p.num_frames = static_cast<int32_t>(frames.size());
  std::copy(frames.begin(), frames.end(), p.frames);
  for (size_t k = 0; k < outs.size(); ++k) p.outputs[k].store.data = outs[k];
}

void FusedPreprocess::set_control(const control::ControlState* state) { staging_.as<FusedParams>()->control = state; }

void FusedPreprocess::run(cudaStream_t stream) const {
  upload(stream);
  launch(0, max_batch_, stream);
}

void FusedPreprocess::upload(cudaStream_t stream) const {
  cuda::check(stage_fused_params(staging_.as(), device_.as(), params_bytes(max_batch_), stream),
              "upload fused parameters");
}

void FusedPreprocess::launch(int first_frame, int frames, cudaStream_t stream) const {
  if (first_frame < 0 || frames < 1 || first_frame + frames > max_batch_)
    throw ConfigError(fmt::format("fused launch: frames [{}, {}) outside the batch of {}", first_frame,
                                  first_frame + frames, max_batch_));
  cuda::check(launch_fused(format_, rows_per_thread_, device_.as<FusedParams>(), tiles_, first_frame, frames, stream),
              "fused kernel launch");
}

}  // namespace framefuse
