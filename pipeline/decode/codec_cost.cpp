#include "pipeline/decode/codec_cost.hpp"

#include <cstdint>   // UINT64_C, which FFmpeg's headers need in C++
#include <string>

extern "C" {
#include <libavcodec/codec_desc.h>
}

namespace framefuse {
namespace {

constexpr std::string_view kDeepSuffix = "_10bit";

}  // namespace

const CodecCosts& measured_codec_costs() {
  // Against 8-bit H.264 on camera-style 1080p clips of one scene (one reference, no B-frames):
  // NVDEC by the H200's decode ceiling over 4 sessions (1,817 / 2,266 / 2,262 fps), the cores by
  // CPU time per frame (8.2 / 15.9 / 18.4 ms).
  static const CodecCosts costs{{"hevc", {0.8, 1.9}}, {"hevc_10bit", {0.8, 2.2}}};
  return costs;
}

CodecCost codec_cost(const CodecCosts& costs, std::string_view codec, int bit_depth) {
  if (bit_depth > 8) {
    if (const auto it = costs.find(std::string(codec) + std::string(kDeepSuffix)); it != costs.end()) return it->second;
  }
  const auto it = costs.find(codec);
  return it == costs.end() ? CodecCost{} : it->second;
}

bool is_codec_cost_key(std::string_view key) {
  if (key.ends_with(kDeepSuffix)) key.remove_suffix(kDeepSuffix.size());
  const AVCodecDescriptor* d = avcodec_descriptor_get_by_name(std::string(key).c_str());
  return d && d->type == AVMEDIA_TYPE_VIDEO;
}

}  // namespace framefuse
