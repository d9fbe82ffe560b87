#pragma once
//! What a decoder must keep of an H.264 or HEVC stream, read from its sequence parameter set
//! before any frame is decoded, so NVDEC can be given as few decode surfaces as the stream needs.
#include <cstdint>
#include <span>

namespace framefuse {

enum class SpsCodec { H264, Hevc };

//! The first sequence parameter set NAL unit (its header included, no start code) in `data`: an
//! avcC / hvcC record (first byte 1) or Annex B NAL units with start codes. Empty if there is none.
std::span<const uint8_t> find_sps(SpsCodec codec, std::span<const uint8_t> data);

//! The frames a stream's decoded picture buffer holds, as its sequence parameter set states them.
struct DpbSize {
  int frames = -1;                //!< in [0, 16]; -1: no SPS, or one that cannot be read
  bool reordering_included = false;   //!< false: frames held only for output reordering come on top
};

//! The DPB of a sequence parameter set NAL unit (find_sps()). H.264: the VUI's
//! max_dec_frame_buffering when it is there and not below max_num_ref_frames (reordering
//! included), else max_num_ref_frames (reordering not included). HEVC: the highest sub-layer's
//! sps_max_dec_pic_buffering_minus1 + 1 (reordering included). The whole SPS up to that field must
//! read, or `frames` is -1.
DpbSize dpb_size(SpsCodec codec, std::span<const uint8_t> sps);

}  // namespace framefuse
