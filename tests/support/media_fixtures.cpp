#include "tests/support/media_fixtures.hpp"

#include <spdlog/fmt/fmt.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <regex>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

namespace framefuse::test {
namespace fs = std::filesystem;

namespace {

std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

void check(int err, const fs::path& clip, const char* what) {
  if (err < 0) throw std::runtime_error(fmt::format("concat_as_mpegts: {}: {}: {}", clip.string(), what, av_error(err)));
}

struct InputCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct OutputCloser {
  void operator()(AVFormatContext* c) const {
    if (c->pb) avio_closep(&c->pb);
    avformat_free_context(c);
  }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};

//! `clip`'s best video stream, stream-copied into a new MPEG-TS file `segment`.
void remux_video(const fs::path& clip, const fs::path& segment, int max_frames) {
  AVFormatContext* raw_in = nullptr;
  check(avformat_open_input(&raw_in, clip.c_str(), nullptr, nullptr), clip, "open");
  std::unique_ptr<AVFormatContext, InputCloser> in(raw_in);
  check(avformat_find_stream_info(in.get(), nullptr), clip, "stream info");
  const int index = av_find_best_stream(in.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  check(index, clip, "no video stream");
  const AVStream* ist = in->streams[index];

  AVFormatContext* raw_out = nullptr;
  check(avformat_alloc_output_context2(&raw_out, nullptr, "mpegts", segment.c_str()), clip, "mpegts muxer");
  std::unique_ptr<AVFormatContext, OutputCloser> out(raw_out);
  AVStream* ost = avformat_new_stream(out.get(), nullptr);
  if (!ost) throw std::runtime_error(fmt::format("concat_as_mpegts: {}: out of memory", clip.string()));
  check(avcodec_parameters_copy(ost->codecpar, ist->codecpar), clip, "codec parameters");
  ost->codecpar->codec_tag = 0;
  check(avio_open(&out->pb, segment.c_str(), AVIO_FLAG_WRITE), segment, "create");
  // The muxer inserts h264_mp4toannexb itself (AVFMT_FLAG_AUTO_BSF) for MP4-style H.264.
  check(avformat_write_header(out.get(), nullptr), clip, "TS header");

  std::unique_ptr<AVPacket, PacketFree> pkt(av_packet_alloc());
  int copied = 0;
  while (max_frames < 0 || copied < max_frames) {
    const int err = av_read_frame(in.get(), pkt.get());
    if (err == AVERROR_EOF) break;
    check(err, clip, "read");
    if (pkt->stream_index != index) {
      av_packet_unref(pkt.get());
      continue;
    }
    pkt->stream_index = 0;
    av_packet_rescale_ts(pkt.get(), ist->time_base, ost->time_base);
    pkt->pos = -1;
    check(av_interleaved_write_frame(out.get(), pkt.get()), clip, "write");   // takes the packet's reference
    ++copied;
  }
  check(av_write_trailer(out.get()), clip, "TS trailer");
}

}  // namespace

void concat_as_mpegts(std::span<const fs::path> clips, const fs::path& out, int max_frames_each) {
  std::ofstream joined(out, std::ios::binary | std::ios::trunc);
  if (!joined) throw std::runtime_error(fmt::format("concat_as_mpegts: cannot create {}", out.string()));
  for (size_t i = 0; i < clips.size(); ++i) {
    fs::path segment = out;
    segment += fmt::format(".part{}.ts", i);
    remux_video(clips[i], segment, max_frames_each);
    std::ifstream part(segment, std::ios::binary);
    joined << part.rdbuf();
    part.close();
    fs::remove(segment);
  }
  if (!joined.flush()) throw std::runtime_error(fmt::format("concat_as_mpegts: cannot write {}", out.string()));
}

std::map<std::string, std::string> read_files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    files[fs::relative(e.path(), dir).string()] = std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

namespace {
constexpr size_t kNpyPrefix = 10;   // magic (6), version (2), header length (2, little endian)
size_t npy_header_size(const std::string& npy) {
  if (npy.size() < kNpyPrefix || npy.compare(0, 6, "\x93NUMPY") != 0) return 0;
  return kNpyPrefix + (uint8_t(npy[8]) | size_t(uint8_t(npy[9])) << 8);
}
}  // namespace

std::vector<int64_t> npy_shape(const std::string& npy) {
  static const std::regex shape_re(R"('shape': \(([0-9, ]*)\))"), num_re("[0-9]+");
  const std::string header = npy.substr(0, npy_header_size(npy));
  std::smatch m;
  if (!std::regex_search(header, m, shape_re)) return {};
  std::vector<int64_t> shape;
  const std::string dims = m[1].str();
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num_re); it != std::sregex_iterator(); ++it)
    shape.push_back(std::stoll(it->str()));
  return shape;
}

std::span<const std::byte> npy_payload(const std::string& npy) {
  const size_t header = std::min(npy_header_size(npy), npy.size());
  return std::as_bytes(std::span(npy)).subspan(header);
}

}  // namespace framefuse::test
