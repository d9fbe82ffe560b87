// The HTTP layer over real sockets on 127.0.0.1 (ephemeral ports), driven by a fake StatusSource with
// known numbers and read by a plain-socket client (no Beast), plus the JPEG preview encoder checked
// by decoding its output with libavcodec's mjpeg decoder.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <spdlog/fmt/fmt.h>
#include <stdexcept>
#include <thread>
#include <tuple>

extern "C" {
#include <libavcodec/avcodec.h>
}

#include "daemon/http/http_server.hpp"
#include "daemon/http/routes.hpp"
#include "daemon/metrics/prometheus.hpp"
#include "pipeline/preview/jpeg_encoder.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse::daemon {
namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// A fake daemon with known numbers.

DecodedFrame frame_of(std::shared_ptr<test::HostImage> img, ops::ColorMatrix m = ops::ColorMatrix::Bt601) {
  DecodedFrame f;
  f.info = test::frame_info(*img, m, ops::ColorRange::Limited);
  f.view = img->view();
  f.owner = std::move(img);
  return f;
}

//! A 4:2:0 frame of one colour (Y, U, V), rows padded: the preview must show that colour.
std::shared_ptr<test::HostImage> flat_yuv420p(int w, int h, uint8_t y, uint8_t u, uint8_t v) {
  auto img = std::make_shared<test::HostImage>(test::random_image(ops::PixelFormat::Yuv420p, w, h, /*seed=*/w * 7 + h));
  const uint8_t value[3] = {y, u, v};
  for (int i = 0; i < 3; ++i) std::fill(img->planes[i].begin(), img->planes[i].end(), value[i]);
  return img;
}

class FakeSource final : public StatusSource {
 public:
  FakeSource() {
    d_.version = "0.1.0";
    d_.uptime_s = 42.5;
    d_.device = "cpu";
    d_.reloads_ok = 4;
    d_.reloads_failed = 1;
    d_.last_reload_unix_s = 1700000000.5;
    d_.config_path = "/etc/framefuse/framefuse.yaml";

    PipelineSnapshot lobby;
    lobby.name = "lobby";
    lobby.device = "cpu";
    lobby.source = "rtsp://admin:hunter2@cam.local/stream";   // deliberately unredacted
    lobby.state = SourceState::Streaming;
    lobby.frames_decoded = 1234;
    lobby.frames_processed = 1200;
    lobby.dropped = {7, 11, 13};
    lobby.fps = 29.5;
    lobby.last_frame_age_s = 0.25;
    lobby.latency.counts[3] = 9;
    lobby.latency.sum_s = 0.036;
    lobby.frame = "1280x720 yuv420p bt601/limited";
    lobby.last_error = "reconnect to rtsp://admin:hunter2@cam.local/stream failed";
    PipelineSnapshot dock;
    dock.name = "dock \"b\"";
    dock.device = "cpu";
    dock.source = "/videos/dock.mp4";
    dock.state = SourceState::Connecting;
    PipelineSnapshot gate;
    gate.name = "gate";
    gate.device = "cpu";
    gate.source = "/videos/gate.mp4";
    gate.state = SourceState::Streaming;
    p_ = {lobby, dock, gate};

    OutputSpec cls;   // a 448x448 pixel window at (100, 40), normalized float CHW
    cls.name = "cls";
    cls.crop = {100, 40, 448, 448, false};
    cls.resize = {224, 224, 0};
    cls.mean = {0.485f, 0.456f, 0.406f};
    cls.std = {0.229f, 0.224f, 0.225f};
    OutputSpec det;   // whole frame, letterboxed, BGR
    det.name = "det";
    det.resize = {320, 320, 0};
    det.aspect = AspectMode::Letterbox;
    det.channels = ChannelOrder::Bgr;
    specs_["lobby"].outputs = {cls, det};
    OutputSpec norm = cls;   // normalized like cls, on the whole frame
    norm.name = "norm";
    norm.crop = {};
    norm.resize = {30, 20, 0};
    OutputSpec mono;
    mono.name = "mono";
    mono.resize = {16, 16, 0};
    mono.channels = ChannelOrder::Gray;
    mono.dtype = ops::DType::F16;
    OutputSpec filled;   // 300x200 resized to cover 100x100 (150x100), its centre kept: source x 50..250
    filled.name = "filled";
    filled.resize = {100, 100, 0};
    filled.aspect = AspectMode::CenterCropFill;
    specs_["gate"].outputs = {norm, mono, filled};
    specs_["dock \"b\""].outputs = {det};
    for (auto& [name, spec] : specs_) spec.name = name;

    frames_["lobby"] = frame_of(std::make_shared<test::HostImage>(
        test::random_image(ops::PixelFormat::Yuv420p, 1280, 720, /*seed=*/17)));
    frames_["gate"] = frame_of(flat_yuv420p(300, 200, 120, 100, 150));
  }

  DaemonSnapshot daemon() override {
    std::lock_guard lock(mu_);
    return d_;
  }
  std::vector<PipelineSnapshot> pipelines() override {
    std::lock_guard lock(mu_);
    return p_;
  }
  std::optional<DecodedFrame> latest_frame(const std::string& pipeline) override {
    {
      std::unique_lock hold(hold_mu_);
      hold_cv_.wait(hold, [this] { return !hold_; });
    }
    std::lock_guard lock(mu_);
    const auto it = frames_.find(pipeline);
    if (it == frames_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<PipelineSpec> pipeline_spec(const std::string& pipeline) override {
    std::lock_guard lock(mu_);
    const auto it = specs_.find(pipeline);
    if (it == specs_.end()) return std::nullopt;
    return it->second;
  }
  void set_ready(bool ready) {
    std::lock_guard lock(mu_);
    d_.ready = ready;
  }
  //! While held, previews wait (as for a frame that does not come).
  void hold_previews(bool hold) {
    {
      std::lock_guard lock(hold_mu_);
      hold_ = hold;
    }
    hold_cv_.notify_all();
  }

 private:
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool hold_ = false;
  std::mutex mu_;
  DaemonSnapshot d_;
  std::vector<PipelineSnapshot> p_;
  std::map<std::string, DecodedFrame> frames_;
  std::map<std::string, PipelineSpec> specs_;
};

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client on a plain socket, independent of the server's parser.

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;   //!< names lower-cased
  std::string body;
};

class Client {
 public:
  explicit Client(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    const timeval tv{5, 0};   // no test hangs on a silent server
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error(fmt::format("connect to port {} failed: errno {}", port, errno));
  }
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void send(std::string_view raw) {
    while (!raw.empty()) {
      const ssize_t n = ::send(fd_, raw.data(), raw.size(), MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error(fmt::format("send failed: errno {}", errno));
      raw.remove_prefix(static_cast<size_t>(n));
    }
  }

  //! One response; a reply to HEAD has no body whatever its Content-Length says.
  Reply read_reply(bool head = false) {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) throw std::runtime_error("connection closed before a complete header: " + buf_);
    Reply r;
    const std::string header = buf_.substr(0, end);
    if (!header.starts_with("HTTP/1.1 ") || header.size() < 12) throw std::runtime_error("bad status line: " + header);
    r.status = std::stoi(header.substr(9, 3));
    for (size_t pos = header.find("\r\n"); pos != std::string::npos;) {
      const size_t next = header.find("\r\n", pos + 2);
      const std::string line = header.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) throw std::runtime_error("bad header line: " + line);
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
      pos = next;
    }
    const size_t length = head ? 0 : std::stoul(r.headers.at("content-length"));
    while (buf_.size() < end + 4 + length)
      if (!fill()) throw std::runtime_error("connection closed inside a body");
    r.body = buf_.substr(end + 4, length);
    buf_.erase(0, end + 4 + length);
    return r;
  }

  //! Everything until the peer closes (or resets) the connection.
  std::string read_to_eof() {
    while (fill()) {
    }
    return std::exchange(buf_, {});
  }

  //! True when the peer closes the connection without sending anything more.
  bool closed_by_peer() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  bool fill() {
    char tmp[16384];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_;
  std::string buf_;
};

std::string get_line(std::string_view method, std::string_view target, bool keep_alive) {
  return fmt::format("{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\n{}\r\n", method, target,
                     keep_alive ? "" : "Connection: close\r\n");
}

Reply request(uint16_t port, std::string_view target, std::string_view method = "GET") {
  Client c(port);
  c.send(get_line(method, target, false));
  return c.read_reply(method == "HEAD");
}

//! Runs `program` in python3 with the JSON document as sys.argv[1]'s contents bound to `d`, and
//! returns what it prints.
std::optional<std::string> python_on_json(const std::string& json, const std::string& program) {
  if (std::system("command -v python3 > /dev/null 2>&1") != 0) return std::nullopt;
  const auto base = std::filesystem::temp_directory_path() / fmt::format("framefuse_status_{}", ::getpid());
  std::ofstream(base.string() + ".json") << json;
  const std::string cmd = fmt::format("python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); {}' {}.json > {}.out 2>&1",
                                      program, base.string(), base.string());
  const int rc = std::system(cmd.c_str());
  std::ifstream in(base.string() + ".out");
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(base.string() + ".json");
  std::filesystem::remove(base.string() + ".out");
  if (rc != 0) return "python failed: " + out;
  return out;
}

// ---------------------------------------------------------------------------------------------
// JPEG decoding (libavcodec's mjpeg decoder) and the JFIF colour conversion, as the oracle.

struct DecodedJpeg {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;   //!< packed, JFIF full-range BT.601, nearest chroma
};

DecodedJpeg decode_jpeg(std::string_view jpeg) {
  const AVCodec* codec = avcodec_find_decoder(AV_CODEC_ID_MJPEG);
  if (!codec) throw std::runtime_error("no mjpeg decoder");
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  std::vector<uint8_t> data(jpeg.size() + AV_INPUT_BUFFER_PADDING_SIZE, 0);
  std::copy(jpeg.begin(), jpeg.end(), data.begin());
  pkt->data = data.data();
  pkt->size = static_cast<int>(jpeg.size());
  DecodedJpeg out;
  const bool ok = avcodec_open2(ctx, codec, nullptr) >= 0 && avcodec_send_packet(ctx, pkt) >= 0 &&
                  avcodec_receive_frame(ctx, frame) >= 0;
  if (ok && (frame->format == AV_PIX_FMT_YUVJ420P || frame->format == AV_PIX_FMT_YUV420P)) {
    out.width = frame->width;
    out.height = frame->height;
    out.rgb.resize(size_t(3) * out.width * out.height);
    for (int y = 0; y < out.height; ++y) {
      for (int x = 0; x < out.width; ++x) {
        const double Y = frame->data[0][y * frame->linesize[0] + x];
        const double cb = frame->data[1][(y / 2) * frame->linesize[1] + x / 2] - 128.0;
        const double cr = frame->data[2][(y / 2) * frame->linesize[2] + x / 2] - 128.0;
        const double rgb[3] = {Y + 1.402 * cr, Y - 0.344136 * cb - 0.714136 * cr, Y + 1.772 * cb};
        for (int c = 0; c < 3; ++c)
          out.rgb[(size_t(y) * out.width + x) * 3 + c] = static_cast<uint8_t>(std::clamp(std::lround(rgb[c]), 0L, 255L));
      }
    }
  }
  const int format = frame->format;
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avcodec_free_context(&ctx);
  if (!ok) throw std::runtime_error("mjpeg decoder rejected the data");
  if (out.width == 0) throw std::runtime_error(fmt::format("unexpected decoded pixel format {}", format));
  return out;
}

//! Sum over R, G, B of |a - b| at pixel (x, y) of two decoded JPEGs of one size.
int pixel_diff(const DecodedJpeg& a, const DecodedJpeg& b, int x, int y) {
  int d = 0;
  for (int c = 0; c < 3; ++c) {
    const size_t i = (size_t(y) * a.width + x) * 3 + c;
    d += std::abs(int(a.rgb[i]) - int(b.rgb[i]));
  }
  return d;
}

bool is_jpeg(std::string_view b) {
  return b.size() > 4 && uint8_t(b[0]) == 0xFF && uint8_t(b[1]) == 0xD8 && uint8_t(b[b.size() - 2]) == 0xFF &&
         uint8_t(b[b.size() - 1]) == 0xD9;
}

// ---------------------------------------------------------------------------------------------

class Http : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }
  void start(HttpServerOptions opts) {
    server_.reset();
    opts.port = 0;
    server_ = std::make_unique<HttpServer>(opts, source_);
    port_ = server_->port();
  }

  FakeSource source_;   // declared first: outlives the server
  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
};

TEST_F(Http, BindsAnEphemeralPortAndNamesTheAddressWhenBusy) {
  ASSERT_NE(port_, 0);
  HttpServerOptions taken;
  taken.port = port_;
  try {
    HttpServer second(taken, source_);
    FAIL() << "a second server bound the same port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("127.0.0.1:{}", port_)), std::string::npos) << e.what();
  }
}

TEST_F(Http, LivezIsOk) {
  const Reply r = request(port_, "/livez");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "ok\n");
  EXPECT_EQ(r.headers.at("cache-control"), "no-store");
}

TEST_F(Http, MetricsUsePrometheusTextFormat) {
  const Reply r = request(port_, "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("content-type"), kPrometheusContentType);
  EXPECT_NE(r.body.find("\nframefuse_frames_decoded_total{pipeline=\"lobby\"} 1234\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\nframefuse_frames_dropped_total{pipeline=\"lobby\",reason=\"process_error\"} 13\n"),
            std::string::npos);
  EXPECT_NE(r.body.find("\nframefuse_source_state{pipeline=\"dock \\\"b\\\"\",state=\"connecting\"} 1\n"),
            std::string::npos);
  EXPECT_NE(r.body.find("\nframefuse_decode_to_output_seconds_bucket{pipeline=\"lobby\",le=\"0.005\"} 9\n"),
            std::string::npos);
  EXPECT_NE(r.body.find("\nframefuse_config_reloads_total{result=\"failure\"} 1\n"), std::string::npos);
  EXPECT_EQ(r.body.find("hunter2"), std::string::npos);
}

TEST_F(Http, StatusIsJsonWithRedactedSources) {
  const Reply r = request(port_, "/status");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("content-type"), "application/json");
  EXPECT_EQ(r.body.find("hunter2"), std::string::npos) << r.body;
  const auto out = python_on_json(
      r.body, "p=d[\"pipelines\"]; print(d[\"version\"], d[\"ready\"], d[\"uptime_s\"], d[\"config\"][\"reloads_failed\"], "
              "len(p), p[0][\"frames_decoded\"], p[0][\"dropped\"][\"decode_error\"], p[0][\"fps\"], p[1][\"name\"], "
              "p[1][\"last_frame_age_s\"], p[0][\"latency\"][\"count\"], sep=\"|\"); print(p[0][\"source\"]); "
              "print(p[0][\"last_error\"])");
  if (!out) GTEST_SKIP() << "python3 is not installed: cannot parse /status independently";
  EXPECT_EQ(*out,
            "0.1.0|False|42.5|1|3|1234|11|29.5|dock \"b\"|None|9\n"
            "rtsp://admin:***@cam.local/stream\n"
            "reconnect to rtsp://admin:***@cam.local/stream failed\n");
}

TEST_F(Http, ReadyzTurnsFrom503To200) {
  const Reply before = request(port_, "/readyz");
  EXPECT_EQ(before.status, 503);
  EXPECT_NE(before.body.find("pipeline 'dock \"b\"' is connecting"), std::string::npos) << before.body;
  EXPECT_EQ(before.body.find("lobby"), std::string::npos) << "a streaming pipeline is not a reason";
  source_.set_ready(true);
  const Reply after = request(port_, "/readyz");
  EXPECT_EQ(after.status, 200);
}

TEST_F(Http, UnknownRouteIs404AndOtherMethodsAre405) {
  EXPECT_EQ(request(port_, "/nope").status, 404);
  EXPECT_EQ(request(port_, "/metrics/extra").status, 404);
  Client c(port_);
  c.send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  const Reply r = c.read_reply();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers.at("allow"), "GET, HEAD");
}

TEST_F(Http, MalformedRequestIs400) {
  Client c(port_);
  c.send("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(c.read_reply().status, 400);
  EXPECT_TRUE(c.closed_by_peer());
}

TEST_F(Http, KeepAliveServesHeadThenGetOnOneConnection) {
  const Reply full = request(port_, "/metrics");
  Client c(port_);
  c.send(get_line("HEAD", "/metrics", true));
  const Reply head = c.read_reply(/*head=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(std::stoul(head.headers.at("content-length")), full.body.size());
  c.send(get_line("GET", "/livez", true));
  const Reply live = c.read_reply();   // would read metrics bytes if HEAD had sent a body
  EXPECT_EQ(live.status, 200);
  EXPECT_EQ(live.body, "ok\n");
  c.send(get_line("GET", "/status?x=1", true));
  EXPECT_EQ(c.read_reply().status, 200);
}

TEST_F(Http, OversizedHeaderIs431AndClosed) {
  Client ok(port_);
  ok.send("GET /livez HTTP/1.1\r\nHost: x\r\nX-Fill: " + std::string(4000, 'a') + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(ok.read_reply().status, 200);

  Client big(port_);
  big.send("GET /livez HTTP/1.1\r\nHost: x\r\nX-Fill: " + std::string(16384, 'a') + "\r\n\r\n");
  EXPECT_EQ(big.read_reply().status, 431);
  EXPECT_TRUE(big.closed_by_peer());
}

TEST_F(Http, AtTheLimitANewConnectionClosesTheOneIdleLongest) {
  HttpServerOptions opts;
  opts.max_connections = 2;
  start(opts);
  Client first(port_), second(port_);
  for (Client* c : {&first, &second}) {   // both answered, then idle between requests: first longer
    c->send(get_line("GET", "/livez", true));
    ASSERT_EQ(c->read_reply().status, 200);
  }
  Client third(port_);
  third.send(get_line("GET", "/livez", true));
  EXPECT_EQ(third.read_reply().status, 200);
  EXPECT_TRUE(first.closed_by_peer());
  second.send(get_line("GET", "/livez", true));   // the other idle one was kept
  EXPECT_EQ(second.read_reply().status, 200);
}

TEST_F(Http, ExtraConnectionsAreRefusedWhileNoneIsIdle) {
  HttpServerOptions opts;
  opts.max_connections = 2;
  start(opts);
  auto first = std::make_unique<Client>(port_);
  Client second(port_);
  // Each in the middle of a request: not idle, so not closed for a newcomer.
  for (Client* c : {first.get(), &second}) c->send("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  std::this_thread::sleep_for(100ms);   // the server has read both first bytes
  Client third(port_);
  EXPECT_NE(third.read_to_eof().find("503 Service Unavailable"), std::string::npos);
  second.send("\r\n");
  EXPECT_EQ(second.read_reply().status, 200);

  first.reset();
  int status = 0;
  for (int attempt = 0; attempt < 100 && status != 200; ++attempt) {   // the server notices the close
    Client again(port_);
    again.send(get_line("GET", "/livez", false));
    try {
      status = again.read_reply().status;
    } catch (const std::runtime_error&) {
      std::this_thread::sleep_for(20ms);
    }
  }
  EXPECT_EQ(status, 200);
}

TEST_F(Http, PreviewsPilingUpAreAnswered503AtOnce) {
  if (!jpeg_encoder_available()) GTEST_SKIP() << "this FFmpeg has no mjpeg encoder: previews answer 501 at once";
  source_.hold_previews(true);
  std::vector<std::unique_ptr<Client>> waiting;
  for (int i = 0; i < 8; ++i) {   // one made, seven queued behind it
    waiting.push_back(std::make_unique<Client>(port_));
    waiting.back()->send(get_line("GET", "/preview/lobby.jpg", false));
  }
  std::this_thread::sleep_for(300ms);   // the server has read them all
  const Reply busy = request(port_, "/preview/gate.jpg");
  EXPECT_EQ(busy.status, 503);
  EXPECT_EQ(busy.headers.at("retry-after"), "1");
  EXPECT_EQ(request(port_, "/livez").status, 200);   // other routes are not held up
  source_.hold_previews(false);
  for (auto& c : waiting) EXPECT_EQ(c->read_reply().status, 200);
}

TEST_F(Http, AbsoluteFormTargetsAreServed) {
  EXPECT_EQ(request(port_, "http://127.0.0.1:9400/livez").body, "ok\n");
  EXPECT_EQ(request(port_, "HTTP://framefuse.local/status?x=1").status, 200);
  EXPECT_EQ(request(port_, "http://framefuse.local").headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(request(port_, "http://framefuse.local/nope").status, 404);
}

TEST_F(Http, IdleConnectionsAreClosed) {
  HttpServerOptions opts;
  opts.idle_timeout = 200ms;
  start(opts);
  Client c(port_);
  c.send(get_line("GET", "/livez", true));
  ASSERT_EQ(c.read_reply().status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.closed_by_peer());
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 3s);
}

TEST_F(Http, IndexPageIsSelfContained) {
  const Reply r = request(port_, "/");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(r.body.find("fetch(\"/status\""), std::string::npos);
  EXPECT_NE(r.body.find("setInterval(refresh, 2000)"), std::string::npos);
  EXPECT_NE(r.body.find("/preview/"), std::string::npos);
  EXPECT_NE(r.body.find(".jpg?boxes=1"), std::string::npos);
  EXPECT_NE(r.body.find("\"/\" + encodeURIComponent(name)"), std::string::npos);   // one view per output
  EXPECT_EQ(r.body.find("http://"), std::string::npos);
  EXPECT_EQ(r.body.find("https://"), std::string::npos);
  EXPECT_EQ(r.body.find("<link"), std::string::npos);
}

TEST_F(Http, PreviewIsAJpegOfTheLatestFrame) {
  const Reply r = request(port_, "/preview/lobby.jpg?t=123");
  if (!jpeg_encoder_available()) {
    EXPECT_EQ(r.status, 501);
    return;
  }
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers.at("content-type"), "image/jpeg");
  ASSERT_TRUE(is_jpeg(r.body));
  const DecodedJpeg img = decode_jpeg(r.body);
  EXPECT_EQ(img.width, 640);   // 1280x720 scaled to the preview width, aspect kept
  EXPECT_EQ(img.height, 360);

  const Reply head = request(port_, "/preview/lobby.jpg", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_GT(std::stoul(head.headers.at("content-length")), 0u);
}

//! RGB of gate's frame (Y=120 U=100 V=150, BT.601 limited range).
std::array<double, 3> gate_rgb() {
  const double yy = 1.164383 * (120 - 16);
  return {yy + 1.596027 * 22, yy - 0.391762 * -28 - 0.812968 * 22, yy + 2.017232 * -28};
}

TEST_F(Http, PreviewShowsTheFrameColourAtItsOwnSize) {
  if (!jpeg_encoder_available()) GTEST_SKIP() << "this FFmpeg has no mjpeg encoder (the 501 path is tested above)";
  const Reply r = request(port_, "/preview/gate.jpg");
  ASSERT_EQ(r.status, 200) << r.body;
  const DecodedJpeg img = decode_jpeg(r.body);
  ASSERT_EQ(img.width, 300);   // narrower than the preview width: unscaled
  ASSERT_EQ(img.height, 200);
  const auto want = gate_rgb();
  const size_t centre = (size_t(100) * 300 + 150) * 3;
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(img.rgb[centre + c], want[c], 3.0) << "channel " << c;
}

TEST_F(Http, OutputPreviewHasTheTensorSize) {
  if (!jpeg_encoder_available()) GTEST_SKIP() << "this FFmpeg has no mjpeg encoder (the 501 path is tested above)";
  for (const auto& [target, w, h] : {std::tuple{"/preview/lobby/cls.jpg", 224, 224}, {"/preview/lobby/det.jpg", 320, 320},
                                     {"/preview/gate/norm.jpg?t=5", 30, 20}, {"/preview/gate/mono.jpg", 16, 16}}) {
    const Reply r = request(port_, target);
    ASSERT_EQ(r.status, 200) << target << ": " << r.body;
    EXPECT_EQ(r.headers.at("content-type"), "image/jpeg");
    const DecodedJpeg img = decode_jpeg(r.body);
    EXPECT_EQ(img.width, w) << target;
    EXPECT_EQ(img.height, h) << target;
  }
}

TEST_F(Http, OutputPreviewUndoesTheNormalization) {
  if (!jpeg_encoder_available()) GTEST_SKIP() << "this FFmpeg has no mjpeg encoder (the 501 path is tested above)";
  const auto want = gate_rgb();
  // `norm` stores (p / 255 - mean) / std as float: its preview shows the frame's pixels again.
  const DecodedJpeg norm = decode_jpeg(request(port_, "/preview/gate/norm.jpg").body);
  ASSERT_EQ(norm.width, 30);
  const size_t centre = (size_t(10) * 30 + 15) * 3;
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(norm.rgb[centre + c], want[c], 3.0) << "channel " << c;
  // A gray output shows its luma in all three channels.
  const DecodedJpeg mono = decode_jpeg(request(port_, "/preview/gate/mono.jpg").body);
  ASSERT_EQ(mono.width, 16);
  const double luma = 0.299 * want[0] + 0.587 * want[1] + 0.114 * want[2];
  const size_t mid = (size_t(8) * 16 + 8) * 3;
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(mono.rgb[mid + c], luma, 3.0) << "channel " << c;
}

TEST_F(Http, BoxesOutlineTheOutputsCropWindows) {
  if (!jpeg_encoder_available()) GTEST_SKIP() << "this FFmpeg has no mjpeg encoder (the 501 path is tested above)";
  const DecodedJpeg plain = decode_jpeg(request(port_, "/preview/lobby.jpg").body);
  const Reply r = request(port_, "/preview/lobby.jpg?t=1&boxes=1");
  ASSERT_EQ(r.status, 200) << r.body;
  const DecodedJpeg boxed = decode_jpeg(r.body);
  ASSERT_EQ(boxed.width, 640);
  ASSERT_EQ(boxed.height, 360);
  ASSERT_EQ(plain.width, 640);
  const auto diff = [&](int x, int y) { return pixel_diff(plain, boxed, x, y); };
  // cls's window (100, 40, 448, 448) on the half-size preview: x 50..273, y 20..243. The random
  // frame is noise, so a 2-pixel line in a fixed colour changes the pixels along it a lot.
  double top = 0, left = 0;
  for (int x = 60; x < 260; ++x) top += diff(x, 20);
  for (int y = 30; y < 230; ++y) left += diff(50, y);
  EXPECT_GT(top / 200, 60.0);
  EXPECT_GT(left / 200, 60.0);
  // det covers the whole frame: its outline runs along the image border.
  double border = 0;
  for (int x = 300; x < 600; ++x) border += diff(x, 359);
  EXPECT_GT(border / 300, 60.0);
  // JPEG blocks (16x16 MCUs) that no line touches are encoded identically.
  for (int x = 64; x < 272; ++x) EXPECT_EQ(diff(x, 130), 0) << x;
  EXPECT_EQ(request(port_, "/preview/lobby.jpg?boxes=%31").body, r.body);   // the query's escapes decoded
}

TEST_F(Http, BoxesShowWhatACentreCropKeeps) {
  if (!jpeg_encoder_available()) GTEST_SKIP() << "this FFmpeg has no mjpeg encoder (the 501 path is tested above)";
  const DecodedJpeg plain = decode_jpeg(request(port_, "/preview/gate.jpg").body);
  const DecodedJpeg boxed = decode_jpeg(request(port_, "/preview/gate.jpg?boxes=1").body);
  ASSERT_EQ(boxed.width, 300);
  ASSERT_EQ(plain.width, 300);
  const auto diff = [&](int x, int y) { return pixel_diff(plain, boxed, x, y); };
  // `filled` shows source columns 50..249 (the whole height): its outline's sides are there. The
  // flat frame encodes to flat blocks, so blocks no outline touches (16x16) are unchanged.
  EXPECT_GT(diff(50, 100), 60);
  EXPECT_GT(diff(249, 100), 60);
  EXPECT_EQ(diff(24, 100), 0);
  EXPECT_EQ(diff(150, 100), 0);
}

TEST_F(Http, OutputPreviewErrorsNameTheProblem) {
  const Reply out = request(port_, "/preview/lobby/nope.jpg");
  EXPECT_EQ(out.status, 404);
  EXPECT_NE(out.body.find("no output named 'nope'"), std::string::npos) << out.body;
  EXPECT_EQ(request(port_, "/preview/nope/cls.jpg").status, 404);
  EXPECT_EQ(request(port_, "/preview/lobby/.jpg").status, 404);
  EXPECT_EQ(request(port_, "/preview//cls.jpg").status, 404);
  const Reply none = request(port_, "/preview/dock%20%22b%22/det.jpg");   // known output, no frame yet
  EXPECT_EQ(none.status, jpeg_encoder_available() ? 503 : 501) << none.body;
}

TEST_F(Http, PreviewErrorsNameTheProblem) {
  EXPECT_EQ(request(port_, "/preview/nope.jpg").status, 404);
  EXPECT_EQ(request(port_, "/preview/.jpg").status, 404);
  EXPECT_EQ(request(port_, "/preview/lobby.png").status, 404);
  EXPECT_EQ(request(port_, "/preview/lobby%2.jpg").status, 400);
  const Reply none = request(port_, "/preview/dock%20%22b%22.jpg");   // known, no frame yet
  EXPECT_EQ(none.status, jpeg_encoder_available() ? 503 : 501) << none.body;
}

//! The request target comes from the network: any target gets an answer (200, 400, 404, or 501 / 503
//! for previews without an encoder or a frame), never an exception (500) or a crash; the sanitizer
//! lanes run this test too. Seeded targets put together from the routes' own pieces (prefixes,
//! pipeline and output names, suffixes, queries, good and broken %-escapes) and random bytes.
TEST(HttpRouter, PreviewsLeaveTheScrapeThreadHoweverTheyAreSpelled) {
  EXPECT_TRUE(Router::is_slow("/preview/cam.jpg"));
  EXPECT_TRUE(Router::is_slow("/preview/cam/o.jpg?boxes=1"));
  EXPECT_TRUE(Router::is_slow("/%70review/cam.jpg")) << "percent-encoded: routed as a preview";
  EXPECT_FALSE(Router::is_slow("/%2Fpreview/cam.jpg")) << "decodes to //preview/...";
  EXPECT_FALSE(Router::is_slow("/metrics"));
  EXPECT_FALSE(Router::is_slow("/metrics?preview/"));
  EXPECT_FALSE(Router::is_slow("/pre%zzview/cam.jpg")) << "a broken escape is answered 400 at once";
}

TEST(HttpRouter, AnyTargetGetsAnAnswer) {
  FakeSource source;
  const Router router(source);
  const std::vector<std::string> pieces = {
      "/",     "/preview/", "preview", "lobby", "gate", "dock%20%22b%22", "dock \"b\"", "cls", "norm", "mono",
      "det",   ".jpg",      ".png",    "?",     "?boxes=1", "&boxes=1", "=1",  "#",    "%",    "%2",
      "%zz",   "%41",       "%00",     "%2F",   "%2f",  "//",   "..",    "metrics", "status", "livez",
      "readyz", "",         "boxes",   "/./",   "%25",  "\x7f", "\xff"};
  std::mt19937 rng(20261130);
  std::map<int, int> statuses;
  int previews = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string target;
    if (rng() % 3 == 0) {   // a preview target, the names right or wrong, then perhaps one byte changed
      static const char* const names[] = {"lobby", "gate", "dock%20%22b%22", "nope", ""};
      static const char* const outputs[] = {"cls", "det", "norm", "mono", "nope", ""};
      target = std::string("/preview/") + names[rng() % std::size(names)];
      if (rng() % 2) target += std::string("/") + outputs[rng() % std::size(outputs)];
      target += rng() % 6 ? ".jpg" : ".jpeg";
      if (rng() % 3 == 0) target += rng() % 2 ? "?boxes=1" : "?boxes=0&x=%";
      if (rng() % 4 == 0) target[rng() % target.size()] = static_cast<char>(rng() % 256);
    } else {
      target = rng() % 8 ? "/" : "";
      for (int n = 1 + int(rng() % 6); n > 0; --n) {
        if (rng() % 10 == 0) {
          target += static_cast<char>(rng() % 256);
        } else {
          target += pieces[rng() % pieces.size()];
        }
      }
    }
    const char* method = rng() % 4 ? "GET" : "HEAD";
    const HttpResponse r = router.handle(method, target);
    ++statuses[r.status];
    previews += r.status == 200 && r.content_type == "image/jpeg" ? 1 : 0;
    ASSERT_TRUE(r.status == 200 || r.status == 400 || r.status == 404 || r.status == 501 || r.status == 503)
        << r.status << " for '" << target << "': " << r.body;
    ASSERT_FALSE(r.body.empty()) << r.status << " for '" << target << "'";
  }
  // Every kind of answer came up, previews included (a JPEG on 200 for /preview/... targets).
  EXPECT_GT(statuses[200], 0);
  EXPECT_GT(statuses[400], 0);
  EXPECT_GT(statuses[404], 0);
  EXPECT_GT(previews, 0);
}

// ---------------------------------------------------------------------------------------------
// The encoder alone.

TEST(JpegEncoder, RoundTripsASmoothImage) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<double> phase(0, 6.28);
  const double p[3] = {phase(rng), phase(rng), phase(rng)};
  RgbImage img{333, 181, {}};   // odd sizes: 4:2:0 chroma rounds up
  img.pixels.resize(size_t(3) * img.width * img.height);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      for (int c = 0; c < 3; ++c)
        img.pixels[(size_t(y) * img.width + x) * 3 + c] =
            static_cast<uint8_t>(128 + 100 * std::sin(p[c] + x * 0.02 * (c + 1) + y * 0.015 * (3 - c)));
  if (!jpeg_encoder_available()) {
    EXPECT_THROW(encode_jpeg(img), EncoderUnavailable);
    return;
  }
  const std::vector<uint8_t> jpeg = encode_jpeg(img, 2);
  const std::string_view bytes(reinterpret_cast<const char*>(jpeg.data()), jpeg.size());
  ASSERT_TRUE(is_jpeg(bytes));
  const DecodedJpeg back = decode_jpeg(bytes);
  ASSERT_EQ(back.width, img.width);
  ASSERT_EQ(back.height, img.height);
  double sum = 0;
  int worst = 0;
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    const int d = std::abs(int(img.pixels[i]) - int(back.rgb[i]));
    sum += d;
    worst = std::max(worst, d);
  }
  // 4:2:0 and quantisation cost a little; a swapped channel or a limited/full range mix-up costs tens.
  EXPECT_LT(sum / double(img.pixels.size()), 2.5);
  EXPECT_LT(worst, 16);
}

TEST(JpegEncoder, RejectsAnInconsistentImage) {
  const RgbImage bad{4, 4, std::vector<uint8_t>(10, 1)};
  EXPECT_THROW(encode_jpeg(bad), std::invalid_argument);
}

TEST(PreviewRgb, ScalesWideFramesAndKeepsNarrowOnes) {
  const auto wide = frame_of(std::make_shared<test::HostImage>(test::random_image(ops::PixelFormat::Nv12, 1920, 1080, 5)));
  const RgbImage w = preview_rgb(wide, 640);
  EXPECT_EQ(w.width, 640);
  EXPECT_EQ(w.height, 360);
  EXPECT_EQ(w.pixels.size(), size_t(3) * 640 * 360);
  const auto narrow = frame_of(std::make_shared<test::HostImage>(test::random_image(ops::PixelFormat::Rgb24, 7, 5, 6)));
  const RgbImage n = preview_rgb(narrow, 640);
  ASSERT_EQ(n.width, 7);
  ASSERT_EQ(n.height, 5);
  // Rgb24 at its own size is a copy of the frame's pixels (rows de-padded).
  const auto& src = *std::static_pointer_cast<const test::HostImage>(narrow.owner);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 21; ++x) EXPECT_EQ(n.pixels[y * 21 + x], src.planes[0][y * src.pitch[0] + x]) << x << "," << y;
  EXPECT_THROW(preview_rgb(narrow, 0), std::invalid_argument);
}

}  // namespace
}  // namespace framefuse::daemon
