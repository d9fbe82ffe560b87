#include "pipeline/decode/video_source.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <spdlog/fmt/fmt.h>

#include "pipeline/decode/av_util.hpp"
#include "pipeline/util/clock.hpp"
#include "pipeline/decode/cuda_device_context.hpp"
#include "pipeline/decode/parameter_sets.hpp"
#include "pipeline/error.hpp"
#include "pipeline/util/redact.hpp"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

namespace framefuse {
namespace {

using Clock = std::chrono::steady_clock;

//! A DecodedFrame::owner holding `f`.
std::shared_ptr<const void> owner_of(AvFramePtr f) { return std::shared_ptr<const AVFrame>(std::move(f)); }

//! The ops' format for NVDEC frames of software format `sw` (NV12 for 8-bit 4:2:0, P010 for 10-bit).
std::optional<ops::PixelFormat> nvdec_format(AVPixelFormat sw) {
  switch (sw) {
    case AV_PIX_FMT_NV12: return ops::PixelFormat::Nv12;
    case AV_PIX_FMT_P010LE: return ops::PixelFormat::P010;
    default: return std::nullopt;
  }
}

//! The codec whose sequence parameter sets parameter_sets.hpp reads, if `par`'s is one.
std::optional<SpsCodec> sps_codec(const AVCodecParameters& par) {
  if (par.codec_id == AV_CODEC_ID_H264) return SpsCodec::H264;
  if (par.codec_id == AV_CODEC_ID_HEVC) return SpsCodec::Hevc;
  return std::nullopt;
}

std::span<const uint8_t> extradata(const AVCodecParameters& par) {
  return {par.extradata, size_t(std::max(par.extradata_size, 0))};
}

//! NVDEC decode surfaces for the stream (FFmpeg's cuvid `surfaces`): the frames its decoded picture
//! buffer holds, from the SPS in force (`sps`, a NAL unit; empty: the extradata's) (parameter_sets.
//! hpp; plus the frames FFmpeg sees it reorder when the SPS leaves them out), the one being decoded
//! and one to spare. 0 when the stream does not tell (FFmpeg's default, 25). Too few surfaces would
//! corrupt frames silently, so no guess goes lower.
int nvdec_surfaces(const AVCodecParameters& par, std::span<const uint8_t> sps) {
  const std::optional<SpsCodec> codec = sps_codec(par);
  if (!codec) return 0;
  const DpbSize dpb = dpb_size(*codec, sps.empty() ? find_sps(*codec, extradata(par)) : sps);
  if (dpb.frames < 0) return 0;
  constexpr int kNvdecMaxSurfaces = 32;   // CUVIDDECODECREATEINFO::ulNumDecodeSurfaces
  const int reordered = dpb.reordering_included ? 0 : std::max(par.video_delay, 0);
  return std::min(dpb.frames + reordered + 2, kNvdecMaxSurfaces);
}

//! Deep 4:2:0 YUV keeps its colour path in the ops as P010; everything else becomes RGB24.
AVPixelFormat conversion_target(AVPixelFormat f) {
  const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(f);
  const bool yuv420_deep = d && !(d->flags & AV_PIX_FMT_FLAG_RGB) && d->nb_components >= 3 &&
                           d->log2_chroma_w == 1 && d->log2_chroma_h == 1 && d->comp[0].depth > 8;
  return yuv420_deep ? AV_PIX_FMT_P010LE : AV_PIX_FMT_RGB24;
}

//! An AVFrame colour field as the integer the decoder stored: FFmpeg copies some of them from the
//! bitstream unchecked (a chroma_sample_loc_type of 32 arrives as 33), and loading a value outside
//! the enumeration through the enum type is undefined behaviour.
template <class Enum>
int stored_value(const Enum& field) {
  std::underlying_type_t<Enum> v;
  std::memcpy(&v, &field, sizeof v);
  return static_cast<int>(v);
}

//! Unspecified (or unsupported) matrices follow the usual convention: HD is BT.709, SD is BT.601.
ops::ColorMatrix map_matrix(int cs, int height) {
  switch (cs) {
    case AVCOL_SPC_BT709: return ops::ColorMatrix::Bt709;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M:
    case AVCOL_SPC_FCC: return ops::ColorMatrix::Bt601;
    default: return height >= 720 ? ops::ColorMatrix::Bt709 : ops::ColorMatrix::Bt601;
  }
}

ops::ColorRange map_range(int r, AVPixelFormat f) {
  const bool jpeg = f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P;
  return r == AVCOL_RANGE_JPEG || jpeg ? ops::ColorRange::Full : ops::ColorRange::Limited;
}

//! TOP/BOTTOM/BOTTOMLEFT have no ops equivalent and are rare; they read as the H.264 default.
ops::ChromaLocation map_chroma_location(int l) {
  switch (l) {
    case AVCHROMA_LOC_CENTER: return ops::ChromaLocation::Center;
    case AVCHROMA_LOC_TOPLEFT: return ops::ChromaLocation::TopLeft;
    default: return ops::ChromaLocation::Left;
  }
}

}  // namespace

struct VideoSource::Impl {
  SourceSpec spec;
  DecodeOptions opts;
  std::string context;   //!< "pipeline 'x': source '<redacted uri>'"

  AvFormatPtr format;
  AvCodecPtr codec;
  AvPacketPtr packet{av_packet_alloc()};
  AvFramePtr frame{av_frame_alloc()};
  int stream_index = -1;
  double time_base = 0;
  double fps = 0;
  FrameInfo info;
  std::atomic<uint64_t> errors{0};

  // Decoder choice. get_format and get_buffer run on FFmpeg's threads: state they share is atomic,
  // or behind fatal_mu. `fatal`: why reading must stop (set where no exception may be thrown).
  std::atomic<DecoderKind> in_use{DecoderKind::Cpu};
  std::atomic<bool> nvdec_wanted{false};   //!< NVDEC set up at open and not given up
  std::atomic<int> format_choices{0};      //!< decoder set-ups (choose_format)
  std::tuple<int, int, int, int, AVPixelFormat> last_shape{0, 0, 0, 0, AV_PIX_FMT_NONE};   //!< the last set-up's (get_format only)
  int surfaces = 0;                        //!< NVDEC decode surfaces asked for (0: FFmpeg's default)
  DecodeBalancer::Lease lease;             //!< with opts.balancer: the decoder's share counted there
  std::unique_ptr<LegacyStreamFence> copies;   //!< NVDEC: waits for a frame's copy before read() returns it
  // NVDEC across a change of sequence (new SPS) in an Annex B stream: FFmpeg 5.1's cuvid decoder
  // sets NVIDIA's decoder up again for the new sequence without first handing out the frames it
  // holds back for reordering, which then came out at the new size with wrong pixels (H200). So a
  // keyframe with another SPS drains the decoder and opens a new one, which the keyframe starts.
  bool track_sequences = false;    //!< NVDEC on H.264/HEVC with Annex B packets
  std::vector<uint8_t> sequence;   //!< the current SPS NAL unit; empty: none seen in the packets yet
  AvPacketPtr next_sequence;       //!< while draining: the keyframe that starts the next sequence
  std::mutex fatal_mu;
  std::string fatal;

  // Conversion of formats the ops do not read; rebuilt when the key changes.
  SwsPtr sws;
  std::tuple<int, int, int, ops::ColorMatrix, ops::ColorRange> sws_key{-1, 0, 0, {}, {}};

  // Interruption: a sticky flag plus a deadline re-armed per open/read (0 = none).
  std::atomic<bool> interrupted{false};
  std::atomic<int64_t> deadline_ns{0};
  std::atomic<bool> deadline_hit{false};
  std::mutex sleep_mu;
  std::condition_variable sleep_cv;

  // Reading state. pts_seconds stays continuous across loops: each restart adds the pass length.
  int64_t next_index = 0;
  int passes_without_frame = 0;   //!< loop rewinds since the last received frame
  int pending_passes = 0;         //!< loop rewinds whose first frame has not come out yet
  bool input_eof = false;
  double loop_offset = 0;
  double pass_first_pts = NAN, last_pts = NAN, last_step = 0;
  // Realtime pacing: frame with pts `pace_pts` is due at `pace_wall`; `pace_last`: the last frame's.
  bool paced = false;
  Clock::time_point pace_wall{};
  double pace_pts = 0, pace_last = 0;

  Impl(SourceSpec s, const std::string& pipeline, DecodeOptions o)
      : spec(std::move(s)), opts(std::move(o)),
        context(fmt::format("pipeline '{}': source '{}'", pipeline, redact_uri(spec.uri))) {}

  //! Closing an RTSP session sends TEARDOWN: bounded like any network call, and done here, while
  //! the interruption state that interrupt_cb reads is still alive.
  ~Impl() {
    codec.reset();   // first: its frame threads may still call get_buffer/get_format on this object
    arm_deadline(spec.socket_timeout);
    format.reset();
  }

  [[noreturn]] void fail(std::string_view reason) const { throw MediaError(fmt::format("{}: {}", context, reason)); }

  bool rtsp() const { return spec.kind == SourceKind::Rtsp; }

  static int interrupt_cb(void* opaque) {
    auto* self = static_cast<Impl*>(opaque);
    if (self->interrupted.load(std::memory_order_relaxed)) return 1;
    const int64_t d = self->deadline_ns.load(std::memory_order_relaxed);
    if (d != 0 && steady_now_ns() > d) {
      self->deadline_hit.store(true, std::memory_order_relaxed);
      return 1;
    }
    return 0;
  }

  //! How long one RTSP read() may wait for a frame: the stall, which the caller reports at
  //! stall_timeout while the read still waits, is given one socket timeout more to resume (no
  //! reconnect, no wait for the next keyframe) before the session is given up.
  std::chrono::milliseconds read_timeout() const {
    return spec.stall_timeout + std::chrono::ceil<std::chrono::milliseconds>(spec.socket_timeout);
  }

  template <class Duration>
  void arm_deadline(Duration timeout) {
    deadline_hit = false;
    deadline_ns = rtsp() ? steady_now_ns() + std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count() : 0;
  }

  //! Why an FFmpeg call failed during open(): interruption, our deadline, or the error code.
  std::string open_reason(int err) const {
    if (interrupted) return "interrupted";
    if (deadline_hit)
      return fmt::format("timed out after {} ms",
                         std::chrono::duration_cast<std::chrono::milliseconds>(spec.socket_timeout).count());
    if (!rtsp() && (err == AVERROR_INVALIDDATA || err == AVERROR_EOF))
      return fmt::format("not a media file ({})", av_error(err));
    return av_error(err);
  }

  void open() {
    if (format) fail("already open");
    arm_deadline(spec.socket_timeout);
    AVFormatContext* ctx = avformat_alloc_context();
    if (!ctx) fail("out of memory");
    ctx->interrupt_callback = {&Impl::interrupt_cb, this};
    AVDictionary* opts = nullptr;
    if (rtsp()) {
      av_dict_set(&opts, "rtsp_transport", spec.transport == RtspTransport::Tcp ? "tcp" : "udp", 0);
      // µs, FFmpeg >= 5 name. A backstop behind our deadlines (open: socket_timeout, read:
      // read_timeout()), which fire first and say what happened; when FFmpeg's own timeout ends a
      // read, its parsers first hand out a stale frame, which would read as a sign of life.
      const auto backstop = std::chrono::duration_cast<std::chrono::microseconds>(read_timeout() + spec.socket_timeout);
      av_dict_set_int(&opts, "timeout", backstop.count(), 0);
      av_dict_set(&opts, "allowed_media_types", "video", 0);               // no audio SETUP
    }
    int err = avformat_open_input(&ctx, spec.uri.c_str(), nullptr, &opts);   // frees ctx on failure
    av_dict_free(&opts);
    if (err < 0) fail(open_reason(err));
    format.reset(ctx);
    // Interrupted probing may still "succeed"; an RTSP/TCP read cut short leaves the session out of
    // step (the rest of a packet reads as a reply), so it is over either way.
    if ((err = avformat_find_stream_info(ctx, nullptr)) < 0 || interrupt_cb(this)) fail(open_reason(err));
    stream_index = av_find_best_stream(ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream_index < 0) fail("no video stream");
    const AVStream* st = ctx->streams[stream_index];
    time_base = av_q2d(st->time_base);
    fps = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? av_q2d(st->avg_frame_rate) : 0;
    open_decoder(*st);   // after fps: hybrid decode counts the stream by its rate
    deadline_ns = 0;
  }

  //! The one place a decoder is chosen and opened: NVDEC when it is wanted and opens for the
  //! stream, else software (`auto`, reported to on_fallback) or an error (`nvdec`).
  void open_decoder(const AVStream& st) {
    track_sequences = false;
    bool nvdec = opts.decoder == DecoderKind::Nvdec || (opts.decoder == DecoderKind::Auto && opts.cuda_device >= 0);
    if (opts.balancer) {   // hybrid decode: `auto` takes NVDEC or the cores, whichever has room
      const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(st.codecpar->format));
      const DecodeDemand demand =
          decode_demand(st.codecpar->width, st.codecpar->height, fps, rtsp() || spec.realtime,
                        opts.balancer->codec_cost(avcodec_get_name(st.codecpar->codec_id),
                                                  desc ? desc->comp[0].depth : 8));
      lease = {};   // a reopen chooses again
      lease = nvdec && opts.decoder == DecoderKind::Auto
                  ? opts.balancer->assign(opts.cuda_device, demand)
                  : opts.balancer->hold(nvdec ? DecoderKind::Nvdec : DecoderKind::Cpu, opts.cuda_device, demand);
      nvdec = lease.decoder() == DecoderKind::Nvdec;
    }
    if (nvdec) {
      const std::string why = open_nvdec(st);
      if (why.empty()) return;
      if (!give_up_nvdec(why)) fail(fmt::format("decoder nvdec: {}", why));
    }
    const AVCodec* dec = avcodec_find_decoder(st.codecpar->codec_id);
    if (!dec) fail(fmt::format("no decoder for codec '{}'", avcodec_get_name(st.codecpar->codec_id)));
    new_context(*dec, st);
    codec->thread_count = software_threads();
    // Frame threads hold frames back (one per thread); live sources prefer slice threads.
    if (rtsp()) codec->thread_type = FF_THREAD_SLICE;
    if (const int err = avcodec_open2(codec.get(), dec, nullptr); err < 0)
      fail(fmt::format("cannot open the {} decoder ({})", dec->name, av_error(err)));
  }

  //! Threads of a software decoder opening now: the caller's share of the cores; for an unpaced
  //! file that hybrid decode gave the cores, an equal share among the unpaced streams there.
  int software_threads() const {
    if (opts.threads_at_open) return opts.threads_at_open();
    if (opts.balancer && lease.decoder() == DecoderKind::Cpu && !rtsp() && !spec.realtime)
      return shared_decoder_threads(opts.balancer->cpu().unpaced);
    return opts.threads;
  }

  //! A context for `dec` with the stream's parameters and this source's callbacks, in `codec`.
  void new_context(const AVCodec& dec, const AVStream& st) {
    codec.reset(avcodec_alloc_context3(&dec));
    if (!codec) fail("out of memory");
    if (const int err = avcodec_parameters_to_context(codec.get(), st.codecpar); err < 0)
      fail(fmt::format("decoder parameters: {}", av_error(err)));
    codec->pkt_timebase = st.time_base;
    codec->opaque = this;
    codec->get_format = &Impl::get_format;   // counts set-ups; picks CUDA when NVDEC decodes
    if (opts.pool) codec->get_buffer2 = &Impl::get_buffer;
  }

  //! Opens FFmpeg's NVDEC decoder for the stream (<codec>_cuvid) on the GPU's shared CUDA context:
  //! NVIDIA's parser keeps the reference frames in as few decode surfaces as the stream needs
  //! (nvdec_surfaces), and each output frame is copied, on the legacy default stream, into a frame of
  //! a pool that grows with the frames the pipeline holds; read() returns it once the copy is done
  //! (`copies`). (FFmpeg 5.1's NVDEC hwaccel instead hands out its surfaces, each held frame
  //! keeping a decode and an output surface: twice the memory and at most NVDEC's 32 surfaces in
  //! all.) Returns why it cannot be used, empty on success.
  std::string open_nvdec(const AVStream& st) {
    if (opts.cuda_device < 0) return "this pipeline runs on the cpu";
    nvdec_wanted = true;
    in_use = DecoderKind::Nvdec;
    const std::string name = fmt::format("{}_cuvid", avcodec_get_name(st.codecpar->codec_id));
    const AVCodec* dec = avcodec_find_decoder_by_name(name.c_str());
    if (!dec) return fmt::format("this FFmpeg has no NVDEC decoder for {} ({})", avcodec_get_name(st.codecpar->codec_id), name);
    try {
      new_context(*dec, st);
      codec->hw_device_ctx = cuda_decode_device(opts.cuda_device);
      if (!copies) copies = std::make_unique<LegacyStreamFence>(opts.cuda_device);   // one per source: reopens keep it
    } catch (const MediaError& e) {
      codec.reset();
      return e.what();
    }
    codec->thread_count = 1;
    codec->flags |= AV_CODEC_FLAG_LOW_DELAY;   // frames out as soon as they may be shown: no display delay
    surfaces = nvdec_surfaces(*st.codecpar, sequence);
    if (surfaces > 0) av_opt_set_int(codec->priv_data, "surfaces", surfaces, 0);
    if (const int err = avcodec_open2(codec.get(), dec, nullptr); err < 0) {
      codec.reset();
      surfaces = 0;
      return fmt::format("cannot open the {} decoder ({})", name, av_error(err));
    }
    const std::span<const uint8_t> ed = extradata(*st.codecpar);
    track_sequences = sps_codec(*st.codecpar) && (ed.empty() || ed[0] != 1);   // avcC / hvcC: length-prefixed packets
    // The surfaces came from the extradata's SPS (an RTSP camera's SDP): a first in-band SPS that
    // differs from it is a new sequence too, so a decoder sized by a stale SDP is opened again.
    if (track_sequences && sequence.empty()) {
      const std::span<const uint8_t> sps = find_sps(*sps_codec(*st.codecpar), ed);
      sequence.assign(sps.begin(), sps.end());
    }
    return {};
  }

  //! NVDEC cannot be used for this stream: true when decoding goes on in software (auto; reported
  //! to on_fallback once, when NVDEC had been tried), false when it must stop (nvdec).
  bool give_up_nvdec(const std::string& why) {
    const bool tried = nvdec_wanted.exchange(false);
    in_use = DecoderKind::Cpu;
    lease.move_to_cpu();
    if (opts.decoder == DecoderKind::Nvdec) return false;
    if (tried && opts.on_fallback) opts.on_fallback(why);
    return true;
  }

  //! Records why reading must stop, from a context that cannot throw; the first reason wins.
  void set_fatal(std::string why) noexcept {
    std::lock_guard lock(fatal_mu);
    if (fatal.empty()) fatal = std::move(why);
  }

  void throw_if_fatal() {
    std::lock_guard lock(fatal_mu);
    if (!fatal.empty()) fail(fatal);
  }

  static AVPixelFormat get_format(AVCodecContext* c, const AVPixelFormat* formats) {
    return static_cast<Impl*>(c->opaque)->choose_format(*c, formats);
  }

  //! CUDA frames when NVDEC decodes into a layout the ops read; else the software format (for
  //! NVDEC, a layout the ops do not read: it copies its frames into host memory, and the source
  //! reports NVDEC given up). Counts the decoder's set-ups: calls for a new size or format
  //! (NVDEC's decoder asks once as it opens and again for each sequence it sets up), and gives
  //! each NVDEC set-up a frames pool of its own: FFmpeg's cuvid decoder sizes its output frames by
  //! the first sequence and rejects a larger one in that pool (a mid-stream resolution change).
  AVPixelFormat choose_format(AVCodecContext& c, const AVPixelFormat* formats) noexcept {
    const auto shape = std::make_tuple(c.coded_width, c.coded_height, c.width, c.height, c.sw_pix_fmt);
    const bool new_shape = shape != last_shape;
    if (new_shape) {
      last_shape = shape;
      format_choices.fetch_add(1, std::memory_order_relaxed);
    }
    bool cuda = false;
    AVPixelFormat software = AV_PIX_FMT_NONE;
    for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f) {
      const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(*f);
      if (*f == AV_PIX_FMT_CUDA) {
        cuda = true;
      } else if (software == AV_PIX_FMT_NONE && d && !(d->flags & AV_PIX_FMT_FLAG_HWACCEL)) {
        software = *f;
      }
    }
    if (!nvdec_wanted) return software;
    if (cuda && nvdec_format(c.sw_pix_fmt)) {
      if (!new_shape) return AV_PIX_FMT_CUDA;
      if (AVBufferRef* pool = av_hwframe_ctx_alloc(c.hw_device_ctx)) {   // the decoder sets it up
        av_buffer_unref(&c.hw_frames_ctx);
        c.hw_frames_ctx = pool;
        return AV_PIX_FMT_CUDA;
      }
      set_fatal("decoder nvdec: out of memory for a frames pool");
      return AV_PIX_FMT_NONE;
    }
    const char* profile = avcodec_profile_name(c.codec_id, c.profile);
    const char* sw = av_get_pix_fmt_name(c.sw_pix_fmt);
    std::string why;
    try {
      why = fmt::format("NVDEC output for {} {}, {} is not a format the ops read", avcodec_get_name(c.codec_id),
                        profile ? profile : "profile ?", sw ? sw : "?");
      if (give_up_nvdec(why)) return software;
    } catch (const std::exception& e) {
      why = e.what();
    }
    set_fatal(fmt::format("decoder nvdec: {}", why));
    return AV_PIX_FMT_NONE;
  }

  FramePool::Wait pool_wait() const { return {spec.stall_timeout, &interrupted}; }

  std::string pool_exhausted() const {
    return fmt::format("frame pool exhausted: all {} slots still in use after {} ms (decoder references, queued "
                       "and in-flight frames); raise pool_frames",
                       opts.pool->capacity(), spec.stall_timeout.count());
  }

  //! get_buffer2: pool slots (see FramePool::get_buffer2). Exceptions stop here, before FFmpeg.
  static int get_buffer(AVCodecContext* c, AVFrame* f, int flags) {
    auto* self = static_cast<Impl*>(c->opaque);
    try {
      FramePool::Status status{};
      const int err = self->opts.pool->get_buffer2(c, f, flags, self->pool_wait(), status);
      if (status == FramePool::Status::TimedOut) self->set_fatal(self->pool_exhausted());
      return err;
    } catch (const std::exception& e) {
      self->set_fatal(fmt::format("frame pool: {}", e.what()));
      return AVERROR(ENOMEM);
    }
  }

  //! ffplay's rule: formats with discontinuous timestamps (MPEG-TS/PS) restart at byte 0, where a
  //! timestamp seek lands on a later GOP; so do formats that cannot seek by time (raw H.264).
  int seek_to_start() {
    const AVInputFormat* f = format->iformat;
    const bool by_bytes = (f->flags & AVFMT_TS_DISCONT) && std::strcmp(f->name, "ogg") != 0;
    int err = AVERROR(ENOSYS);
    if (!by_bytes) {
      const AVStream* st = format->streams[stream_index];
      err = av_seek_frame(format.get(), stream_index, st->start_time != AV_NOPTS_VALUE ? st->start_time : 0,
                          AVSEEK_FLAG_BACKWARD);
    }
    if (err < 0 && !(f->flags & AVFMT_NO_BYTE_SEEK)) err = av_seek_frame(format.get(), stream_index, 0, AVSEEK_FLAG_BYTE);
    return err;
  }

  //! A whole pass that yields no frame, this many times in a row beyond the frames the decoder
  //! holds back (frame_delay()), ends a looped source.
  static constexpr int kMaxEmptyPasses = 3;

  //! Frames a decoder takes in before the first comes out: one per frame thread, plus reordering.
  //! A looped file shorter than that (a one-frame "camera") yields its first frame a few passes in.
  int frame_delay() const {
    const int threads = codec->active_thread_type & FF_THREAD_FRAME ? std::max(codec->thread_count, 1) : 1;
    return threads + std::max(codec->has_b_frames, 0);
  }

  //! At the end of a looped file's input: back to its start, and the decoder goes on as if the
  //! clip were concatenated to itself. It is neither drained nor flushed: a flush makes FFmpeg's
  //! H.264 decoder set itself up again on the next slice, and with NVDEC that re-creates the
  //! hardware decoder and frees its surfaces (a device-wide synchronisation) on every loop. The
  //! frames the decoder still holds come out before the new pass's first (which starts with a
  //! keyframe); frame_pts() finds that first frame by its timestamp. False: not looped.
  bool rewind_for_loop() {
    if (interrupted || rtsp() || !spec.loop) return false;
    if (++passes_without_frame > kMaxEmptyPasses + frame_delay())
      fail("loop: no frame could be decoded in a whole pass");
    const int err = seek_to_start();
    if (err < 0) fail(fmt::format("cannot seek back to the start to loop ({})", av_error(err)));
    ++pending_passes;
    return true;
  }

  //! Receives decoded frames into `frame` until one is there (true) or the stream ends (false).
  bool decode_next() {
    for (;;) {
      int err = avcodec_receive_frame(codec.get(), frame.get());
      if (err == 0) return true;
      if (err == AVERROR_EOF && next_sequence) {   // drained for a new sequence
        start_next_sequence();
        continue;
      }
      if (err == AVERROR_EOF) {   // drained: the input ended and is not looped
        if (!interrupted && rtsp()) fail("stream ended by the server");
        return false;
      }
      if (err != AVERROR(EAGAIN)) {   // a frame the decoder rejected: count, go on
        if (interrupted) return false;
        throw_if_fatal();
        errors.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (input_eof) fail("decoder wants input after the end of the stream");
      err = av_read_frame(format.get(), packet.get());
      if (err >= 0 && interrupt_cb(this)) {   // interrupted, or our deadline passed: the packet is
        av_packet_unref(packet.get());        // the parsers' flush of a frame from before the stall
        err = AVERROR_EXIT;
      }
      if (err == AVERROR_EOF || (err < 0 && !rtsp() && format->pb && avio_feof(format->pb))) {
        if (rewind_for_loop()) continue;
        input_eof = true;
        avcodec_send_packet(codec.get(), nullptr);   // drain
        continue;
      }
      if (err < 0) {
        if (interrupted) return false;
        if (deadline_hit) fail(fmt::format("no frame for {} ms (stalled)", read_timeout().count()));
        fail(fmt::format("read failed ({})", av_error(err)));
      }
      if (packet->stream_index == stream_index && starts_new_sequence(*packet)) {
        next_sequence.reset(av_packet_clone(packet.get()));
        av_packet_unref(packet.get());
        if (!next_sequence) fail("out of memory");
        avcodec_send_packet(codec.get(), nullptr);   // drain: its frames come out, then EOF
        continue;
      }
      err = packet->stream_index == stream_index ? avcodec_send_packet(codec.get(), packet.get()) : 0;
      av_packet_unref(packet.get());
      if (err < 0 && err != AVERROR(EAGAIN)) {
        if (interrupted) return false;
        throw_if_fatal();
        errors.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }

  //! Whether `pkt` (of the video stream) is a keyframe whose SPS differs from the current one
  //! (track_sequences): the extradata's, else the first SPS seen, which becomes the current one.
  bool starts_new_sequence(const AVPacket& pkt) {
    if (!track_sequences || !(pkt.flags & AV_PKT_FLAG_KEY)) return false;
    const std::span<const uint8_t> sps =
        find_sps(*sps_codec(*format->streams[stream_index]->codecpar), {pkt.data, size_t(pkt.size)});
    if (sps.empty()) return false;
    const bool known = !sequence.empty();
    if (known && std::ranges::equal(sps, sequence)) return false;
    sequence.assign(sps.begin(), sps.end());
    return known;
  }

  //! After the drain for a new sequence: a new NVDEC decoder (surfaces from the new SPS), started
  //! by the keyframe that brought it.
  void start_next_sequence() {
    const AvPacketPtr key = std::move(next_sequence);
    codec.reset();
    open_decoder(*format->streams[stream_index]);
    if (const int err = avcodec_send_packet(codec.get(), key.get()); err < 0 && err != AVERROR(EAGAIN))
      errors.fetch_add(1, std::memory_order_relaxed);
  }

  //! Stream time of the received frame in seconds, continuous across loops.
  double frame_pts() {
    const int64_t ts = frame->best_effort_timestamp;
    const double step = last_step > 0 ? last_step : (fps > 0 ? 1 / fps : 0);
    const double raw = ts != AV_NOPTS_VALUE ? ts * time_base : (std::isnan(last_pts) ? 0 : last_pts + step);
    if (std::isnan(pass_first_pts)) {
      pass_first_pts = raw;
    } else if (pending_passes > 0 && raw <= last_pts) {   // the first frame after a loop rewind (<=: one-frame files)
      loop_offset += last_pts - pass_first_pts + step;
      pass_first_pts = raw;
      --pending_passes;
    } else if (raw > last_pts) {
      last_step = raw - last_pts;
    }
    last_pts = raw;
    return raw + loop_offset;
  }

  //! Sleeps until the frame at `pts` is due; false if interrupted meanwhile. Time going backwards,
  //! or jumping ahead by more than 2 s and 4 frame intervals (a recording gap in a file), re-anchors:
  //! the frame is due at once instead of after the gap.
  bool pace(double pts) {
    constexpr double kMaxGapS = 2, kMaxGapFrames = 4;
    const auto now = Clock::now();
    const double max_gap = std::max(kMaxGapS, fps > 0 ? kMaxGapFrames / fps : 0);
    const bool jump = paced && (pts < pace_pts || pts - pace_last > max_gap);
    pace_last = pts;
    if (!paced || jump) {
      paced = true;
      pace_wall = now;
      pace_pts = pts;
      return !interrupted;
    }
    const auto due = pace_wall + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(pts - pace_pts));
    std::unique_lock lock(sleep_mu);
    return !sleep_cv.wait_until(lock, due, [&] { return interrupted.load(); });
  }

  //! Wraps the received frame: its own reference when the ops read the format (NVDEC surfaces and
  //! pool slots included), else a conversion (into a pool slot when there is a pool). std::nullopt
  //! when interrupted while waiting for a slot.
  std::optional<DecodedFrame> wrap() {
    const auto pix = static_cast<AVPixelFormat>(frame->format);
    info.width = frame->width;
    info.height = frame->height;
    info.matrix = map_matrix(stored_value(frame->colorspace), frame->height);
    info.range = map_range(stored_value(frame->color_range), pix == AV_PIX_FMT_CUDA ? codec->sw_pix_fmt : pix);
    info.chroma_location = map_chroma_location(stored_value(frame->chroma_location));
    AvFramePtr out(av_frame_alloc());
    if (!out) fail("out of memory");
    DecodedFrame d;
    if (pix == AV_PIX_FMT_CUDA) {
      const auto sw = reinterpret_cast<const AVHWFramesContext*>(frame->hw_frames_ctx->data)->sw_format;
      if (sw != AV_PIX_FMT_NV12 && sw != AV_PIX_FMT_P010LE)
        fail(fmt::format("NVDEC produced {} frames, which the ops do not read", av_get_pix_fmt_name(sw)));
      info.format = sw == AV_PIX_FMT_NV12 ? ops::PixelFormat::Nv12 : ops::PixelFormat::P010;
      d.memory = FrameMemory::Device;
      if (!frame->data[0] || !frame->data[1]) fail("NVDEC returned a frame without surface data");
      copies->wait();   // its copy, queued on the legacy stream: executors read it as finished memory
      av_frame_move_ref(out.get(), frame.get());
    } else if (const auto direct = ops_format(pix)) {
      info.format = *direct;
      if (opts.pool && opts.pool->owns(frame->data[0])) d.memory = opts.pool->memory();
      av_frame_move_ref(out.get(), frame.get());
    } else {
      if (!convert(pix, *out)) return std::nullopt;
      if (opts.pool) d.memory = opts.pool->memory();
      av_frame_unref(frame.get());
    }
    d.info = info;
    d.view.width = info.width;
    d.view.height = info.height;
    d.view.format = info.format;
    for (int i = 0; i < 3; ++i) {
      const bool used = i < ops::plane_count(info.format);
      d.view.data[i] = used ? out->data[i] : nullptr;
      d.view.pitch[i] = used ? out->linesize[i] : 0;
    }
    d.owner = owner_of(std::move(out));
    return d;
  }

  //! False when interrupted while waiting for a pool slot.
  bool convert(AVPixelFormat pix, AVFrame& out) {
    const AVPixelFormat target = conversion_target(pix);
    const int w = frame->width, h = frame->height;
    const auto key = std::make_tuple(int(pix), w, h, info.matrix, info.range);
    if (!sws || key != sws_key) {
      sws.reset(sws_getContext(w, h, pix, w, h, target, SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT,
                               nullptr, nullptr, nullptr));
      if (!sws)
        fail(fmt::format("cannot convert {} frames to {}", av_get_pix_fmt_name(pix), av_get_pix_fmt_name(target)));
      const int* coeffs = sws_getCoefficients(info.matrix == ops::ColorMatrix::Bt709 ? SWS_CS_ITU709 : SWS_CS_ITU601);
      const int src_full = info.range == ops::ColorRange::Full;
      const int dst_full = target == AV_PIX_FMT_RGB24 ? 1 : src_full;
      sws_setColorspaceDetails(sws.get(), coeffs, src_full, coeffs, dst_full, 0, 1 << 16, 1 << 16);
      sws_key = key;
    }
    out.format = target;
    out.width = w;
    out.height = h;
    int err = 0;
    if (opts.pool) {
      FramePool::Status status{};
      err = opts.pool->get_frame_buffer(&out, pool_wait(), status);
      if (status == FramePool::Status::Cancelled) return false;
      if (status == FramePool::Status::TimedOut) fail(pool_exhausted());
    } else {
      err = av_frame_get_buffer(&out, 0);
    }
    if (err < 0) fail(fmt::format("conversion buffer: {}", av_error(err)));
    err = sws_scale(sws.get(), frame->data, frame->linesize, 0, h, out.data, out.linesize);
    if (err < 0) fail(fmt::format("converting {} frame: {}", av_get_pix_fmt_name(pix), av_error(err)));
    info.format = target == AV_PIX_FMT_P010LE ? ops::PixelFormat::P010 : ops::PixelFormat::Rgb24;
    return true;
  }

  std::optional<DecodedFrame> read() {
    if (!codec) fail("read before open");
    if (interrupted) return std::nullopt;
    if (spec.max_frames >= 0 && next_index >= spec.max_frames) return std::nullopt;
    arm_deadline(read_timeout());
    if (!decode_next()) return std::nullopt;
    deadline_ns = 0;
    const double pts = frame_pts();
    passes_without_frame = 0;
    std::optional<DecodedFrame> d = wrap();
    if (!d) return std::nullopt;
    d->index = next_index++;
    d->pts_seconds = pts;
    if (spec.realtime && !pace(pts)) return std::nullopt;
    d->decoded_at = Clock::now();
    return d;
  }
};

VideoSource::VideoSource(SourceSpec spec, std::string pipeline_name, DecodeOptions options)
    : impl_(std::make_unique<Impl>(std::move(spec), pipeline_name, std::move(options))) {}

VideoSource::~VideoSource() = default;

void VideoSource::open() { impl_->open(); }

std::optional<DecodedFrame> VideoSource::read() { return impl_->read(); }

void VideoSource::interrupt() {
  impl_->interrupted = true;
  { std::lock_guard lock(impl_->sleep_mu); }   // a pacing wait sees the flag before it sleeps again
  impl_->sleep_cv.notify_all();
  if (impl_->opts.pool) impl_->opts.pool->wake();
}

DecoderKind VideoSource::decoder() const { return impl_->in_use.load(); }

std::string VideoSource::codec() const {
  if (!impl_->format) throw MediaError("codec() before open()");
  const AVCodecParameters& par = *impl_->format->streams[impl_->stream_index]->codecpar;
  const char* profile = avcodec_profile_name(par.codec_id, par.profile);
  return profile ? fmt::format("{} {}", avcodec_get_name(par.codec_id), profile) : avcodec_get_name(par.codec_id);
}

double VideoSource::frame_rate() const { return impl_->fps; }

FrameInfo VideoSource::frame_info() const { return impl_->info; }

uint64_t VideoSource::decode_errors() const { return impl_->errors.load(std::memory_order_relaxed); }

int VideoSource::decode_surfaces() const { return impl_->in_use == DecoderKind::Nvdec ? impl_->surfaces : 0; }

int VideoSource::decoder_setups() const { return impl_->format_choices.load(std::memory_order_relaxed); }

int VideoSource::decoder_threads() const { return impl_->codec ? impl_->codec->thread_count : 0; }

DecodedFrame to_host(const DecodedFrame& frame) {
  if (frame.memory != FrameMemory::Device) return frame;
  const auto* surface = static_cast<const AVFrame*>(frame.owner.get());
  AvFramePtr host(av_frame_alloc());
  if (!host) throw MediaError("out of memory");
  if (const int err = av_hwframe_transfer_data(host.get(), surface, 0); err < 0)
    throw MediaError(fmt::format("downloading a {} frame from the GPU: {}", describe(frame.info), av_error(err)));
  DecodedFrame out = frame;
  out.memory = FrameMemory::Host;
  for (int i = 0; i < 3; ++i) {
    out.view.data[i] = frame.view.data[i] ? host->data[i] : nullptr;
    out.view.pitch[i] = frame.view.data[i] ? host->linesize[i] : 0;
  }
  out.owner = owner_of(std::move(host));
  return out;
}

int shared_decoder_threads(int decoders) {
  if (decoders <= 1) return 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(cores / decoders, 1, 16);
}

bool decodes_file_in_software(const PipelineSpec& spec, const DeviceSpec& device) {
  return spec.source.kind != SourceKind::Rtsp && (spec.decoder == DecoderKind::Cpu || device.kind != DeviceKind::Cuda);
}

DecodeOptions decode_options(const PipelineSpec& spec, const DeviceSpec& device, int software_decoders,
                             int held_downstream) {
  DecodeOptions decode;
  decode.decoder = spec.decoder;
  decode.cuda_device = device.kind == DeviceKind::Cuda ? device.index : -1;
  const bool frame_threads = spec.source.kind != SourceKind::Rtsp;   // live sources use slice threads
  if (frame_threads) decode.threads = shared_decoder_threads(software_decoders);
  const int slots = spec.pool_frames > 0
                        ? spec.pool_frames
                        : default_pool_frames(spec.queue_depth, decode.threads, frame_threads) + held_downstream;
  decode.pool = FramePool::create(slots, decode.cuda_device);
  return decode;
}

}  // namespace framefuse
