// Fuzz target: the HTTP routes (daemon/http/routes.cpp) on any method and request target, as a
// client sends them, against a fake daemon with one pipeline (a 96x64 frame, two outputs). Input:
// method, '\n', target, '\n' and the pipeline's name. Properties: a response for every request
// (no exception, no crash), with a status in 200..599, a JPEG body (FF D8 ... FF D9) for every
// 200 preview, and never the camera's password (in its source URI and its last error) unless the
// request itself carried it.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "daemon/http/routes.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse::daemon {
namespace {

constexpr std::string_view kPassword = "pw-7f3a9c";

class OnePipeline final : public StatusSource {
 public:
  explicit OnePipeline(std::string name) : name_(std::move(name)) {
    auto img = std::make_shared<test::HostImage>(test::random_image(ops::PixelFormat::Yuv420p, 96, 64, /*seed=*/5));
    frame_.info = test::frame_info(*img, ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
    frame_.view = img->view();
    frame_.owner = std::move(img);
    spec_.name = name_;
    OutputSpec cls;
    cls.name = "cls";
    cls.crop = {10, 4, 48, 40, false};
    cls.resize = {24, 24, 0};
    cls.mean = {0.485f, 0.456f, 0.406f};
    cls.std = {0.229f, 0.224f, 0.225f};
    OutputSpec gray;
    gray.name = "gray";
    gray.resize = {32, 32, 0};
    gray.aspect = AspectMode::Letterbox;
    gray.channels = ChannelOrder::Gray;
    spec_.outputs = {cls, gray};
    PipelineSnapshot p;
    p.name = name_;
    p.device = "cpu";
    p.source = "rtsp://user:" + std::string(kPassword) + "@cam/" + name_;
    p.state = SourceState::Streaming;
    p.last_error = "rtsp://user:" + std::string(kPassword) + "@cam/" + name_ + ": Connection refused";
    p.frame = "96x64 yuv420p bt709/limited";
    pipelines_ = {p};
  }
  DaemonSnapshot daemon() override {
    DaemonSnapshot d;
    d.version = "fuzz";
    d.device = "cpu";
    d.ready = true;
    return d;
  }
  std::vector<PipelineSnapshot> pipelines() override { return pipelines_; }
  std::optional<DecodedFrame> latest_frame(const std::string& pipeline) override {
    if (pipeline != name_) return std::nullopt;
    return frame_;
  }
  std::optional<PipelineSpec> pipeline_spec(const std::string& pipeline) override {
    if (pipeline != name_) return std::nullopt;
    return spec_;
  }

 private:
  std::string name_;
  DecodedFrame frame_;
  PipelineSpec spec_;
  std::vector<PipelineSnapshot> pipelines_;
};

}  // namespace
}  // namespace framefuse::daemon

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using framefuse::fuzz::check;
  framefuse::fuzz::InputReader in(data, size);
  const std::string method(in.text_until('\n'));
  const std::string target(in.text_until('\n'));
  std::string name(in.rest_text());
  if (name.empty()) name = "lobby";
  framefuse::daemon::OnePipeline source(name);
  const framefuse::daemon::Router router(source);
  const auto r = router.handle(method, target);
  check(r.status >= 200 && r.status <= 599, "a status outside 200..599");
  if (std::string_view(reinterpret_cast<const char*>(data), size).find(framefuse::daemon::kPassword) ==
      std::string_view::npos)
    check(r.body.find(framefuse::daemon::kPassword) == std::string::npos, "a response shows the camera's password");
  if (r.status == 200 && r.content_type == "image/jpeg") {
    const auto& b = r.body;
    check(b.size() > 4 && uint8_t(b[0]) == 0xFF && uint8_t(b[1]) == 0xD8 && uint8_t(b[b.size() - 2]) == 0xFF &&
              uint8_t(b[b.size() - 1]) == 0xD9,
          "a 200 preview that is not a JPEG");
  }
  return 0;
}
