#pragma once
//! A file or RTSP video source decoded with FFmpeg (libavformat + libavcodec): in software, into
//! a frame pool's slots when given one, or on the GPU with NVDEC (FFmpeg's cuda hwaccel on the
//! device's shared primary context; frames stay in device memory). One thread calls open(),
//! read() and frame_info(); interrupt(), decoder() and decode_errors() may be called from any
//! thread. FFmpeg types stay inside the .cpp.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/memory/frame_pool.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

//! How a VideoSource decodes. The defaults: software, into FFmpeg's own buffers.
struct DecodeOptions {
  //! Auto: NVDEC when `cuda_device` >= 0 and NVDEC can decode the stream, else software (each
  //! such fallback reported to `on_fallback`). Nvdec: NVDEC or an error. Cpu: software.
  DecoderKind decoder = DecoderKind::Auto;
  int cuda_device = -1;                 //!< the pipeline's CUDA device; -1: it runs on the CPU
  //! Software frames of the formats the ops read are decoded straight into its slots (Pinned or
  //! Host frames); null: FFmpeg's own buffers (Host frames). Waits on it follow the pool's policy,
  //! at most the source's stall_timeout, then read() fails naming the pool.
  std::shared_ptr<FramePool> pool;
  int threads = 0;                      //!< decoder threads, 0 = FFmpeg chooses
  //! Called (on a decoder thread) when `auto` gives NVDEC up for software, with the reason.
  std::function<void(const std::string& reason)> on_fallback;
};

//! How a pipeline's source decodes on its device: `spec.decoder`, the device's CUDA index (-1 on
//! the CPU) and a frame pool of `spec.pool_frames` slots (0: the default size for its queue and
//! source kind). Callbacks stay unset for the caller.
DecodeOptions decode_options(const PipelineSpec& spec, const DeviceSpec& device);

class VideoSource {
 public:
  //! Nothing is opened until open().
  VideoSource(SourceSpec spec, std::string pipeline_name, DecodeOptions options = {});
  ~VideoSource();
  VideoSource(const VideoSource&) = delete;
  VideoSource& operator=(const VideoSource&) = delete;

  //! Opens the container and the decoder of its best video stream. Throws MediaError, one line:
  //! "pipeline 'x': source '<redacted uri>': <reason>". RTSP: gives up after spec.socket_timeout.
  //! `nvdec` fails here when NVDEC cannot be used at all (CPU pipeline, no driver, codec without
  //! NVDEC support), or at the first read() when it cannot decode the stream (profile, format).
  void open();

  //! The next frame, whose memory `owner` keeps alive (an AVFrame reference, or a converted copy
  //! for pixel formats the ops do not read). NVDEC frames are Device memory (NV12 or P010): the
  //! surface goes back to FFmpeg when the last reference goes, so keep the frame until the last
  //! kernel reading it has completed. std::nullopt at the end of a file (after `loop`), after
  //! `max_frames`, or once interrupted. Packets that fail to decode are counted and skipped.
  //! Throws MediaError on fatal errors; RTSP: also when no frame came for spec.stall_timeout +
  //! spec.socket_timeout (the caller reports the stall at stall_timeout; the socket timeout is the
  //! stream's grace to resume) or the server ended the stream (cameras do not end; the caller
  //! reconnects).
  //! `realtime` files: sleeps until the frame's pts is due, like a live camera.
  std::optional<DecodedFrame> read();

  //! Thread-safe and sticky: a blocking open()/read() returns soon (open throws "interrupted",
  //! read returns std::nullopt), and so do later calls. Also wakes a wait for a pool slot.
  void interrupt();

  //! The decoder in use: Nvdec or Cpu (after open(); NVDEC may still give way at the first frame).
  DecoderKind decoder() const;

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

//! `frame` with its planes in host memory: Device frames (from a VideoSource) are downloaded
//! (av_hwframe_transfer_data), others returned as they are. Throws MediaError.
DecodedFrame to_host(const DecodedFrame& frame);

}  // namespace framefuse
