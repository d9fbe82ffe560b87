#include "pipeline/fused/fused_preprocess.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <spdlog/fmt/fmt.h>
#include <vector>

#include "pipeline/fused/fused_kernel.hpp"

namespace framefuse {
namespace {

//! Largest choice whose grid still fills 90 % of the device's resident block slots once (fewer,
//! longer blocks amortise a block's start; sm_90, classify B=16: 1.11 / 1.04 / 1.00 us per frame for
//! 1 / 2 / 4 rows, the last at 99 % of a wave, tests/bench/RESULTS.md); 1 when even that does not
//! fill it (small outputs, single frames: latency over amortisation).
int pick_rows_per_thread(ops::PixelFormat format, FusedLaunch& l, int max_batch) {
  int device = 0, sms = 0;
  cuda::check(cudaGetDevice(&device), "cudaGetDevice");
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "multiprocessor count");
  int best = 1;
  for (const int r : kRowsPerThreadChoices) {
    int per_sm = 0;
    cuda::check(fused_blocks_per_sm(format, r, &per_sm), "fused kernel occupancy");
    if (10 * int64_t(tile_outputs(l, r)) * max_batch >= 9 * int64_t(sms) * per_sm) best = r;
  }
  return best;
}

//! Resize::axis_taps of every output column (y_axis false) or row of `p`, with the window offset
//! applied: what Chain::pixel computes per pixel, tabulated.
void append_axis(const ops::Chain::Params& p, bool y_axis, std::vector<AxisTap>& out) {
  const int n = y_axis ? p.store.height : p.store.width;
  const int off = y_axis ? p.off_y : p.off_x, resized = y_axis ? p.resize.dst_h : p.resize.dst_w;
  for (int i = 0; i < n; ++i) {
    const int r = i + off;
    const bool inside = r >= 0 && r < resized;
    out.push_back({inside ? ops::Resize::axis_taps(p.resize, y_axis, r) : ops::Resize::Taps2{0, 0, 0.f},
                   inside ? 1 : 0});
  }
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
  std::memset(staging_.as(), 0, staging_.size());
  launch_ = FusedLaunch{};
  launch_.block = device_.as<FusedParams>();
  launch_.num_outputs = static_cast<int32_t>(plans.size());
  std::vector<AxisTap> taps;
  std::vector<size_t> cols(plans.size()), rows(plans.size());
  for (size_t k = 0; k < plans.size(); ++k) {
    FusedOutput& o = launch_.outputs[k];
    o.params = plans[k].params;
    o.variant = fused_variant(o.params);
    if (o.variant == kVariantBox) continue;
    cols[k] = taps.size();
    append_axis(o.params, false, taps);
    rows[k] = taps.size();
    append_axis(o.params, true, taps);
  }
  taps_ = cuda::DeviceBuffer{};
  if (!taps.empty()) {
    taps_ = cuda::alloc_device(taps.size() * sizeof(AxisTap));
    cuda::check(cudaMemcpy(taps_.as(), taps.data(), taps.size() * sizeof(AxisTap), cudaMemcpyHostToDevice),
                "upload fused tap tables");
    for (size_t k = 0; k < plans.size(); ++k) {
      FusedOutput& o = launch_.outputs[k];
      if (o.variant == kVariantBox) continue;
      o.cols = taps_.as<AxisTap>() + cols[k];
      o.rows = taps_.as<AxisTap>() + rows[k];
    }
  }
  rows_per_thread_ = rows_per_thread != 0 ? rows_per_thread : pick_rows_per_thread(format_, launch_, max_batch);
  tile_outputs(launch_, rows_per_thread_);
}

void FusedPreprocess::set_batch(std::span<const FrameSlot> frames, std::span<void* const> outs) {
  FusedParams& p = *staging_.as<FusedParams>();
  if (frames.empty() || frames.size() > size_t(max_batch_) || outs.size() != size_t(launch_.num_outputs))
    throw ConfigError("fused launch: batch or output count differs from setup()");
  for (size_t k = 0; k < outs.size(); ++k) {
    const int element = ops::dtype_size(launch_.outputs[k].params.store.dtype);
    if (reinterpret_cast<uintptr_t>(outs[k]) % uintptr_t(element) != 0)
      throw ConfigError(fmt::format("fused launch: output {} tensor at {} is not aligned to its {}-byte elements", k,
                                    outs[k], element));
  }
  p.num_frames = static_cast<int32_t>(frames.size());
  std::copy(frames.begin(), frames.end(), p.frames);
  std::copy(outs.begin(), outs.end(), p.out);
}

void FusedPreprocess::set_control(control::FusedControl* control, int32_t stats_blocks) {
  launch_.control = control;
  launch_.stats_blocks = control ? stats_blocks : 0;
}

void FusedPreprocess::run(cudaStream_t stream) const {
  upload(stream);
  launch(0, max_batch_, stream);
}

void FusedPreprocess::upload(cudaStream_t stream) const {
  cuda::check(stage_fused_params(staging_.as(), device_.as(), params_bytes(max_batch_), launch_.control, stream),
              "upload fused parameters");
}

void FusedPreprocess::launch(int first_frame, int frames, cudaStream_t stream) const {
  if (first_frame < 0 || frames < 1 || first_frame + frames > max_batch_)
    throw ConfigError(fmt::format("fused launch: frames [{}, {}) outside the batch of {}", first_frame,
                                  first_frame + frames, max_batch_));
  cuda::check(launch_fused(format_, rows_per_thread_, launch_, first_frame, frames, stream), "fused kernel launch");
}

}  // namespace framefuse
