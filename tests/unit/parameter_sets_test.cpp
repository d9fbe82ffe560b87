// dpb_size() and find_sps() against FFmpeg's own parameter-set parser (the trace_headers bitstream filter, an
// independent reading of the same bits), on clips libx264 / libx265 encode at test time with the
// reference and B-frame counts of the table, in each container's form of the parameter sets
// (avcC / hvcC records in MP4, Annex B in MPEG-TS and raw streams); and on H.264 SPSs written bit by
// bit here, for the VUI forms encoders other than libx264 use (none, no bitstream restriction, HRD).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "pipeline/decode/parameter_sets.hpp"
#include "tests/support/media_fixtures.hpp"

extern "C" {
#include <libavformat/avformat.h>
}

namespace framefuse {
namespace {

namespace fs = std::filesystem;

struct Case {
  SpsCodec codec;
  const char* encoder_params;   //!< -x264-params / -x265-params
  const char* extension;        //!< the container
};

std::string name_of(const Case& c) {
  return fmt::format("{} {} .{}", c.codec == SpsCodec::H264 ? "h264" : "hevc", c.encoder_params, c.extension);
}

//! stderr of the ffmpeg CLI with `args`.
std::string ffmpeg_output(const std::string& args) {
  const std::string cmd = "ffmpeg -hide_banner -nostdin " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), &pclose);
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p.get())) out += buf;
  return out;
}

//! The DPB frames FFmpeg's trace_headers reads in `clip`'s first SPS: H.264 max_dec_frame_buffering
//! (libx264 always writes the VUI's bitstream restriction; the test asserts it is there, so this
//! test does not silently stop covering it) and max_num_ref_frames; HEVC the highest sub-layer's
//! sps_max_dec_pic_buffering_minus1 + 1. -1 if not found.
struct Traced {
  int frames = -1;
  int h264_ref_frames = -1;
};
Traced traced_dpb(const fs::path& clip, SpsCodec codec) {
  const std::string trace = ffmpeg_output(fmt::format("-i {} -c copy -bsf:v trace_headers -f null -", clip.string()));
  const auto h264_field = [&](const char* name) {
    std::smatch m;
    return std::regex_search(trace, m, std::regex(fmt::format(R"(\b{}\s+[01]+ = (\d+))", name))) ? std::stoi(m[1])
                                                                                                 : -1;
  };
  if (codec == SpsCodec::H264) return {h264_field("max_dec_frame_buffering"), h264_field("max_num_ref_frames")};
  const std::regex field(R"(\bsps_max_dec_pic_buffering_minus1\[(\d+)\]\s+[01]+ = (\d+))");
  int found = -1, layer = -1;
  for (std::sregex_iterator it(trace.begin(), trace.end(), field), end; it != end; ++it) {
    const int l = std::stoi((*it)[1]);
    if (l <= layer) break;   // the next SPS begins
    layer = l;
    found = std::stoi((*it)[2]) + 1;
  }
  return {found, -1};
}

//! What libavformat gives the decoder for `clip`'s video stream: its extradata, and the bytes of
//! its first keyframe packet.
struct Stream {
  std::vector<uint8_t> extradata;
  std::vector<uint8_t> keyframe;
};

Stream stream_of(const fs::path& clip) {
  AVFormatContext* ctx = nullptr;
  if (avformat_open_input(&ctx, clip.c_str(), nullptr, nullptr) < 0) return {};
  Stream out;
  const int s = avformat_find_stream_info(ctx, nullptr) >= 0
                    ? av_find_best_stream(ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0)
                    : -1;
  if (s >= 0) {
    const AVCodecParameters* par = ctx->streams[s]->codecpar;
    out.extradata.assign(par->extradata, par->extradata + par->extradata_size);
    AVPacket* pkt = av_packet_alloc();
    while (pkt && av_read_frame(ctx, pkt) >= 0) {
      const bool key = pkt->stream_index == s && (pkt->flags & AV_PKT_FLAG_KEY);
      if (key) out.keyframe.assign(pkt->data, pkt->data + pkt->size);
      av_packet_unref(pkt);
      if (key) break;
    }
    av_packet_free(&pkt);
  }
  avformat_close_input(&ctx);
  return out;
}

class ParameterSets : public ::testing::TestWithParam<Case> {};

TEST_P(ParameterSets, DpbFramesEqualFfmpegsReading) {
  if (!test::have_ffmpeg()) GTEST_SKIP() << "no ffmpeg CLI";
  const Case& c = GetParam();
  test::TempDir dir("framefuse_sps");
  const fs::path clip = dir.path / fmt::format("clip.{}", c.extension);
  const bool h264 = c.codec == SpsCodec::H264;
  test::ffmpeg(fmt::format("-f lavfi -i testsrc2=size=208x120:rate=10 -frames:v 8 -c:v {} -{}-params {}{} {}",
                           h264 ? "libx264" : "libx265", h264 ? "x264" : "x265", c.encoder_params,
                           h264 ? "" : ":log-level=error", clip.string()));
  const Traced traced = traced_dpb(clip, c.codec);
  const int expected = traced.frames;
  ASSERT_GT(expected, 0) << "trace_headers found no DPB size in " << name_of(c);
  if (h264) ASSERT_GE(expected, traced.h264_ref_frames) << name_of(c);
  const Stream stream = stream_of(clip);
  const std::vector<uint8_t>& extradata = stream.extradata;
  ASSERT_FALSE(extradata.empty()) << name_of(c);
  const DpbSize dpb = dpb_size(c.codec, find_sps(c.codec, extradata));
  EXPECT_EQ(dpb.frames, expected) << name_of(c);
  EXPECT_TRUE(dpb.reordering_included) << name_of(c);

  // Annex B streams (MPEG-TS, raw) repeat the SPS in their keyframes, which NVDEC sources compare
  // to tell a new sequence: the same NAL unit as the extradata's. (MP4 and Matroska keep theirs in
  // an avcC / hvcC record, first byte 1, and their packets are length-prefixed.)
  const bool annex_b = c.extension == std::string_view("ts") || c.extension == std::string_view("h264") ||
                       c.extension == std::string_view("hevc");
  EXPECT_EQ(extradata[0] != 1, annex_b) << name_of(c);
  if (annex_b) {
    ASSERT_FALSE(stream.keyframe.empty()) << name_of(c);
    const std::span<const uint8_t> in_band = find_sps(c.codec, stream.keyframe);
    const std::span<const uint8_t> out_of_band = find_sps(c.codec, extradata);
    ASSERT_FALSE(in_band.empty()) << name_of(c);
    EXPECT_TRUE(std::equal(in_band.begin(), in_band.end(), out_of_band.begin(), out_of_band.end())) << name_of(c);
  }

  // Cut short anywhere: never read past the end, never a made-up count.
  for (size_t n = 0; n < extradata.size(); n += 3) {
    const int got = dpb_size(c.codec, find_sps(c.codec, std::span(extradata).first(n))).frames;
    EXPECT_TRUE(got == -1 || got == expected) << name_of(c) << " cut at " << n << " bytes: " << got;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Clips, ParameterSets,
    ::testing::Values(Case{SpsCodec::H264, "ref=1:bframes=0", "mp4"},            // a typical camera: POC type 2
                      Case{SpsCodec::H264, "ref=3:bframes=2", "ts"},             // Annex B, POC type 0
                      Case{SpsCodec::H264, "ref=5:bframes=3:b-pyramid=normal", "h264"},
                      Case{SpsCodec::H264, "ref=2:bframes=0:cabac=0:8x8dct=0", "mkv"},   // no High tools
                      Case{SpsCodec::H264, "ref=4:bframes=1:cqm=jvt", "mp4"},   // High, scaling lists in the PPS
                      Case{SpsCodec::Hevc, "ref=3:bframes=2", "mp4"},            // hvcC
                      Case{SpsCodec::Hevc, "ref=1:bframes=0", "hevc"},
                      Case{SpsCodec::Hevc, "ref=4:bframes=4", "ts"}),
    [](const ::testing::TestParamInfo<Case>& info) { return fmt::format("case{}", info.index); });

//! Parameter sets come from the network (RTSP cameras) and from files: whatever the bytes, a count in
//! [0, 16] or -1, never a crash, a hang or a read outside them (the ASan lane runs this test too).
//! Seeded mutations of real parameter sets (bits flipped, bytes replaced, cut or extended), then
//! random bytes, each read as an SPS, as Annex B and as an avcC / hvcC record.
TEST(ParameterSetsFuzz, AnyBytesGiveACountOrMinusOne) {
  // libx264 / libx265 (208x120, ref=3:bframes=2) SPS NAL units, as find_sps() returns them.
  const std::vector<uint8_t> h264{0x67, 0x64, 0x00, 0x0b, 0xac, 0xd9, 0x43, 0x44, 0x7e, 0x5c, 0x04, 0x40, 0x00,
                                  0x00, 0x03, 0x00, 0x40, 0x00, 0x00, 0x05, 0x03, 0xc5, 0x0a, 0x65, 0x80};
  const std::vector<uint8_t> hevc{0x42, 0x01, 0x01, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00, 0x03, 0x00,
                                  0x00, 0x03, 0x00, 0x1e, 0xa0, 0x1a, 0x20, 0x79, 0x65, 0x95, 0x92, 0x49, 0x32, 0xbc,
                                  0x05, 0xa0, 0x20, 0x00, 0x00, 0x03, 0x00, 0x20, 0x00, 0x00, 0x03, 0x01, 0x41};
  // As FFmpeg's trace_headers reads them: max_dec_frame_buffering 4; sps_max_dec_pic_buffering_minus1 4.
  ASSERT_EQ(dpb_size(SpsCodec::H264, h264).frames, 4);
  ASSERT_EQ(dpb_size(SpsCodec::Hevc, hevc).frames, 5);

  std::mt19937 rng(20261130);
  const auto check = [](SpsCodec codec, const std::vector<uint8_t>& bytes) {
    const int got = dpb_size(codec, bytes).frames;
    ASSERT_TRUE(got == -1 || (got >= 0 && got <= 16)) << got;
    for (const uint8_t first : {uint8_t{0}, uint8_t{1}}) {   // Annex B, then an avcC / hvcC record
      std::vector<uint8_t> stream{first, 0, 0, 1};
      stream.insert(stream.end(), bytes.begin(), bytes.end());
      const std::span<const uint8_t> sps = find_sps(codec, stream);
      ASSERT_TRUE(sps.empty() || (sps.data() >= stream.data() && sps.data() + sps.size() <= stream.data() + stream.size()));
      const int in_stream = dpb_size(codec, sps).frames;
      ASSERT_TRUE(in_stream == -1 || (in_stream >= 0 && in_stream <= 16)) << in_stream;
    }
  };
  int mutated_readable = 0;
  for (const auto& [codec, base] : {std::pair{SpsCodec::H264, &h264}, std::pair{SpsCodec::Hevc, &hevc}}) {
    for (int i = 0; i < 20000; ++i) {
      std::vector<uint8_t> m = *base;
      for (int e = 0, edits = 1 + int(rng() % 4); e < edits && !m.empty(); ++e) {
        const size_t at = rng() % m.size();
        switch (rng() % 4) {
          case 0: m[at] ^= uint8_t(1u << (rng() % 8)); break;
          case 1: m[at] = uint8_t(rng()); break;
          case 2: m.resize(at); break;
          default: m.insert(m.begin() + std::ptrdiff_t(at), uint8_t(rng())); break;
        }
      }
      check(codec, m);
      if (HasFatalFailure()) return;
      mutated_readable += dpb_size(codec, m).frames >= 0 ? 1 : 0;
    }
    for (int i = 0; i < 5000; ++i) {
      std::vector<uint8_t> r(rng() % 64);
      for (uint8_t& b : r) b = uint8_t(rng());
      check(codec, r);
      if (HasFatalFailure()) return;
    }
  }
  // The mutations reach the parser's later fields, not only its first bytes' rejections.
  EXPECT_GT(mutated_readable, 4000);
}

TEST(ParameterSetsEdge, NothingToReadGivesMinusOne) {
  EXPECT_EQ(dpb_size(SpsCodec::H264, {}).frames, -1);
  const std::vector<uint8_t> pps_only{0, 0, 0, 1, 0x68, 0xce, 0x3c, 0x80};   // an H.264 PPS, no SPS
  EXPECT_EQ(dpb_size(SpsCodec::H264, find_sps(SpsCodec::H264, pps_only)).frames, -1);
  EXPECT_EQ(dpb_size(SpsCodec::Hevc, find_sps(SpsCodec::Hevc, pps_only)).frames, -1);
}

//! Writes an RBSP bit by bit and turns it into a NAL unit (emulation prevention added).
class SpsWriter {
 public:
  SpsWriter& bits(uint32_t v, int n) {
    for (int i = n - 1; i >= 0; --i) bits_.push_back(((v >> i) & 1u) != 0);
    return *this;
  }
  SpsWriter& ue(uint32_t v) {
    const uint64_t x = uint64_t{v} + 1;
    const int n = std::bit_width(x);
    bits(0, n - 1);
    for (int i = n - 1; i >= 0; --i) bits_.push_back(((x >> i) & 1u) != 0);
    return *this;
  }
  //! se(v): 0, 1, -1, 2, -2, ... as ue(v) 0, 1, 2, 3, 4, ...
  SpsWriter& se(int32_t v) { return ue(v > 0 ? uint32_t(2 * int64_t{v} - 1) : uint32_t(-2 * int64_t{v})); }
  //! The NAL unit: header 0x67, the bits, rbsp_trailing_bits, and 03 after every 00 00 followed by a
  //! byte <= 3.
  std::vector<uint8_t> nal() const {
    std::vector<bool> b = bits_;
    b.push_back(true);
    while (b.size() % 8) b.push_back(false);
    std::vector<uint8_t> out{0x67};
    int zeros = 0;
    for (size_t i = 0; i < b.size(); i += 8) {
      uint8_t byte = 0;
      for (size_t k = 0; k < 8; ++k) byte = uint8_t(byte << 1 | b[i + k]);
      if (zeros >= 2 && byte <= 3) {
        out.push_back(3);
        zeros = 0;
      }
      out.push_back(byte);
      zeros = byte == 0 ? zeros + 1 : 0;
    }
    return out;
  }

 private:
  std::vector<bool> bits_;
};

//! A VUI for the SPS below: which optional parts it has.
struct Vui {
  bool extended_sar = false;
  bool signal_type = false;
  bool chroma_location = false;
  bool timing = false;
  int nal_hrd_cpbs = 0;   //!< 0: no NAL HRD
  int vcl_hrd_cpbs = 0;
  int max_dec_frame_buffering = -1;   //!< -1: no bitstream restriction
};

//! A 1080p High profile SPS with `ref_frames` and, unless `vui` is empty, that VUI; with
//! `scaling_deltas`, a scaling matrix whose first 4x4 list has those delta_scale values.
std::vector<uint8_t> h264_sps(int ref_frames, std::optional<Vui> vui, const std::vector<int32_t>& scaling_deltas = {}) {
  SpsWriter w;
  w.bits(100, 8).bits(0, 8).bits(40, 8).ue(0);    // High, level 4.0, sps id 0
  w.ue(1).ue(0).ue(0).bits(0, 1);                 // 4:2:0, 8-bit, no bypass
  w.bits(!scaling_deltas.empty(), 1);             // seq_scaling_matrix_present_flag
  if (!scaling_deltas.empty()) {
    w.bits(1, 1);   // list 0 present, the other seven not
    for (const int32_t d : scaling_deltas) w.se(d);
    w.bits(0, 7);
  }
  w.ue(0).ue(2).ue(uint32_t(ref_frames));        // frame num bits, POC type 2, refs
  w.bits(0, 1).ue(119).ue(67).bits(1, 1).bits(1, 1);   // 1920 x 1088, frames only, direct 8x8
  w.bits(1, 1).ue(0).ue(0).ue(0).ue(4);           // cropped to 1080
  w.bits(vui ? 1 : 0, 1);
  if (!vui) return w.nal();
  const auto hrd = [&](int cpbs) {
    w.ue(uint32_t(cpbs - 1)).bits(4, 4).bits(3, 4);
    for (int i = 0; i < cpbs; ++i) w.ue(uint32_t(1000 + i)).ue(uint32_t(2000 + i)).bits(uint32_t(i & 1), 1);
    w.bits(23, 5).bits(23, 5).bits(23, 5).bits(24, 5);
  };
  w.bits(1, 1).bits(vui->extended_sar ? 255 : 1, 8);
  if (vui->extended_sar) w.bits(4, 16).bits(3, 16);
  w.bits(0, 1);   // no overscan info
  w.bits(vui->signal_type, 1);
  if (vui->signal_type) w.bits(5, 3).bits(0, 1).bits(1, 1).bits(1, 8).bits(1, 8).bits(1, 8);
  w.bits(vui->chroma_location, 1);
  if (vui->chroma_location) w.ue(0).ue(0);
  w.bits(vui->timing, 1);
  if (vui->timing) w.bits(1001, 32).bits(60000, 32).bits(1, 1);
  w.bits(vui->nal_hrd_cpbs > 0, 1);
  if (vui->nal_hrd_cpbs > 0) hrd(vui->nal_hrd_cpbs);
  w.bits(vui->vcl_hrd_cpbs > 0, 1);
  if (vui->vcl_hrd_cpbs > 0) hrd(vui->vcl_hrd_cpbs);
  if (vui->nal_hrd_cpbs > 0 || vui->vcl_hrd_cpbs > 0) w.bits(0, 1);   // low_delay_hrd_flag
  w.bits(0, 1);   // pic_struct_present_flag
  w.bits(vui->max_dec_frame_buffering >= 0, 1);
  if (vui->max_dec_frame_buffering >= 0)
    w.bits(1, 1).ue(2).ue(1).ue(16).ue(16).ue(1).ue(uint32_t(vui->max_dec_frame_buffering));
  return w.nal();
}

//! Every VUI form: the DPB comes from max_dec_frame_buffering exactly when the VUI has a bitstream
//! restriction that is not below max_num_ref_frames; otherwise from max_num_ref_frames, marked as
//! leaving the reordered frames out. Cut short anywhere, -1 (never max_num_ref_frames alone: a
//! truncated VUI may have hidden a larger DPB).
TEST(ParameterSetsH264Vui, MaxDecFrameBufferingWhenStatedElseRefFrames) {
  struct VuiCase {
    const char* name;
    int ref_frames;
    std::optional<Vui> vui;
    DpbSize expected;
  };
  const VuiCase cases[] = {
      {"no VUI", 2, std::nullopt, {2, false}},
      {"VUI without bitstream restriction", 1, Vui{.signal_type = true, .timing = true}, {1, false}},
      {"bitstream restriction only", 3, Vui{.max_dec_frame_buffering = 4}, {4, true}},
      {"every optional part", 2,
       Vui{true, true, true, true, 3, 2, 5}, {5, true}},
      {"NAL HRD of 32 CPBs", 4, Vui{.timing = true, .nal_hrd_cpbs = 32, .max_dec_frame_buffering = 4}, {4, true}},
      {"VCL HRD only", 1, Vui{.vcl_hrd_cpbs = 1, .max_dec_frame_buffering = 1}, {1, true}},
      {"no references, no reordering", 0, Vui{.max_dec_frame_buffering = 0}, {0, true}},
      {"restriction below the references: not trusted", 4, Vui{.max_dec_frame_buffering = 2}, {4, false}},
      {"restriction above 16: not trusted", 4, Vui{.max_dec_frame_buffering = 17}, {4, false}},
  };
  for (const VuiCase& c : cases) {
    const std::vector<uint8_t> sps = h264_sps(c.ref_frames, c.vui);
    const DpbSize got = dpb_size(SpsCodec::H264, sps);
    EXPECT_EQ(got.frames, c.expected.frames) << c.name;
    EXPECT_EQ(got.reordering_included, c.expected.reordering_included) << c.name;
    std::vector<uint8_t> annex_b{0, 0, 0, 1};
    annex_b.insert(annex_b.end(), sps.begin(), sps.end());
    EXPECT_EQ(dpb_size(SpsCodec::H264, find_sps(SpsCodec::H264, annex_b)).frames, c.expected.frames) << c.name;
    // Cut before its last whole field: the trailing bits go first, then the fields.
    for (size_t n = 1; n + 1 < sps.size(); ++n)
      EXPECT_EQ(dpb_size(SpsCodec::H264, std::span(sps).first(n)).frames, -1) << c.name << " cut at " << n;
  }
  // A HRD that states more CPBs than the standard allows is not read further.
  EXPECT_EQ(dpb_size(SpsCodec::H264, h264_sps(2, Vui{.nal_hrd_cpbs = 33, .max_dec_frame_buffering = 3})).frames, -1);
}

//! Scaling lists are skipped by reading them: delta_scale within -128..127 (7.4.2.1.1) reads on to
//! the DPB fields; one outside that range (a value that once overflowed the list arithmetic) makes
//! the SPS unreadable rather than undefined.
TEST(ParameterSetsH264, ScalingListDeltasInRangeReadOnOutOfRangeRejected) {
  struct ScalingCase {
    std::vector<int32_t> deltas;
    int expected_frames;
  };
  const ScalingCase cases[] = {
      {{-8}, 3},               // next scale 0 at once: the default list
      {{127, -127, -8}, 3},    // 8 -> 135 -> 8 -> 0, the range's ends
      {{128}, -1},
      {{-129}, -1},
      {{2147483647}, -1},
  };
  for (const ScalingCase& c : cases) {
    const DpbSize got = dpb_size(SpsCodec::H264, h264_sps(3, std::nullopt, c.deltas));
    EXPECT_EQ(got.frames, c.expected_frames) << "first delta " << c.deltas.front();
  }
}

}  // namespace
}  // namespace framefuse
