#pragma once
//! FFmpeg helpers for .cpp files that already use FFmpeg: error codes as text, and owning pointers
//! for the FFmpeg objects the media layer creates.
#include <memory>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

namespace framefuse {

inline std::string av_error(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof buf);
  return buf;
}

namespace av {
struct FormatClose {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsFree {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
}  // namespace av

using AvFormatPtr = std::unique_ptr<AVFormatContext, av::FormatClose>;   //!< an opened input
using AvCodecPtr = std::unique_ptr<AVCodecContext, av::CodecFree>;
using AvFramePtr = std::unique_ptr<AVFrame, av::FrameFree>;
using AvPacketPtr = std::unique_ptr<AVPacket, av::PacketFree>;
using SwsPtr = std::unique_ptr<SwsContext, av::SwsFree>;

}  // namespace framefuse
