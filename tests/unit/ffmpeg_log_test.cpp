// route_ffmpeg_logs(): FFmpeg's own lines through spdlog (errors as warnings, warnings as debug,
// chattier as trace), credentials in URIs redacted, split lines joined, FFmpeg's level applied.
#include "pipeline/decode/ffmpeg_log.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

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
    spdlog::set_level(spdlog::level::trace);
    route_ffmpeg_logs();
  }
  void TearDown() override {
    av_log_set_callback(av_log_default_callback);
    spdlog::set_default_logger(previous_);
  }

  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

TEST_F(FfmpegLog, LevelsMapAndUrisAreRedacted) {
  av_log_set_level(AV_LOG_DEBUG);
  av_log(nullptr, AV_LOG_ERROR, "Connection to %s failed: refused\n", "rtsp://viewer:secret@10.0.0.7:554/cam");
  av_log(nullptr, AV_LOG_WARNING, "two: 'http://a:b@h/x' and rtsp://c:d@h2/y, plain tcp://h:1?timeout=5\n");
  av_log(nullptr, AV_LOG_INFO, "Stream #0:0: Video: h264\n");
  EXPECT_EQ(out_.str(),
            "warning ffmpeg: Connection to rtsp://viewer:***@10.0.0.7:554/cam failed: refused\n"
            "debug ffmpeg: two: 'http://a:***@h/x' and rtsp://c:***@h2/y, plain tcp://h:1?timeout=5\n"
            "trace ffmpeg: Stream #0:0: Video: h264\n");
}

TEST_F(FfmpegLog, ALineSplitOverCallsIsOneLine) {
  av_log(nullptr, AV_LOG_ERROR, "method %s failed: ", "DESCRIBE");
  av_log(nullptr, AV_LOG_ERROR, "%d Unauthorized\n", 401);
  EXPECT_EQ(out_.str(), "warning ffmpeg: method DESCRIBE failed: 401 Unauthorized\n");
}

TEST_F(FfmpegLog, FfmpegsLevelApplies) {
  av_log(nullptr, AV_LOG_INFO, "below the warning level route_ffmpeg_logs() sets\n");
  av_log_set_level(AV_LOG_QUIET);
  av_log(nullptr, AV_LOG_ERROR, "quiet please\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(FfmpegLog, SpdlogsLevelApplies) {
  spdlog::set_level(spdlog::level::info);
  av_log(nullptr, AV_LOG_WARNING, "a warning is debug: not shown at info\n");
  av_log(nullptr, AV_LOG_ERROR, "an error is shown\n");
  EXPECT_EQ(out_.str(), "warning ffmpeg: an error is shown\n");
}

}  // namespace
}  // namespace framefuse
