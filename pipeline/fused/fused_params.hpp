#pragma once
//! The device parameter block of one fused launch. It lives in device memory and is refreshed from
//! pinned host memory by a staging kernel enqueued before the fused kernel, so a captured graph
//! replays unchanged while frames, crop windows or gains vary. POD, no CUDA types.
#include <cstddef>
#include <cstdint>

#include "pipeline/ops/chain.hpp"

namespace framefuse {
namespace control {
struct ControlState;   // pipeline/control/control_state.hpp
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

struct FusedParams {
  int32_t num_frames;                       //!< frames in this batch (<= launch's max batch)
  int32_t num_outputs;
  //! Blocks of output k: [tile_begin[k], tile_begin[k+1]); entries past num_outputs hold the total,
  //! so a block finds its output by counting entries <= its index, without a dependent loop.
  int32_t tile_begin[kMaxOutputs + 1];
  int32_t tiles_x[kMaxOutputs];             //!< tile columns of output k
  ops::Chain::Params outputs[kMaxOutputs];  //!< store.data: device tensor of frame 0
  //! Device memory, null = none: every block applies it to its output's parameters
  //! (control::apply) before computing; written by the control kernel of the same iteration.
  const control::ControlState* control;
  FrameSlot frames[kMaxBatch];              //!< last: only the first max_batch are uploaded
};

//! Bytes of the parameter block a launch of up to `max_batch` frames reads, rounded up to the
//! 16-byte words the upload moves (the staging and device copies are at least this large).
constexpr size_t params_bytes(int max_batch) {
  return (offsetof(FusedParams, frames) + sizeof(FrameSlot) * static_cast<size_t>(max_batch) + 15) / 16 * 16;
}

//! Fills the tiling fields of `p` from its outputs' sizes for tiles of kBlockRows * rows_per_thread
//! rows; returns the total number of tiles.
inline int32_t tile_outputs(FusedParams& p, int rows_per_thread) {
  const int tile_h = kBlockRows * rows_per_thread;
  p.tile_begin[0] = 0;
  for (int k = 0; k < kMaxOutputs; ++k) {
    if (k < p.num_outputs) {
      const auto& s = p.outputs[k].store;
      p.tiles_x[k] = (s.width + kTileW - 1) / kTileW;
      p.tile_begin[k + 1] = p.tile_begin[k] + p.tiles_x[k] * ((s.height + tile_h - 1) / tile_h);
    } else {
      p.tiles_x[k] = 0;
      p.tile_begin[k + 1] = p.tile_begin[k];
    }
  }
  return p.tile_begin[kMaxOutputs];
}

}  // namespace framefuse
