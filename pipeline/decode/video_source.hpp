#pragma once
//! A file or RTSP video source decoded in software with FFmpeg (libavformat + libavcodec).
//! One thread calls open(), read() and frame_info(); interrupt() and decode_errors() may be called
//! from any thread. FFmpeg types stay inside the .cpp.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

class VideoSource {
 public:
  //! Nothing is opened until open(). `decoder_threads` = 0 lets FFmpeg choose.
  VideoSource(SourceSpec spec, std::string pipeline_name, int decoder_threads = 0);
  ~VideoSource();
  VideoSource(const VideoSource&) = delete;
  VideoSource& operator=(const VideoSource&) = delete;

  //! Opens the container and the decoder of its best video stream. Throws MediaError, one line:
  //! "pipeline 'x': source '<redacted uri>': <reason>". RTSP: gives up after spec.socket_timeout.
  void open();

  //! The next frame, whose memory `owner` keeps alive (an AVFrame reference, or a converted copy
  //! for pixel formats the ops do not read). std::nullopt at the end of a file (after `loop`), after
  //! `max_frames`, or once interrupted. Packets that fail to decode are counted and skipped.
  //! Throws MediaError on fatal errors; RTSP: also when no frame came for spec.stall_timeout or the
  //! server ended the stream (cameras do not end; the caller reconnects).
  //! `realtime` files: sleeps until the frame's pts is due, like a live camera.
  std::optional<DecodedFrame> read();

  //! Thread-safe and sticky: a blocking open()/read() returns soon (open throws "interrupted",
  //! read returns std::nullopt), and so do later calls.
  void interrupt();

  //! The stream's average frame rate in frames per second, 0 if unknown (valid after open()).
  double frame_rate() const;
  //! Description of the last frame returned by read().
  FrameInfo frame_info() const;
  //! Packets or frames the decoder rejected so far.
  uint64_t decode_errors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace framefuse
