#pragma once
//! The device parameter block of one fused launch. It lives in device memory and is refreshed by a
//! copy from pinned host memory enqueued before the kernel, so a captured graph replays unchanged
//! while frames, crop windows or gains vary. POD, no CUDA types.
#include <cstdint>

#include "pipeline/ops/chain.hpp"

namespace framefuse {

inline constexpr int kMaxOutputs = 8;    //!< outputs fused horizontally into one launch
inline constexpr int kMaxBatch = 64;     //!< frames per launch
inline constexpr int kTileW = 32, kTileH = 8;   //!< output pixels per thread block

//! One input frame of a batch with its own colour interpretation (streams may differ).
struct FrameSlot {
  ops::ImageView image;
  ops::ColorParams color;
};

struct FusedParams {
  int32_t num_frames;                       //!< frames in this batch (<= launch's max batch)
  int32_t num_outputs;
  int32_t tile_begin[kMaxOutputs + 1];      //!< blocks of output k: [tile_begin[k], tile_begin[k+1])
  int32_t tiles_x[kMaxOutputs];             //!< tile columns of output k
  ops::Chain::Params outputs[kMaxOutputs];  //!< store.data: device tensor of frame 0
  FrameSlot frames[kMaxBatch];
};

//! Fills the tiling fields of `p` from its outputs' sizes; returns the total number of tiles.
inline int32_t tile_outputs(FusedParams& p) {
  p.tile_begin[0] = 0;
  for (int k = 0; k < p.num_outputs; ++k) {
    const auto& s = p.outputs[k].store;
    p.tiles_x[k] = (s.width + kTileW - 1) / kTileW;
    p.tile_begin[k + 1] = p.tile_begin[k] + p.tiles_x[k] * ((s.height + kTileH - 1) / kTileH);
  }
  return p.tile_begin[p.num_outputs];
}

}  // namespace framefuse
