// Fuzz target: the sequence parameter set reader (pipeline/decode/parameter_sets.cpp), which reads
// what a camera or file sends before NVDEC is set up. First byte: the codec (even: H.264, odd: HEVC);
// the rest: an avcC/hvcC record or Annex B bytes. Properties: find_sps() returns a part of its input,
// and dpb_size() a size within the standards' limit, or "unknown", for the found SPS and for the
// bytes read as an SPS themselves.
#include <cstdint>

#include "pipeline/decode/parameter_sets.hpp"
#include "tests/fuzz/fuzz_check.hpp"

using framefuse::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  framefuse::fuzz::InputReader in(data, size);
  const auto codec = in.byte() % 2 == 0 ? framefuse::SpsCodec::H264 : framefuse::SpsCodec::Hevc;
  const auto bytes = in.rest();
  const auto sps = framefuse::find_sps(codec, bytes);
  check(sps.empty() || (sps.data() >= bytes.data() && sps.data() + sps.size() <= bytes.data() + bytes.size()),
        "find_sps returned bytes outside its input");
  for (const auto nal : {sps, bytes}) {
    const auto dpb = framefuse::dpb_size(codec, nal);
    check(dpb.frames >= -1 && dpb.frames <= 16, "dpb_size outside [-1, 16]");
    check(dpb.frames >= 0 || !dpb.reordering_included, "an unknown DPB claims to include reordering");
  }
  return 0;
}
