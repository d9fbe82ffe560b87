// VideoSource against clips the ffmpeg CLI encodes at test time from seeded random raw frames:
// lossless codecs, so every decoded sample is known exactly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "tests/support/media_fixtures.hpp"

extern "C" {
#include <libavutil/log.h>
}

namespace framefuse {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using test::Planes;

using test::ffmpeg;
using test::have_ffmpeg;
using test::TempDir;
using test::tight_planes;

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, int lo = 0, int hi = 255) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

SourceSpec file_spec(const fs::path& p) {
  SourceSpec s;
  s.uri = p.string();
  return s;
}

std::vector<DecodedFrame> read_all(VideoSource& src) {
  std::vector<DecodedFrame> frames;
  while (auto f = src.read()) frames.push_back(std::move(*f));
  return frames;
}

//! Every frame of a source of `spec`, and the seconds reading them took (realtime pacing).
struct TimedRead {
  std::vector<DecodedFrame> frames;
  double seconds;
};
TimedRead read_timed(const SourceSpec& spec) {
  VideoSource src(spec, "p");
  src.open();
  const auto t0 = Clock::now();
  std::vector<DecodedFrame> frames = read_all(src);
  return {std::move(frames), std::chrono::duration<double>(Clock::now() - t0).count()};
}

//! Largest difference between two plane sets of equal shape (255+ when shapes differ).
int max_diff(const Planes& a, const Planes& b) {
  if (a.size() != b.size()) return 1000;
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return 1000;
    for (size_t j = 0; j < a[i].size(); ++j) m = std::max(m, std::abs(int(a[i][j]) - int(b[i][j])));
  }
  return m;
}

class DecodeTest : public ::testing::Test {
 protected:
  static constexpr int kW = 70, kH = 46, kFrames = 10;   // odd chroma width: pitch != row bytes

  static void SetUpTestSuite() { av_log_set_level(AV_LOG_QUIET); }
  void SetUp() override {
    if (!have_ffmpeg()) GTEST_SKIP() << "ffmpeg CLI not found";
  }

  //! Seeded random yuv420p frames (Y, U, V planes each), encoded lossless as H.264 at 10 fps.
  fs::path lossless_h264(std::vector<Planes>& frames) {
    std::vector<uint8_t> raw;
    for (int i = 0; i < kFrames; ++i) {
      Planes p{random_bytes(kW * kH, 100 + i, 16, 235), random_bytes(kW / 2 * kH / 2, 200 + i, 16, 240),
               random_bytes(kW / 2 * kH / 2, 300 + i, 16, 240)};
      for (const auto& plane : p) raw.insert(raw.end(), plane.begin(), plane.end());
      frames.push_back(std::move(p));
    }
    write_file(dir.path / "raw.yuv", raw);
    const fs::path out = dir.path / "lossless.mp4";
    ffmpeg(fmt::format("-f rawvideo -pix_fmt yuv420p -s {}x{} -r 10 -i {} -c:v libx264 -threads 1 -preset ultrafast "
               "-qp 0 -g 4 -bf 2 -colorspace bt709 -color_primaries bt709 -color_trc bt709 -color_range tv {}",
               kW, kH, (dir.path / "raw.yuv").string(), out.string()));
    return out;
  }

  std::string error_of(const fs::path& p) {
    VideoSource src(file_spec(p), "p");
    try {
      src.open();
    } catch (const MediaError& e) {
      return e.what();
    }
    return "(no error)";
  }

  TempDir dir;
};

TEST_F(DecodeTest, LosslessH264FramesMatchTheEncodedSamples) {
  std::vector<Planes> expected;
  const fs::path clip = lossless_h264(expected);
  std::vector<DecodedFrame> frames;
  {
    VideoSource src(file_spec(clip), "p");
    src.open();
    EXPECT_NEAR(src.frame_rate(), 10.0, 1e-9);
    frames = read_all(src);
    EXPECT_FALSE(src.read().has_value()) << "end of stream stays ended";
    EXPECT_EQ(src.decode_errors(), 0u);
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(src.frame_info(), frames.back().info);
  }   // the source is gone: frames keep their memory through `owner`
  ASSERT_EQ(frames.size(), size_t(kFrames));
  for (int i = 0; i < kFrames; ++i) {
    const DecodedFrame& f = frames[i];
    EXPECT_EQ(f.index, i);
    EXPECT_NEAR(f.pts_seconds - frames[0].pts_seconds, i * 0.1, 1e-6);
    EXPECT_EQ(f.info.width, kW);
    EXPECT_EQ(f.info.height, kH);
    EXPECT_EQ(f.info.format, ops::PixelFormat::Yuv420p);
    EXPECT_EQ(f.view.format, ops::PixelFormat::Yuv420p);
    EXPECT_EQ(f.info.matrix, ops::ColorMatrix::Bt709);
    EXPECT_EQ(f.info.range, ops::ColorRange::Limited);
    EXPECT_EQ(max_diff(tight_planes(f), expected[i]), 0) << "frame " << i;
    if (i > 0) {
      EXPECT_GE(f.decoded_at, frames[i - 1].decoded_at);
    }
  }
}

// Each container restarts differently: MP4 by timestamp, MPEG-TS and raw H.264 at byte 0.
TEST_F(DecodeTest, LoopRestartsAtTheStartAndKeepsCounting) {
  std::vector<Planes> expected;
  const fs::path mp4 = lossless_h264(expected);
  for (const char* container : {"mp4", "ts", "h264"}) {
    SCOPED_TRACE(container);
    fs::path clip = mp4;
    if (clip.extension() != fmt::format(".{}", container)) {
      clip.replace_extension(container);
      ffmpeg(fmt::format("-i {} -c copy {}", mp4.string(), clip.string()));
    }
    SourceSpec spec = file_spec(clip);
    spec.loop = true;
    spec.max_frames = 25;
    VideoSource src(spec, "p");
    src.open();
    const auto frames = read_all(src);
    ASSERT_EQ(frames.size(), 25u);
    EXPECT_EQ(src.decoder_setups(), 1) << "three passes, one decoder set-up (no flush at the loop)";
    for (int i = 0; i < 25; ++i) {
      EXPECT_EQ(frames[i].index, i);
      EXPECT_EQ(max_diff(tight_planes(frames[i]), expected[i % kFrames]), 0) << "frame " << i;
      if (i > 0) {
        EXPECT_NEAR(frames[i].pts_seconds - frames[i - 1].pts_seconds, 0.1, 1e-3) << "frame " << i;
      }
    }
  }
}

TEST_F(DecodeTest, AOneFrameFileLoopedInRealtimeIsACameraAtItsFrameRate) {
  const fs::path still = dir.path / "still.mp4";   // one frame at 10 fps: a picture posing as a camera
  ffmpeg(fmt::format("-f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 1 -c:v libx264 {}", still.string()));
  SourceSpec spec = file_spec(still);
  spec.loop = true;
  spec.realtime = true;
  spec.max_frames = 5;
  const auto [frames, seconds] = read_timed(spec);
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_GE(seconds, 0.35) << "paced, not as fast as it decodes";
  for (int i = 1; i < 5; ++i)
    EXPECT_NEAR(frames[i].pts_seconds - frames[i - 1].pts_seconds, 0.1, 1e-3) << "frame " << i;
}

TEST_F(DecodeTest, MaxFramesStopsEarly) {
  std::vector<Planes> expected;
  SourceSpec spec = file_spec(lossless_h264(expected));
  spec.max_frames = 4;
  VideoSource src(spec, "p");
  src.open();
  const auto frames = read_all(src);
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(max_diff(tight_planes(frames[3]), expected[3]), 0);
}

// Raw pixel formats in NUT: the ops' formats arrive as they are, the rest converted. (P010 as such
// comes only from hardware decoders: no container carries raw p010le, no software decoder outputs it.)
struct FormatCase {
  const char* pix_fmt;
  ops::PixelFormat expected;
  size_t raw_bytes;                                          //!< per 70x46 frame
  std::function<void(std::vector<uint8_t>&)> constrain;      //!< legal sample values
  std::function<Planes(const std::vector<uint8_t>&)> oracle;  //!< raw frame -> expected tight planes
  int tolerance;
};

constexpr int W = 70, H = 46, CW = W / 2, CH = H / 2;

//! Direct formats: the raw frame is the tight planes of the ops' layout, in order.
Planes split(const std::vector<uint8_t>& raw, ops::PixelFormat f) {
  Planes out;
  size_t off = 0;
  for (int i = 0; i < ops::plane_count(f); ++i) {
    const auto s = ops::plane_shape(f, W, H, i);
    out.emplace_back(raw.begin() + off, raw.begin() + off + size_t(s.row_bytes) * s.rows);
    off += size_t(s.row_bytes) * s.rows;
  }
  return out;
}

const FormatCase kFormatCases[] = {
    {"nv12", ops::PixelFormat::Nv12, W * H + 2 * CW * CH, {},
     [](const auto& r) { return split(r, ops::PixelFormat::Nv12); }, 0},
    {"rgb24", ops::PixelFormat::Rgb24, 3 * W * H, {}, [](const auto& r) { return split(r, ops::PixelFormat::Rgb24); }, 0},
    {"bgr24", ops::PixelFormat::Bgr24, 3 * W * H, {}, [](const auto& r) { return split(r, ops::PixelFormat::Bgr24); }, 0},
    {"yuvj420p", ops::PixelFormat::Yuv420p, W * H + 2 * CW * CH, {},
     [](const auto& r) { return split(r, ops::PixelFormat::Yuv420p); }, 0},
    // 4:2:2 (MJPEG cameras decode to yuvj422p) as it is: a chroma row per luma row.
    {"yuv422p", ops::PixelFormat::Yuv422p, W * H + 2 * CW * H, {},
     [](const auto& r) { return split(r, ops::PixelFormat::Yuv422p); }, 0},
    {"yuvj422p", ops::PixelFormat::Yuv422p, W * H + 2 * CW * H, {},
     [](const auto& r) { return split(r, ops::PixelFormat::Yuv422p); }, 0},
    {"rgba", ops::PixelFormat::Rgb24, 4 * W * H, {},
     [](const auto& r) {
       std::vector<uint8_t> rgb;
       for (size_t i = 0; i < r.size(); i += 4) rgb.insert(rgb.end(), r.begin() + i, r.begin() + i + 3);
       return Planes{rgb};
     }, 0},
    {"gray", ops::PixelFormat::Rgb24, W * H, {},
     [](const auto& r) {
       std::vector<uint8_t> rgb;
       for (uint8_t v : r) rgb.insert(rgb.end(), 3, v);
       return Planes{rgb};
     }, 0},
    // 10-bit 4:2:0 as software decoders write it (little-endian, value in the low bits) as it is.
    {"yuv420p10le", ops::PixelFormat::Yuv420p10, 2 * (W * H + 2 * CW * CH),
     [](auto& r) { for (size_t i = 1; i < r.size(); i += 2) r[i] &= 0x03; },
     [](const auto& r) { return split(r, ops::PixelFormat::Yuv420p10); }, 0},
    // Other 10-bit 4:2:0 layouts become P010 (value in the high bits, U and V interleaved).
    {"yuv420p10be", ops::PixelFormat::P010, 2 * (W * H + 2 * CW * CH),
     [](auto& r) { for (size_t i = 0; i < r.size(); i += 2) r[i] &= 0x03; },
     [](const auto& r) {
       auto sample = [&](size_t i) { return uint16_t((r[2 * i] << 8 | r[2 * i + 1]) << 6); };
       Planes p(2);
       for (size_t i = 0; i < size_t(W) * H; ++i) p[0].insert(p[0].end(), {uint8_t(sample(i)), uint8_t(sample(i) >> 8)});
       const size_t u0 = size_t(W) * H, v0 = u0 + size_t(CW) * CH;
       for (size_t i = 0; i < size_t(CW) * CH; ++i)
         p[1].insert(p[1].end(), {uint8_t(sample(u0 + i)), uint8_t(sample(u0 + i) >> 8), uint8_t(sample(v0 + i)),
                                  uint8_t(sample(v0 + i) >> 8)});
       return p;
     }, 0},
    // 4:4:4 becomes RGB24 with the stream's matrix: untagged SD = BT.601 limited range.
    {"yuv444p", ops::PixelFormat::Rgb24, 3 * W * H,
     [](auto& r) { for (auto& v : r) v = uint8_t(16 + v * 219 / 255); },
     [](const auto& r) {
       std::vector<uint8_t> rgb;
       const size_t n = size_t(W) * H;
       auto clamp = [](double v) { return uint8_t(std::clamp(std::lround(v), 0l, 255l)); };
       for (size_t i = 0; i < n; ++i) {
         const double y = 1.164383 * (r[i] - 16), u = r[n + i] - 128.0, v = r[2 * n + i] - 128.0;
         rgb.insert(rgb.end(), {clamp(y + 1.596027 * v), clamp(y - 0.391762 * u - 0.812968 * v), clamp(y + 2.017232 * u)});
       }
       return Planes{rgb};
     }, 2},
};

class DecodeFormats : public DecodeTest, public ::testing::WithParamInterface<FormatCase> {};

TEST_P(DecodeFormats, DeliversTheOpsFormatWithTheEncodedSamples) {
  const FormatCase& c = GetParam();
  std::vector<std::vector<uint8_t>> raw_frames;
  std::vector<uint8_t> raw;
  for (int i = 0; i < 3; ++i) {
    auto f = random_bytes(c.raw_bytes, 7 * i + 1);
    if (c.constrain) c.constrain(f);
    raw.insert(raw.end(), f.begin(), f.end());
    raw_frames.push_back(std::move(f));
  }
  write_file(dir.path / "raw.bin", raw);
  const fs::path clip = dir.path / "clip.nut";
  ffmpeg(fmt::format("-f rawvideo -pix_fmt {} -s {}x{} -r 25 -i {} -c:v rawvideo {}", c.pix_fmt, W, H,
             (dir.path / "raw.bin").string(), clip.string()));
  VideoSource src(file_spec(clip), "p");
  src.open();
  const auto frames = read_all(src);
  ASSERT_EQ(frames.size(), 3u);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].info.format, c.expected);
    EXPECT_EQ(frames[i].view.format, c.expected);
    EXPECT_EQ(frames[i].view.width, W);
    EXPECT_EQ(frames[i].view.height, H);
    for (int p = ops::plane_count(c.expected); p < 3; ++p) EXPECT_EQ(frames[i].view.data[p], nullptr);
    EXPECT_LE(max_diff(tight_planes(frames[i]), c.oracle(raw_frames[i])), c.tolerance) << "frame " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PixelFormats, DecodeFormats, ::testing::ValuesIn(kFormatCases),
                         [](const auto& info) { return std::string(info.param.pix_fmt); });

// Colour metadata as H.264 carries it (VUI), mapped to the ops' enums.
struct ColorCase {
  const char* name;
  int width, height;
  const char* ffmpeg_args;
  ops::ColorMatrix matrix;
  ops::ColorRange range;
  ops::ChromaLocation location;
};

const ColorCase kColorCases[] = {
    {"bt709_tv", 64, 48, "-pix_fmt yuv420p -colorspace bt709 -color_range tv", ops::ColorMatrix::Bt709,
     ops::ColorRange::Limited, ops::ChromaLocation::Left},
    {"bt470bg_pc_center", 64, 48, "-pix_fmt yuv420p -colorspace bt470bg -color_range pc -chroma_sample_location center",
     ops::ColorMatrix::Bt601, ops::ColorRange::Full, ops::ChromaLocation::Center},
    {"smpte170m_topleft", 64, 48, "-pix_fmt yuv420p -colorspace smpte170m -chroma_sample_location topleft",
     ops::ColorMatrix::Bt601, ops::ColorRange::Limited, ops::ChromaLocation::TopLeft},
    {"untagged_sd", 64, 48, "-pix_fmt yuv420p", ops::ColorMatrix::Bt601, ops::ColorRange::Limited,
     ops::ChromaLocation::Left},
    {"untagged_hd", 32, 720, "-pix_fmt yuv420p", ops::ColorMatrix::Bt709, ops::ColorRange::Limited,
     ops::ChromaLocation::Left},
    {"yuvj420p", 64, 48, "-pix_fmt yuvj420p", ops::ColorMatrix::Bt601, ops::ColorRange::Full, ops::ChromaLocation::Left},
};

class DecodeColor : public DecodeTest, public ::testing::WithParamInterface<ColorCase> {};

TEST_P(DecodeColor, MapsStreamMetadata) {
  const ColorCase& c = GetParam();
  const fs::path clip = dir.path / "color.mp4";
  ffmpeg(fmt::format("-f lavfi -i color=c=0x3070b0:s={}x{}:r=10:d=0.2 -c:v libx264 -threads 1 -preset ultrafast {} {}",
             c.width, c.height, c.ffmpeg_args, clip.string()));
  VideoSource src(file_spec(clip), "p");
  src.open();
  const auto f = src.read();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->info.format, ops::PixelFormat::Yuv420p);
  EXPECT_EQ(f->info.width, c.width);
  EXPECT_EQ(f->info.height, c.height);
  EXPECT_EQ(f->info.matrix, c.matrix);
  EXPECT_EQ(f->info.range, c.range);
  EXPECT_EQ(f->info.chroma_location, c.location);
}

INSTANTIATE_TEST_SUITE_P(Metadata, DecodeColor, ::testing::ValuesIn(kColorCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(DecodeTest, MissingFileNamesPipelineSourceAndReason) {
  const fs::path p = dir.path / "missing.mp4";
  EXPECT_EQ(error_of(p), fmt::format("pipeline 'p': source '{}': No such file or directory", p.string()));
}

TEST_F(DecodeTest, FilesThatAreNotVideoAreRejected) {
  const std::string text = "camera notes\nnothing to decode here\n";
  for (const char* name : {"notes.txt", "notes.dat"}) {
    write_file(dir.path / name, std::vector<uint8_t>(text.begin(), text.end()));
    const std::string msg = error_of(dir.path / name);
    EXPECT_EQ(msg.rfind(fmt::format("pipeline 'p': source '{}': not a media file (", (dir.path / name).string()), 0), 0u)
        << msg;
  }
  write_file(dir.path / "junk.mp4", random_bytes(4096, 99));
  EXPECT_EQ(error_of(dir.path / "junk.mp4"),
            fmt::format("pipeline 'p': source '{}': not a media file (Invalid data found when processing input)",
                (dir.path / "junk.mp4").string()));
  const fs::path audio = dir.path / "tone.m4a";
  ffmpeg(fmt::format("-f lavfi -i sine=d=0.5 -c:a aac {}", audio.string()));
  EXPECT_EQ(error_of(audio), fmt::format("pipeline 'p': source '{}': no video stream", audio.string()));
}

// An MJPEG camera's frames (yuvj422p: full range, chroma centred between luma columns) reach the
// ops as 4:2:2, the samples FFmpeg's own decoder writes, with no conversion on the decode thread.
TEST_F(DecodeTest, MjpegFramesArriveAsFullRange422WithTheDecodersSamples) {
  const fs::path clip = dir.path / "camera.avi";
  ffmpeg(fmt::format("-f lavfi -i testsrc2=s=70x46:r=10:d=0.5 -c:v mjpeg -pix_fmt yuvj422p {}", clip.string()));
  ffmpeg(fmt::format("-i {} -f rawvideo -pix_fmt yuvj422p {}", clip.string(), (dir.path / "raw.yuv").string()));
  const std::vector<uint8_t> raw = read_file(dir.path / "raw.yuv");
  VideoSource src(file_spec(clip), "p");
  src.open();
  const auto frames = read_all(src);
  ASSERT_EQ(frames.size(), 5u);
  const size_t frame_bytes = size_t(W) * H + 2 * size_t(CW) * H;
  ASSERT_EQ(raw.size(), frames.size() * frame_bytes);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].info.format, ops::PixelFormat::Yuv422p);
    EXPECT_EQ(frames[i].info.range, ops::ColorRange::Full);
    EXPECT_EQ(frames[i].info.chroma_location, ops::ChromaLocation::Center);
    const std::vector<uint8_t> want(raw.begin() + long(i * frame_bytes), raw.begin() + long((i + 1) * frame_bytes));
    EXPECT_EQ(tight_planes(frames[i]), split(want, ops::PixelFormat::Yuv422p)) << "frame " << i;
  }
}

TEST_F(DecodeTest, CorruptPacketsAreCountedAndSkipped) {
  const fs::path clip = dir.path / "mjpeg.nut";
  ffmpeg(fmt::format("-f lavfi -i testsrc2=s=64x48:r=10:d=1 -c:v mjpeg -pix_fmt yuvj420p {}", clip.string()));
  auto bytes = read_file(clip);
  // Wipe the 5th JPEG image (SOI .. EOI): its packet fails to decode.
  std::vector<size_t> soi;
  for (size_t i = 0; i + 2 < bytes.size(); ++i)
    if (bytes[i] == 0xFF && bytes[i + 1] == 0xD8 && bytes[i + 2] == 0xFF) soi.push_back(i);
  ASSERT_EQ(soi.size(), 10u);
  std::fill(bytes.begin() + soi[4], bytes.begin() + soi[5] - 8, uint8_t{0});
  write_file(clip, bytes);
  VideoSource src(file_spec(clip), "p");
  src.open();
  const auto frames = read_all(src);
  EXPECT_EQ(frames.size(), 9u);
  EXPECT_EQ(src.decode_errors(), 1u);
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(frames[i].index, int64_t(i));
}

//! Damaged files (bits flipped, ranges zeroed or overwritten, cut short) of one H.264 clip with
//! B-frames, in MP4 and MPEG-TS: each is refused at open, or decodes what it can, counting errors,
//! with frames numbered in order whose planes can all be read (ASan checks that in its lane); a
//! failure names the pipeline and source. Never a crash or another exception.
TEST_F(DecodeTest, DamagedFilesDecodeWhatTheyCanOrFailNamingTheSource) {
  const fs::path mp4 = dir.path / "clip.mp4", ts = dir.path / "clip.ts";
  ffmpeg(fmt::format("-f lavfi -i testsrc2=s=96x64:r=10:d=3 -c:v libx264 -threads 1 -preset ultrafast -g 8 -bf 2 "
                     "-pix_fmt yuv420p {}",
                     mp4.string()));
  ffmpeg(fmt::format("-i {} -c copy -f mpegts {}", mp4.string(), ts.string()));
  std::mt19937 rng(20261201);
  const auto below = [&](size_t n) { return size_t(rng() % std::max<size_t>(n, 1)); };
  int refused = 0, with_frames = 0, with_errors = 0;
  uint64_t sum = 0;   // of every sample read: the reads cannot be left out
  for (const fs::path& clip : {mp4, ts}) {
    const std::vector<uint8_t> good = read_file(clip);
    for (int n = 0; n < 40; ++n) {
      std::vector<uint8_t> bytes = good;
      switch (n % 4) {
        case 0:
          for (size_t k = 1 + below(16); k > 0; --k) bytes[below(bytes.size())] ^= uint8_t(1u << below(8));
          break;
        case 1: {
          const size_t at = below(bytes.size()), len = std::min(bytes.size() - at, 16 + below(512));
          std::fill_n(bytes.begin() + std::ptrdiff_t(at), len, uint8_t{0});
          break;
        }
        case 2: bytes.resize(below(bytes.size())); break;
        case 3: {
          const size_t at = below(bytes.size()), len = std::min(bytes.size() - at, 1 + below(64));
          for (size_t k = 0; k < len; ++k) bytes[at + k] = uint8_t(rng());
          break;
        }
      }
      const fs::path damaged = dir.path / fmt::format("damaged_{}{}", n, clip.extension().string());
      write_file(damaged, bytes);
      const std::string prefix = fmt::format("pipeline 'p': source '{}': ", damaged.string());
      VideoSource src(file_spec(damaged), "p");
      std::vector<DecodedFrame> frames;
      try {
        src.open();
        while (auto f = src.read()) frames.push_back(std::move(*f));
      } catch (const MediaError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
        if (frames.empty()) ++refused;
      }
      for (size_t i = 0; i < frames.size(); ++i) {
        const DecodedFrame& f = frames[i];
        ASSERT_EQ(f.index, int64_t(i)) << damaged;
        ASSERT_TRUE(f.info.width > 0 && f.info.width <= 4096 && f.info.height > 0 && f.info.height <= 4096) << damaged;
        for (int p = 0; p < ops::plane_count(f.view.format); ++p) {
          const auto shape = ops::plane_shape(f.view.format, f.view.width, f.view.height, p);
          ASSERT_NE(f.view.data[p], nullptr) << damaged;
          ASSERT_GE(f.view.pitch[p], shape.row_bytes) << damaged;
          for (int32_t y = 0; y < shape.rows; ++y)
            for (int32_t x = 0; x < shape.row_bytes; ++x) sum += f.view.data[p][size_t(y) * size_t(f.view.pitch[p]) + size_t(x)];
        }
      }
      if (!frames.empty()) ++with_frames;
      if (src.decode_errors() > 0) ++with_errors;
    }
  }
  std::printf("damaged files: %d refused, %d with frames, %d with decode errors counted (of 80)\n", refused, with_frames,
              with_errors);
  EXPECT_GT(sum, 0u) << "the frames' samples (a test pattern) were read";
  EXPECT_GT(with_frames, 40) << "most damage must leave frames to decode";
  EXPECT_GT(with_errors, 0) << "some damage must reach the decoder";
  EXPECT_GT(refused, 0) << "some damage must make the file unreadable";
}

TEST_F(DecodeTest, RealtimePacesFramesAtTheirPts) {
  std::vector<Planes> expected;
  SourceSpec spec = file_spec(lossless_h264(expected));
  spec.realtime = true;
  spec.max_frames = 6;
  const auto [frames, seconds] = read_timed(spec);
  ASSERT_EQ(frames.size(), 6u);
  EXPECT_GE(seconds, 0.45);   // frames 0..5 at 10 fps
  for (int i = 1; i < 6; ++i)
    EXPECT_GE(std::chrono::duration<double>(frames[i].decoded_at - frames[0].decoded_at).count(), i * 0.1 - 0.01);
}

TEST_F(DecodeTest, RealtimeSkipsARecordingGapInsteadOfSleepingThroughIt) {
  // Two 5-frame segments at 10 fps, the second stamped a minute later, appended as MPEG-TS files are.
  const fs::path a = dir.path / "a.ts", b = dir.path / "b.ts", gap = dir.path / "gap.ts";
  for (const auto& [out, offset] : {std::pair{a, 0}, std::pair{b, 60}})
    ffmpeg(fmt::format("-f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 5 -c:v libx264 -g 5 -bf 0 "
                       "-output_ts_offset {} -f mpegts {}",
                       offset, out.string()));
  {
    std::ofstream out(gap, std::ios::binary);
    for (const fs::path& part : {a, b}) out << std::ifstream(part, std::ios::binary).rdbuf();
  }
  SourceSpec spec = file_spec(gap);
  spec.realtime = true;
  const std::vector<DecodedFrame> frames = read_timed(spec).frames;
  ASSERT_EQ(frames.size(), 10u);
  const auto at = [&](int i) {
    return std::chrono::duration<double>(frames[i].decoded_at - frames[0].decoded_at).count();
  };
  EXPECT_NEAR(frames[5].pts_seconds - frames[4].pts_seconds, 59.6, 0.05) << "the gap is in the stream";
  EXPECT_LT(at(5) - at(4), 1.0) << "no minute-long sleep at the gap";
  EXPECT_GE(at(4), 0.39) << "paced before the gap";
  EXPECT_GE(at(9) - at(5), 0.39) << "and after it";
}

// Hybrid decode counts a stream on the decoder it took at its pixel rate times its codec's cost
// there in the balancer's table (a configured one), the codec and bit depth read from the stream.
struct CostCase {
  const char* name;
  const char* encoder;   //!< ffmpeg arguments after the input
  double cpu_cost;       //!< the cores' cost of its codec and depth in kCosts
};

//! Costs unlike the measured ones and unlike each other, so the load shows which entry was taken.
const CodecCosts kCosts{{"h264", {1, 1.5}}, {"hevc", {0.8, 2.5}}, {"hevc_10bit", {0.8, 3.5}}};

const CostCase kCostCases[] = {
    {"h264", "-c:v libx264 -pix_fmt yuv420p", 1.5},
    {"hevc", "-c:v libx265 -pix_fmt yuv420p -x265-params pools=none:log-level=error", 2.5},
    {"hevc10", "-c:v libx265 -pix_fmt yuv420p10le -x265-params pools=none:log-level=error", 3.5},
};

class DecodeCost : public DecodeTest, public ::testing::WithParamInterface<CostCase> {};

TEST_P(DecodeCost, HybridDecodeCountsTheStreamAtItsCodecsCost) {
  const CostCase& c = GetParam();
  constexpr int kCostW = 64, kCostH = 48;
  const fs::path clip = dir.path / "clip.mp4";
  write_file(dir.path / "raw.yuv", random_bytes(size_t(kCostW) * kCostH * 3 / 2 * 4, 11));
  ffmpeg(fmt::format("-f rawvideo -pix_fmt yuv420p -s {}x{} -r 25 -i {} {} -threads 1 {}", kCostW, kCostH,
                     (dir.path / "raw.yuv").string(), c.encoder, clip.string()));
  DecodeBalancer balancer(decode_capacity(100, 100, kCosts));
  SourceSpec spec = file_spec(clip);
  spec.realtime = true;   // paced: counted by its rate
  DecodeOptions options;
  options.decoder = DecoderKind::Cpu;
  options.balancer = &balancer;
  {
    VideoSource src(spec, "p", options);
    src.open();
    const double want = double(kCostW) * kCostH * 25 * c.cpu_cost;
    EXPECT_DOUBLE_EQ(balancer.cpu().paced, want);
    EXPECT_EQ(balancer.nvdec(-1).paced, 0);
  }
  EXPECT_EQ(balancer.cpu().paced, 0) << "the closed source gave its load back";
}

INSTANTIATE_TEST_SUITE_P(Codecs, DecodeCost, ::testing::ValuesIn(kCostCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(DecodeTest, InterruptEndsARealtimeWait) {
  std::vector<uint8_t> raw = random_bytes(3 * 32 * 32 * 3 / 2, 5);
  write_file(dir.path / "raw.yuv", raw);
  const fs::path clip = dir.path / "slow.nut";   // one frame every 5 s
  ffmpeg(fmt::format("-f rawvideo -pix_fmt yuv420p -s 32x32 -r 1/5 -i {} -c:v rawvideo {}", (dir.path / "raw.yuv").string(),
             clip.string()));
  SourceSpec spec = file_spec(clip);
  spec.realtime = true;
  VideoSource src(spec, "p");
  src.open();
  EXPECT_NEAR(src.frame_rate(), 0.2, 1e-9);
  ASSERT_TRUE(src.read().has_value());
  const auto t0 = Clock::now();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    src.interrupt();
  });
  EXPECT_FALSE(src.read().has_value());
  stopper.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
  EXPECT_FALSE(src.read().has_value()) << "interruption is sticky";
}

//! A TCP port that accepts connections (the kernel completes the handshake) and never answers.
class SilentServer {
 public:
  SilentServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
  }
  ~SilentServer() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

TEST_F(DecodeTest, InterruptUnblocksAnRtspOpen) {
  SilentServer server;
  SourceSpec spec;
  spec.kind = SourceKind::Rtsp;
  spec.uri = fmt::format("rtsp://viewer:secret@127.0.0.1:{}/stream", server.port());
  spec.socket_timeout = std::chrono::seconds(60);
  VideoSource src(spec, "cam");
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    src.interrupt();
  });
  const auto t0 = Clock::now();
  std::string msg;
  try {
    src.open();
  } catch (const MediaError& e) {
    msg = e.what();
  }
  stopper.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_EQ(msg, fmt::format("pipeline 'cam': source 'rtsp://viewer:***@127.0.0.1:{}/stream': interrupted", server.port()));
}

TEST_F(DecodeTest, RtspOpenGivesUpAfterTheSocketTimeout) {
  SilentServer server;
  SourceSpec spec;
  spec.kind = SourceKind::Rtsp;
  spec.uri = fmt::format("rtsp://127.0.0.1:{}/stream", server.port());
  spec.socket_timeout = std::chrono::milliseconds(300);
  VideoSource src(spec, "cam");
  const auto t0 = Clock::now();
  std::string msg;
  try {
    src.open();
  } catch (const MediaError& e) {
    msg = e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_EQ(msg.rfind(fmt::format("pipeline 'cam': source 'rtsp://127.0.0.1:{}/stream': ", server.port()), 0), 0u) << msg;
  EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
}

}  // namespace
}  // namespace framefuse
