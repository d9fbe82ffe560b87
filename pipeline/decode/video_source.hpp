#pragma once
//! A file or RTSP video source decoded with FFmpeg (libavformat + libavcodec): in software, into
//! a frame pool's slots when given one, or on the GPU with NVDEC (FFmpeg's <codec>_cuvid decoders
//! on the device's shared primary context; frames stay in device memory). One thread calls open(),
//! read() and frame_info(); interrupt(), decoder() and decode_errors() may be called from any
//! thread. FFmpeg types stay inside the .cpp.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pipeline/decode/decode_balancer.hpp"
#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/memory/frame_pool.hpp"
#include "pipeline/spec.hpp"

struct CUstream_st;   // cudaStream_t

namespace framefuse {

//! How a VideoSource decodes. The defaults: software, into FFmpeg's own buffers.
struct DecodeOptions {
  //! Auto: NVDEC when `cuda_device` >= 0 and NVDEC can decode the stream, else software (each
  //! such fallback reported to `on_fallback`); with a `balancer`, software also when it gives the
  //! stream the cores (hybrid decode). Nvdec: NVDEC or an error. Cpu: software.
  DecoderKind decoder = DecoderKind::Auto;
  //! Hybrid decode: where each (re)opened decoder is counted, and where `auto` asks which decoder
  //! to take; must outlive the source. Null: `auto` takes NVDEC whenever it can.
  DecodeBalancer* balancer = nullptr;
  int cuda_device = -1;                 //!< the pipeline's CUDA device; -1: it runs on the CPU
  //! Software frames of the formats the ops read are decoded straight into its slots (Pinned or
  //! Host frames); null: FFmpeg's own buffers (Host frames). Waits on it follow the pool's policy,
  //! at most the source's stall_timeout, then read() fails naming the pool.
  std::shared_ptr<FramePool> pool;
  int threads = 0;                      //!< decoder threads, 0 = FFmpeg chooses
  //! When set, called as the decoder opens (after the container's probing) for its thread count
  //! instead of `threads`: e.g. a share of the cores among the pipelines alive by then.
  std::function<int()> threads_at_open;
  //! Called (on a decoder thread) when `auto` gives NVDEC up for software, with the reason.
  std::function<void(const std::string& reason)> on_fallback;
};

//! Threads for each of `decoders` software decoders of files that share this host's cores: 0
//! (FFmpeg's choice, cores + 1 up to 16) for one, else an equal share of the cores, 1 to 16. Each
//! frame thread holds a frame in flight (a pool slot: 3.3 MiB at 1080p) and a decoder context of
//! its own, so FFmpeg's count per decoder would multiply memory by the decoders without adding
//! throughput once the cores are busy.
int shared_decoder_threads(int decoders);

//! The software decoders of files that share this host's cores: each opens with
//! shared_decoder_threads() of the members counted when it opens. Thread-safe; outlives its members.
class DecoderShare {
 public:
  void join() { members_.fetch_add(1, std::memory_order_relaxed); }
  void leave() { members_.fetch_sub(1, std::memory_order_relaxed); }
  //! Threads for a member's decoder opening now.
  int threads() const { return shared_decoder_threads(members_.load(std::memory_order_relaxed)); }

 private:
  std::atomic<int> members_{0};
};

//! How a pipeline's source decodes on its device: `spec.decoder`, the device's CUDA index (-1 on
//! the CPU), shared_decoder_threads(`software_decoders`) for files decoded in software (live
//! sources: FFmpeg's slice threads), a frame pool of `spec.pool_frames` slots (0: the default
//! size for its queue, source kind and threads, plus `held_downstream`: frames a batch group may
//! hold beyond the pipeline's queue and executor). Callbacks stay unset for the caller.
DecodeOptions decode_options(const PipelineSpec& spec, const DeviceSpec& device, int software_decoders = 1,
                             int held_downstream = 0);

//! Whether a pipeline of `spec` on `device` decodes a file in software with frame threads (one of
//! the decoders shared_decoder_threads() shares the cores among): a file source decoded by the
//! CPU, asked for (`decoder: cpu`) or the only choice (a CPU device). NVDEC decodes with one thread.
bool decodes_file_in_software(const PipelineSpec& spec, const DeviceSpec& device);

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
  //! The stream's codec and profile as FFmpeg names them: "h264 High", "hevc Main 10"; the codec
  //! alone where the stream states no profile (after open()).
  std::string codec() const;

  //! The stream's average frame rate in frames per second, 0 if unknown (valid after open()).
  double frame_rate() const;
  //! Description of the last frame returned by read().
  FrameInfo frame_info() const;
  //! Packets or frames the decoder rejected so far.
  uint64_t decode_errors() const;
  //! NVDEC: the decode surfaces asked for the stream (after open(); 0: FFmpeg's default); 0 in
  //! software. Same thread as read().
  int decode_surfaces() const;
  //! Times the decoder set itself up for a new size or format so far (FFmpeg's get_format:
  //! software, once at the first frame; NVDEC, once as it opens and once per sequence; again on a
  //! mid-stream change; a loop does not count). Thread-safe.
  int decoder_setups() const;
  //! The decoder's threads (after open(); FFmpeg's own count where it chose). Same thread as read().
  int decoder_threads() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

//! `frame` with its planes in host memory: Device frames (from a VideoSource) are downloaded
//! (av_hwframe_transfer_data), others returned as they are. Throws MediaError.
DecodedFrame to_host(const DecodedFrame& frame);

}  // namespace framefuse
