#pragma once
//! What decoding a pixel of each codec costs hybrid decode (decode_balancer.hpp), relative to 8-bit
//! 4:2:0 H.264, the unit of its capacities. Pure data and lookups; no FFmpeg types.
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace framefuse {

//! A codec's cost per pixel on NVDEC and on the cores, against 8-bit H.264 (1 and 1).
struct CodecCost {
  double nvdec = 1;
  double cpu = 1;
  bool operator==(const CodecCost&) const = default;
};

//! Costs by key: FFmpeg's codec name (avcodec_get_name: "hevc", "av1"), or that name + "_10bit"
//! for streams of more than 8 bits per sample ("hevc_10bit").
using CodecCosts = std::map<std::string, CodecCost, std::less<>>;

//! The costs measured on the H200 host (tests/bench/RESULTS.md, session 21; config/REFERENCE.md,
//! "Hybrid decode"): hevc and hevc_10bit. Codecs not listed cost 1.
const CodecCosts& measured_codec_costs();

//! The cost of `codec` (FFmpeg's name) at `bit_depth` bits per sample in `costs`: its "_10bit"
//! entry when deeper than 8 bits, else (or when that is missing) its plain entry, else the unit.
CodecCost codec_cost(const CodecCosts& costs, std::string_view codec, int bit_depth);

//! Whether `key` names a codec FFmpeg knows (a codec name, optionally + "_10bit"): a cost under
//! any other key would never apply.
bool is_codec_cost_key(std::string_view key);

}  // namespace framefuse
