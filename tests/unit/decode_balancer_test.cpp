//! DecodeBalancer: hybrid decode's choice between NVDEC and the cores, table-driven; leases give
//! their load back; concurrent use keeps the books.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/decode/decode_balancer.hpp"

namespace framefuse {
namespace {

constexpr double kPx1080p = 1920.0 * 1080.0;

//! A 1080p stream at `fps` (paced) or as fast as it decodes.
DecodeDemand stream(double fps, bool paced = true) { return decode_demand(1920, 1080, fps, paced); }

//! A 1080p stream of a codec that costs NVDEC half and the cores twice what H.264 does.
DecodeDemand hevc(double fps, bool paced = true) { return decode_demand(1920, 1080, fps, paced, {0.5, 2}); }

//! "n" for NVDEC, "c" for the cores, per lease.
std::string choices(const std::vector<DecodeBalancer::Lease>& leases) {
  std::string s;
  for (const auto& l : leases) s += l.decoder() == DecoderKind::Nvdec ? 'n' : 'c';
  return s;
}

struct Case {
  const char* what;
  double nvdec_fps, cpu_fps;   //!< capacities, 1080p frames per second
  std::vector<DecodeDemand> streams;   //!< `auto` streams on device 0, in the order they open
  const char* want;
};

class Assign : public testing::TestWithParam<Case> {};

TEST_P(Assign, StreamsGoWhereThePolicySays) {
  const Case& c = GetParam();
  DecodeBalancer balancer(decode_capacity(c.nvdec_fps, c.cpu_fps));
  std::vector<DecodeBalancer::Lease> leases;
  for (const DecodeDemand& d : c.streams) leases.push_back(balancer.assign(0, d));
  EXPECT_EQ(choices(leases), c.want) << c.what;
}

INSTANTIATE_TEST_SUITE_P(
    Policy, Assign,
    testing::Values(
        // NVDEC takes 100 fps, the cores 50: three 30 fps cameras fit NVDEC, the fourth goes to the
        // cores; then neither has room and each goes where it loads less (NVDEC on a tie: 1.2 = 1.2).
        Case{"paced: NVDEC first, then the cores, then the less loaded", 100, 50,
             {stream(30), stream(30), stream(30), stream(30), stream(30), stream(30)}, "nnncnc"},
        // Unpaced files: each where the share it would get is larger; NVDEC 1900 against 1600.
        Case{"unpaced: the larger share", 1900, 1600,
             {stream(30, false), stream(30, false), stream(30, false), stream(30, false), stream(30, false)},
             "ncncn"},
        Case{"unpaced: equal capacities alternate, NVDEC first", 100, 100,
             {stream(30, false), stream(30, false), stream(30, false), stream(30, false)}, "ncnc"},
        // Paced streams take their rate out of what unpaced files share: 90 of NVDEC's 100 leaves
        // 10, so the file goes to the cores' 50.
        Case{"unpaced after paced: what the paced leave", 100, 50,
             {stream(30), stream(30), stream(30), stream(30, false)}, "nnnc"},
        Case{"a 4K camera counts four times a 1080p one (100 of 90 fps)", 90, 500,
             {decode_demand(3840, 2160, 25, true), stream(25)}, "cn"},
        // A codec costing NVDEC 0.5 and the cores 2 per pixel: NVDEC's 100 (1080p H.264 fps) take
        // six 30 fps streams (15 each: 90; a seventh would make 105), the cores' 130 two (60 each:
        // 120), and the ninth goes where it loads less (NVDEC 105 / 100 against the cores' 180 / 130).
        Case{"codec cost: more streams fit where the codec is cheap, fewer where it is dear", 100, 130,
             {hevc(30), hevc(30), hevc(30), hevc(30), hevc(30), hevc(30), hevc(30), hevc(30), hevc(30)},
             "nnnnnnccn"},
        // Unpaced: the rate a file would decode at is its share over its cost: NVDEC 100 / 0.5 = 200
        // against the cores' 300 / 2 = 150, so NVDEC, where an H.264 file would go to the cores.
        Case{"codec cost: an unpaced file goes where it decodes faster", 100, 300, {hevc(30, false)}, "n"},
        Case{"codec cost: the same file in H.264 goes to the cores", 100, 300, {stream(30, false)}, "c"}));

TEST(DecodeBalancer, LeasesGiveTheirLoadBack) {
  DecodeBalancer balancer(decode_capacity(60, 60));
  {
    auto a = balancer.assign(0, stream(30));
    auto b = balancer.assign(0, stream(30));
    EXPECT_EQ(a.decoder(), DecoderKind::Nvdec);
    EXPECT_EQ(b.decoder(), DecoderKind::Nvdec);
    EXPECT_DOUBLE_EQ(balancer.nvdec(0).paced, 60 * kPx1080p);
    EXPECT_EQ(balancer.assign(0, stream(30)).decoder(), DecoderKind::Cpu) << "NVDEC is full";
    EXPECT_DOUBLE_EQ(balancer.cpu().paced, 0) << "the temporary lease above is gone";
    DecodeBalancer::Lease moved = std::move(a);
    EXPECT_EQ(a.decoder(), DecoderKind::Auto) << "a moved-from lease holds nothing";
    EXPECT_DOUBLE_EQ(balancer.nvdec(0).paced, 60 * kPx1080p) << "moving a lease moves, never doubles, its load";
  }
  EXPECT_DOUBLE_EQ(balancer.nvdec(0).paced, 0);
  EXPECT_EQ(balancer.assign(0, stream(30)).decoder(), DecoderKind::Nvdec) << "room again";
}

TEST(DecodeBalancer, AStreamNvdecGaveUpCountsOnTheCores) {
  DecodeBalancer balancer(decode_capacity(100, 100));
  auto lease = balancer.assign(0, stream(30, false));
  ASSERT_EQ(lease.decoder(), DecoderKind::Nvdec);
  lease.move_to_cpu();
  EXPECT_EQ(lease.decoder(), DecoderKind::Cpu);
  EXPECT_EQ(balancer.nvdec(0).unpaced, 0);
  EXPECT_EQ(balancer.cpu().unpaced, 1);
  EXPECT_EQ(balancer.assign(0, stream(30, false)).decoder(), DecoderKind::Nvdec) << "NVDEC is free again";
}

TEST(DecodeBalancer, FixedDecodersCountAndEachGpuHasItsOwnNvdec) {
  DecodeBalancer balancer(decode_capacity(60, 60));
  const auto fixed = balancer.hold(DecoderKind::Nvdec, 0, stream(60));   // `decoder: nvdec` fills GPU 0's NVDEC
  const auto cpu = balancer.hold(DecoderKind::Cpu, -1, stream(30));      // a CPU pipeline
  EXPECT_EQ(balancer.assign(0, stream(30)).decoder(), DecoderKind::Cpu) << "auto goes around the fixed stream";
  EXPECT_EQ(balancer.assign(1, stream(30)).decoder(), DecoderKind::Nvdec) << "GPU 1's NVDEC is free";
  EXPECT_DOUBLE_EQ(balancer.cpu().paced, 30 * kPx1080p);
  EXPECT_DOUBLE_EQ(balancer.nvdec(0).capacity, 60 * kPx1080p);
}

TEST(DecodeBalancer, EachDecoderCountsAStreamAtItsCodecsCostThere) {
  DecodeBalancer balancer(decode_capacity(100, 100));
  auto lease = balancer.hold(DecoderKind::Nvdec, 0, hevc(30));
  EXPECT_DOUBLE_EQ(balancer.nvdec(0).paced, 15 * kPx1080p);
  lease.move_to_cpu();
  EXPECT_DOUBLE_EQ(balancer.nvdec(0).paced, 0);
  EXPECT_DOUBLE_EQ(balancer.cpu().paced, 60 * kPx1080p);
  lease = {};
  EXPECT_DOUBLE_EQ(balancer.cpu().paced, 0);
}

TEST(DecodeBalancer, CodecCostsAreMeasuredForHevcAndOneElsewhere) {
  const CodecCosts& m = measured_codec_costs();
  const CodecCost h264 = codec_cost(m, "h264", 8), hevc = codec_cost(m, "hevc", 8), hevc10 = codec_cost(m, "hevc", 10);
  EXPECT_EQ(h264.nvdec, 1);
  EXPECT_EQ(h264.cpu, 1);
  EXPECT_LT(hevc.nvdec, 1) << "NVDEC decodes HEVC faster than H.264";
  EXPECT_GT(hevc.cpu, 1) << "the cores decode HEVC slower";
  EXPECT_GE(hevc10.cpu, hevc.cpu) << "10-bit costs the cores at least what 8-bit does";
  EXPECT_EQ(codec_cost(m, "vp9", 8).cpu, 1) << "not measured: the unit";
  EXPECT_EQ(codec_cost(m, "h264", 10).nvdec, 1);
}

TEST(DecodeBalancer, DeepStreamsTakeTheir10BitEntryElseThePlainOne) {
  const CodecCosts costs{{"av1", {0.5, 3}}, {"av1_10bit", {0.7, 4}}, {"vp9", {2, 2.5}}};
  EXPECT_EQ(codec_cost(costs, "av1", 8), (CodecCost{0.5, 3}));
  EXPECT_EQ(codec_cost(costs, "av1", 10), (CodecCost{0.7, 4}));
  EXPECT_EQ(codec_cost(costs, "av1", 12), (CodecCost{0.7, 4})) << "any depth above 8 bits";
  EXPECT_EQ(codec_cost(costs, "vp9", 10), (CodecCost{2, 2.5})) << "no _10bit entry: the codec's";
  EXPECT_EQ(codec_cost(costs, "hevc", 10), CodecCost{}) << "not listed: the unit";
  EXPECT_TRUE(is_codec_cost_key("av1_10bit"));
  EXPECT_TRUE(is_codec_cost_key("mjpeg"));
  EXPECT_FALSE(is_codec_cost_key("aac")) << "an audio codec";
  EXPECT_FALSE(is_codec_cost_key("h265"));
  EXPECT_FALSE(is_codec_cost_key("hevc_8bit"));
}

TEST(DecodeBalancer, CountsStreamsByTheCostsOfItsCapacity) {
  DecodeBalancer balancer(decode_capacity(30, 100, {{"av1", {0.5, 3}}}));
  EXPECT_EQ(balancer.codec_cost("av1", 8), (CodecCost{0.5, 3}));
  EXPECT_EQ(balancer.codec_cost("hevc", 8), CodecCost{}) << "costs replace the measured table, not merge";
  balancer.set_capacity(decode_capacity(30, 100));
  EXPECT_EQ(balancer.codec_cost("hevc", 8), codec_cost(measured_codec_costs(), "hevc", 8));
  EXPECT_EQ(balancer.codec_cost("av1", 8), CodecCost{}) << "a reload's costs apply from then on";
}

TEST(DecodeBalancer, NewCapacitiesApplyToTheNextChoice) {
  DecodeBalancer balancer(decode_capacity(30, 100));
  const auto a = balancer.assign(0, stream(30));
  EXPECT_EQ(balancer.assign(0, stream(30)).decoder(), DecoderKind::Cpu);
  balancer.set_capacity(decode_capacity(100, 100));
  EXPECT_EQ(balancer.assign(0, stream(30)).decoder(), DecoderKind::Nvdec);
  EXPECT_EQ(a.decoder(), DecoderKind::Nvdec) << "a lease keeps its decoder";
}

TEST(DecodeBalancer, AutoCpuCapacityIsAHundredFramesPerHardwareThread) {
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_DOUBLE_EQ(decode_capacity(1900, 0).cpu, 100 * threads * kPx1080p);
  EXPECT_DOUBLE_EQ(decode_capacity(1900, 0).nvdec, 1900 * kPx1080p);
  EXPECT_DOUBLE_EQ(decode_capacity(1900, 250).cpu, 250 * kPx1080p);
  EXPECT_DOUBLE_EQ(stream(0).pixels_per_s, 30 * kPx1080p) << "no stated rate: 30 fps";
}

TEST(DecodeBalancer, ConcurrentStreamsKeepTheBooks) {
  DecodeBalancer balancer(decode_capacity(500, 500));
  std::vector<std::jthread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&balancer, t] {
      std::mt19937 rng(1234 + t);
      std::vector<DecodeBalancer::Lease> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() > 8 || (!held.empty() && rng() % 3 == 0)) {
          held.erase(held.begin() + long(rng() % held.size()));
        } else {
          held.push_back(balancer.assign(int(rng() % 2), stream(5 + rng() % 60, rng() % 4 != 0)));
          if (rng() % 5 == 0) held.back().move_to_cpu();
        }
      }
    });
  }
  threads.clear();   // joined: every lease is gone
  for (const auto& l : {balancer.nvdec(0), balancer.nvdec(1), balancer.cpu()}) {
    EXPECT_DOUBLE_EQ(l.paced, 0);
    EXPECT_EQ(l.unpaced, 0);
  }
}

}  // namespace
}  // namespace framefuse
