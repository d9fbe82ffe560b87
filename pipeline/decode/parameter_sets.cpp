#include "pipeline/decode/parameter_sets.hpp"

#include <vector>

namespace framefuse {
namespace {

//! Thrown when a read runs past the parameter set or a value breaks the standard's range.
struct Malformed {};

//! Big-endian bits of an RBSP (emulation-prevention bytes removed), with Exp-Golomb codes.
class BitReader {
 public:
  explicit BitReader(std::vector<uint8_t> rbsp) : data_(std::move(rbsp)) {}

  uint32_t bits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (pos_ >= data_.size() * 8) throw Malformed{};
      v = (v << 1) | ((data_[pos_ / 8] >> (7 - pos_ % 8)) & 1u);
      ++pos_;
    }
    return v;
  }
  void skip(int n) { bits(n); }
  bool flag() { return bits(1) != 0; }
  uint32_t ue() {
    int zeros = 0;
    while (!flag())
      if (++zeros > 31) throw Malformed{};
    return ((1u << zeros) - 1) + bits(zeros);
  }
  int32_t se() {
    const uint32_t k = ue();
    return (k & 1u) ? static_cast<int32_t>((k + 1) / 2) : -static_cast<int32_t>(k / 2);
  }

 private:
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
};

//! The NAL unit's payload after its `header` bytes, with every 00 00 03 turned into 00 00.
std::vector<uint8_t> rbsp(std::span<const uint8_t> nal, size_t header) {
  std::vector<uint8_t> out;
  int zeros = 0;
  for (size_t i = header; i < nal.size(); ++i) {
    if (zeros >= 2 && nal[i] == 3) {
      zeros = 0;
      continue;
    }
    zeros = nal[i] == 0 ? zeros + 1 : 0;
    out.push_back(nal[i]);
  }
  return out;
}

bool is_sps(SpsCodec codec, uint8_t first_header_byte) {
  return codec == SpsCodec::H264 ? (first_header_byte & 0x1f) == 7 : ((first_header_byte >> 1) & 0x3f) == 33;
}

uint32_t be16(std::span<const uint8_t> d, size_t at) { return (uint32_t(d[at]) << 8) | d[at + 1]; }

}  // namespace

std::span<const uint8_t> find_sps(SpsCodec codec, std::span<const uint8_t> d) {
  if (d.size() > 6 && d[0] == 1 && codec == SpsCodec::H264) {   // avcC: the SPS come first
    if ((d[5] & 0x1f) == 0 || d.size() < 8) return {};
    const size_t len = be16(d, 6);
    return 8 + len <= d.size() ? d.subspan(8, len) : std::span<const uint8_t>{};
  }
  if (d.size() > 22 && d[0] == 1 && codec == SpsCodec::Hevc) {   // hvcC: arrays of NAL units by type
    size_t at = 23;
    for (uint32_t a = 0; a < d[22] && at + 3 <= d.size(); ++a) {
      const bool sps = (d[at] & 0x3f) == 33;
      const uint32_t count = be16(d, at + 1);
      at += 3;
      for (uint32_t n = 0; n < count && at + 2 <= d.size(); ++n) {
        const size_t len = be16(d, at);
        if (at + 2 + len > d.size()) return {};
        if (sps) return d.subspan(at + 2, len);
        at += 2 + len;
      }
    }
    return {};
  }
  // Annex B: each NAL unit follows 00 00 01 and ends where the next start code (or 00 00 00) begins.
  for (size_t i = 0; i + 3 < d.size(); ++i) {
    if (d[i] != 0 || d[i + 1] != 0 || d[i + 2] != 1 || !is_sps(codec, d[i + 3])) continue;
    size_t end = i + 3;
    while (end + 2 < d.size() && !(d[end] == 0 && d[end + 1] == 0 && d[end + 2] <= 1)) ++end;
    if (end + 2 >= d.size()) end = d.size();
    return d.subspan(i + 3, end - (i + 3));
  }
  return {};
}

namespace {

//! H.264 E.1.2 hrd_parameters(), skipped.
void skip_h264_hrd(BitReader& r) {
  const uint32_t cpb_count = r.ue() + 1;
  if (cpb_count > 32) throw Malformed{};
  r.skip(8);   // bit_rate_scale, cpb_size_scale
  for (uint32_t i = 0; i < cpb_count; ++i) {
    r.ue();       // bit_rate_value_minus1
    r.ue();       // cpb_size_value_minus1
    r.skip(1);    // cbr_flag
  }
  r.skip(20);   // four delay and offset lengths, 5 bits each
}

//! H.264 E.1.1 up to max_dec_frame_buffering; -1 when the VUI has no bitstream restriction.
int h264_vui_dpb_frames(BitReader& r) {
  if (r.flag() && r.bits(8) == 255) r.skip(32);   // aspect_ratio_idc; Extended_SAR: sar_width, sar_height
  if (r.flag()) r.skip(1);                         // overscan_appropriate_flag
  if (r.flag()) {                                  // video_signal_type_present_flag
    r.skip(4);                                     // video_format, video_full_range_flag
    if (r.flag()) r.skip(24);                      // colour primaries, transfer, matrix
  }
  if (r.flag()) {   // chroma_loc_info_present_flag
    r.ue();
    r.ue();
  }
  if (r.flag()) r.skip(65);   // timing_info: num_units_in_tick, time_scale, fixed_frame_rate_flag
  const bool nal_hrd = r.flag();
  if (nal_hrd) skip_h264_hrd(r);
  const bool vcl_hrd = r.flag();
  if (vcl_hrd) skip_h264_hrd(r);
  if (nal_hrd || vcl_hrd) r.skip(1);   // low_delay_hrd_flag
  r.skip(1);                           // pic_struct_present_flag
  if (!r.flag()) return -1;            // bitstream_restriction_flag
  r.skip(1);                           // motion_vectors_over_pic_boundaries_flag
  for (int i = 0; i < 5; ++i) r.ue();  // max bytes per picture, bits per macroblock, mv lengths, reorder frames
  return static_cast<int>(r.ue());     // max_dec_frame_buffering
}

//! H.264 7.3.2.1.1: max_dec_frame_buffering from the VUI when it is there (the whole DPB), else
//! max_num_ref_frames (reordered frames on top).
DpbSize h264_dpb(BitReader& r) {
  const uint32_t profile = r.bits(8);
  r.skip(16);   // constraint flags, level_idc
  r.ue();       // seq_parameter_set_id
  if (profile == 100 || profile == 110 || profile == 122 || profile == 244 || profile == 44 || profile == 83 ||
      profile == 86 || profile == 118 || profile == 128 || profile == 138 || profile == 139 || profile == 134 ||
      profile == 135) {
    const uint32_t chroma_format = r.ue();
    if (chroma_format == 3) r.skip(1);   // separate_colour_plane_flag
    r.ue();                              // bit_depth_luma_minus8
    r.ue();                              // bit_depth_chroma_minus8
    r.skip(1);                           // qpprime_y_zero_transform_bypass_flag
    if (r.flag()) {                      // seq_scaling_matrix_present_flag: skip the lists (7.3.2.1.1.1)
      for (int i = 0; i < (chroma_format != 3 ? 8 : 12); ++i) {
        if (!r.flag()) continue;
        int last = 8, next = 8;
        for (int j = 0; j < (i < 6 ? 16 : 64) && next != 0; ++j) {
          const int32_t delta = r.se();   // delta_scale: -128..127
          if (delta < -128 || delta > 127) throw Malformed{};
          next = (last + delta + 256) % 256;
          last = next == 0 ? last : next;
        }
      }
    }
  }
  r.ue();   // log2_max_frame_num_minus4
  const uint32_t poc_type = r.ue();
  if (poc_type == 0) {
    r.ue();   // log2_max_pic_order_cnt_lsb_minus4
  } else if (poc_type == 1) {
    r.skip(1);   // delta_pic_order_always_zero_flag
    r.se();      // offset_for_non_ref_pic
    r.se();      // offset_for_top_to_bottom_field
    const uint32_t cycle = r.ue();
    if (cycle > 255) throw Malformed{};
    for (uint32_t i = 0; i < cycle; ++i) r.se();
  }
  const int ref_frames = static_cast<int>(r.ue());   // max_num_ref_frames
  if (ref_frames > 16) return {};
  r.skip(1);   // gaps_in_frame_num_value_allowed_flag
  r.ue();      // pic_width_in_mbs_minus1
  r.ue();      // pic_height_in_map_units_minus1
  if (!r.flag()) r.skip(1);   // frame_mbs_only_flag, mb_adaptive_frame_field_flag
  r.skip(1);                  // direct_8x8_inference_flag
  if (r.flag())               // frame_cropping_flag: four offsets
    for (int i = 0; i < 4; ++i) r.ue();
  const int dpb = r.flag() ? h264_vui_dpb_frames(r) : -1;   // vui_parameters_present_flag
  // E.2.1: max_dec_frame_buffering >= max_num_ref_frames; a stream that says less is not trusted.
  if (dpb >= ref_frames && dpb <= 16) return {dpb, true};
  return {ref_frames, false};
}

//! HEVC 7.3.2.2.1 up to the highest sub-layer's sps_max_dec_pic_buffering_minus1, plus one.
int hevc_dpb_frames(BitReader& r) {
  r.skip(4);   // sps_video_parameter_set_id
  const int sub_layers_minus1 = static_cast<int>(r.bits(3));
  r.skip(1);    // sps_temporal_id_nesting_flag
  r.skip(88);   // profile_tier_level: general profile (7.3.3)
  r.skip(8);    // general_level_idc
  bool profile_present[8] = {}, level_present[8] = {};
  for (int i = 0; i < sub_layers_minus1; ++i) {
    profile_present[i] = r.flag();
    level_present[i] = r.flag();
  }
  if (sub_layers_minus1 > 0)
    for (int i = sub_layers_minus1; i < 8; ++i) r.skip(2);   // reserved_zero_2bits
  for (int i = 0; i < sub_layers_minus1; ++i) {
    if (profile_present[i]) r.skip(88);
    if (level_present[i]) r.skip(8);
  }
  r.ue();   // sps_seq_parameter_set_id
  if (r.ue() == 3) r.skip(1);   // chroma_format_idc, separate_colour_plane_flag
  r.ue();                       // pic_width_in_luma_samples
  r.ue();                       // pic_height_in_luma_samples
  if (r.flag())                 // conformance_window_flag: four offsets
    for (int i = 0; i < 4; ++i) r.ue();
  r.ue();   // bit_depth_luma_minus8
  r.ue();   // bit_depth_chroma_minus8
  r.ue();   // log2_max_pic_order_cnt_lsb_minus4
  const bool every_layer = r.flag();   // sps_sub_layer_ordering_info_present_flag
  uint32_t dpb_minus1 = 0;
  for (int i = every_layer ? 0 : sub_layers_minus1; i <= sub_layers_minus1; ++i) {
    dpb_minus1 = r.ue();   // sps_max_dec_pic_buffering_minus1[i]: the last is the highest layer's
    r.ue();                // sps_max_num_reorder_pics
    r.ue();                // sps_max_latency_increase_plus1
  }
  return dpb_minus1 < 16 ? static_cast<int>(dpb_minus1) + 1 : -1;   // ue(v) reaches 2^32 - 2
}

}  // namespace

DpbSize dpb_size(SpsCodec codec, std::span<const uint8_t> sps) {
  const size_t header = codec == SpsCodec::H264 ? 1 : 2;
  if (sps.size() <= header) return {};
  try {
    BitReader r(rbsp(sps, header));
    const DpbSize dpb = codec == SpsCodec::H264 ? h264_dpb(r) : DpbSize{hevc_dpb_frames(r), true};
    return dpb.frames >= 0 && dpb.frames <= 16 ? dpb : DpbSize{};   // both standards' limit
  } catch (const Malformed&) {
    return {};
  }
}

}  // namespace framefuse
