// FFmpeg's own log lines, once a VideoSource exists: forwarded to spdlog at debug level (warnings
// and worse only), URIs redacted, FFmpeg's level still applied; nothing of them at info level.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

#include "pipeline/decode/video_source.hpp"

extern "C" {
#include <libavutil/log.h>
}

namespace framefuse {
namespace {

class FfmpegLog : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("ffmpeg_log_test",
                                                   std::make_shared<spdlog::sinks::ostream_sink_st>(out_));
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::debug);
    av_log_set_level(AV_LOG_INFO);
    SourceSpec spec;
    spec.uri = "unused.mp4";
    VideoSource source(spec, "p");   // constructing one routes FFmpeg's log (nothing is opened)
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

TEST_F(FfmpegLog, WarningsAndErrorsGoToDebugWithUrisRedacted) {
  av_log(nullptr, AV_LOG_ERROR, "Connection to %s failed: refused\n", "rtsp://viewer:secret@10.0.0.7:554/cam");
  av_log(nullptr, AV_LOG_WARNING, "two: 'http://a:b@h/x' and rtsp://c:d@h2/y, plain tcp://h:1?timeout=5\n");
  EXPECT_EQ(out_.str(),
            "debug ffmpeg: Connection to rtsp://viewer:***@10.0.0.7:554/cam failed: refused\n"
            "debug ffmpeg: two: 'http://a:***@h/x' and rtsp://c:***@h2/y, plain tcp://h:1?timeout=5\n");
}

TEST_F(FfmpegLog, InfoAndChattierLinesAreDropped) {
  av_log(nullptr, AV_LOG_INFO, "Stream #0:0: Video: h264\n");
  av_log(nullptr, AV_LOG_VERBOSE, "verbose\n");
  av_log(nullptr, AV_LOG_DEBUG, "debug\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(FfmpegLog, FfmpegsOwnLevelStillApplies) {
  av_log_set_level(AV_LOG_QUIET);
  av_log(nullptr, AV_LOG_ERROR, "quiet please\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(FfmpegLog, NothingAboveDebug) {
  spdlog::set_level(spdlog::level::info);
  av_log(nullptr, AV_LOG_ERROR, "Connection refused\n");
  EXPECT_EQ(out_.str(), "");
}

}  // namespace
}  // namespace framefuse
