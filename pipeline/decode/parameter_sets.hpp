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

//! Frames the stream's decoded picture buffer may hold, from a sequence parameter set NAL unit
//! (find_sps()): H.264 max_num_ref_frames (frames kept only for output reordering come on top);
//! HEVC sps_max_dec_pic_buffering_minus1 + 1 of the highest sub-layer (reordering included). -1
//! when `sps` is empty or cannot be read.
int dpb_frames(SpsCodec codec, std::span<const uint8_t> sps);

}  // namespace framefuse
