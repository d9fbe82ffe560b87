#pragma once
//! Parameters of one fused launch, in two parts. FusedLaunch is fixed at setup and travels by value
//! as the kernel's `__grid_constant__` parameter (constant bank: no dependent global read); it holds
//! the outputs' planned parameters, tiling and tap tables. FusedParams is what varies per call
//! (frames, output tensors): it lives in device memory and is refreshed from pinned
//! host memory by a staging kernel enqueued before the fused kernel, so a captured graph replays
//! unchanged while frames, tensors, crop windows or gains vary. POD, no CUDA types.
#include <cstddef>
#include <cstdint>

#include "pipeline/ops/chain.hpp"

namespace framefuse {
namespace control {
struct FusedControl;   // pipeline/control/fused_control.hpp
}

inline constexpr int kMaxOutputs = 8;    //!< outputs fused horizontally into one launch
inline constexpr int kMaxBatch = 64;     //!< frames per launch
//! A block is kTileW x kBlockRows threads; each thread computes `rows_per_thread` pixels of one
//! column, kBlockRows apart, so a tile is kTileW x (kBlockRows * rows_per_thread) output pixels.
inline constexpr int kTileW = 32, kBlockRows = 8;
inline constexpr int kBlockThreads = kTileW * kBlockRows;
inline constexpr int kRowsPerThreadChoices[] = {1, 2, 4};

//! One input frame of a batch with its own colour interpretation (streams may differ).
struct FrameSlot {
  ops::ImageView image;
  ops::ColorParams color;
};

//! The per-call part: device memory, staged from pinned host memory by every run().
struct FusedParams {
  int32_t num_frames;                       //!< frames in this batch (<= launch's max batch)
  void* out[kMaxOutputs];                   //!< device tensor of frame 0 per output
  FrameSlot frames[kMaxBatch];              //!< last: only the first max_batch are uploaded
};

//! Bytes of the parameter block a launch of up to `max_batch` frames reads, rounded up to the
//! 16-byte words the upload moves (the staging and device copies are at least this large).
constexpr size_t params_bytes(int max_batch) {
  return (offsetof(FusedParams, frames) + sizeof(FrameSlot) * static_cast<size_t>(max_batch) + 15) / 16 * 16;
}

//! One output column or row: Resize::axis_taps of its resized index, relative to the crop origin;
//! inside = 0 where the index lies outside the resized image (the pad shows there).
struct alignas(16) AxisTap {
  ops::Resize::Taps2 taps;
  int32_t inside;
};

//! Store choices the kernel compiles with channel order, layout and dtype fixed (Chain::emit's
//! switches fold away): the canonical workloads' outputs (pipeline/workloads.hpp).
struct FixedStore {
  ops::Channels channels;
  ops::Layout layout;
  ops::DType dtype;
};
inline constexpr FixedStore kFixedStores[] = {
    {ops::Channels::Rgb, ops::Layout::Chw, ops::DType::F32},   // classify
    {ops::Channels::Rgb, ops::Layout::Chw, ops::DType::F16},   // detect
    {ops::Channels::Rgb, ops::Layout::Hwc, ops::DType::U8},    // thumbnail
};
inline constexpr int kNumFixedStores = static_cast<int>(sizeof(kFixedStores) / sizeof(kFixedStores[0]));
//! How the kernel computes an output: i < kNumFixedStores: tap tables + kFixedStores[i];
//! kVariantTaps: tap tables, any store; kVariantBox: Chain::pixel as it is (AreaBox).
inline constexpr int32_t kVariantTaps = kNumFixedStores, kVariantBox = kNumFixedStores + 1;

//! An output as the kernel sees it.
struct FusedOutput {
  ops::Chain::Params params;   //!< store.data unused: FusedParams::out
  const AxisTap* cols;         //!< device, store.width entries (null for kVariantBox)
  const AxisTap* rows;         //!< device, store.height entries (null for kVariantBox)
  int32_t variant;
};

//! The fixed part: the kernel's by-value parameter.
struct FusedLaunch {
  const FusedParams* block;   //!< device copy of the per-call part
  int32_t num_outputs;
  //! Blocks of output k: [tile_begin[k], tile_begin[k+1]); entries past num_outputs hold the total,
  //! so a block finds its output by counting entries <= its index, without a dependent loop.
  int32_t tile_begin[kMaxOutputs + 1];
  int32_t tiles_x[kMaxOutputs];             //!< tile columns of output k
  FusedOutput outputs[kMaxOutputs];
  //! A pipeline's control (device memory, null = none): output blocks apply its state
  //! (control::apply) and blocks [0, stats_blocks), before the tiles, compute its statistics
  //! (pipeline/control/stats_blocks.cuh). Launches are then of one frame each.
  control::FusedControl* control;
  int32_t stats_blocks;
};

//! The variant for planned parameters `p`.
inline int32_t fused_variant(const ops::Chain::Params& p) {
  if (p.resize.interp == ops::Interp::AreaBox) return kVariantBox;
  for (int i = 0; i < kNumFixedStores; ++i) {
    const FixedStore& f = kFixedStores[i];
    if (p.channels == f.channels && p.store.layout == f.layout && p.store.dtype == f.dtype) return i;
  }
  return kVariantTaps;
}

//! Fills the tiling fields of `l` from its outputs' sizes for tiles of kBlockRows * rows_per_thread
//! rows; returns the total number of tiles.
inline int32_t tile_outputs(FusedLaunch& l, int rows_per_thread) {
  const int tile_h = kBlockRows * rows_per_thread;
  l.tile_begin[0] = 0;
  for (int k = 0; k < kMaxOutputs; ++k) {
    if (k < l.num_outputs) {
      const auto& s = l.outputs[k].params.store;
      l.tiles_x[k] = (s.width + kTileW - 1) / kTileW;
      l.tile_begin[k + 1] = l.tile_begin[k] + l.tiles_x[k] * ((s.height + tile_h - 1) / tile_h);
    } else {
      l.tiles_x[k] = 0;
      l.tile_begin[k + 1] = l.tile_begin[k];
    }
  }
  return l.tile_begin[kMaxOutputs];
}

}  // namespace framefuse
