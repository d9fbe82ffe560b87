#pragma once
//! FFmpeg helpers for .cpp files that already use FFmpeg: error codes as text, owning pointers
//! for the FFmpeg objects the media layer creates, and the decoded formats the ops read as they are.
#include <memory>
#include <optional>
#include <string>

#include "pipeline/ops/image.hpp"

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

//! The ops' format of software frames of `f` that the fused pass reads as they are (decoded
//! straight into the frame pool); nullopt: the decode thread converts them first.
inline std::optional<ops::PixelFormat> ops_format(AVPixelFormat f) {
  switch (f) {
    case AV_PIX_FMT_YUV420P:
    case AV_PIX_FMT_YUVJ420P: return ops::PixelFormat::Yuv420p;
    case AV_PIX_FMT_YUV422P:
    case AV_PIX_FMT_YUVJ422P: return ops::PixelFormat::Yuv422p;
    case AV_PIX_FMT_NV12: return ops::PixelFormat::Nv12;
    case AV_PIX_FMT_P010LE: return ops::PixelFormat::P010;
    case AV_PIX_FMT_YUV420P10LE: return ops::PixelFormat::Yuv420p10;
    case AV_PIX_FMT_RGB24: return ops::PixelFormat::Rgb24;
    case AV_PIX_FMT_BGR24: return ops::PixelFormat::Bgr24;
    default: return std::nullopt;
  }
}

using AvFormatPtr = std::unique_ptr<AVFormatContext, av::FormatClose>;   //!< an opened input
using AvCodecPtr = std::unique_ptr<AVCodecContext, av::CodecFree>;
using AvFramePtr = std::unique_ptr<AVFrame, av::FrameFree>;
using AvPacketPtr = std::unique_ptr<AVPacket, av::PacketFree>;
using SwsPtr = std::unique_ptr<SwsContext, av::SwsFree>;

}  // namespace framefuse
