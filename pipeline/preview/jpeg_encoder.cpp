#include "pipeline/preview/jpeg_encoder.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <spdlog/fmt/fmt.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libswscale/swscale.h>
}

#include "pipeline/decode/av_util.hpp"
#include "pipeline/decode/video_source.hpp"
#include "pipeline/error.hpp"
#include "pipeline/exec/executor.hpp"

namespace framefuse {
namespace {


void check(int err, const char* what) {
  if (err < 0) throw MediaError(fmt::format("jpeg encoder: {} failed: {}", what, av_error(err)));
}

//! `frame` through the fused chain of `spec` (its geometry and channels) on one CPU thread, with
//! u8 HWC storage and identity normalization; gray outputs are spread over the three channels.
RgbImage pixels_of(const DecodedFrame& frame, OutputSpec spec, const ColorSpec& color) {
  spec.scale = 1.f;
  spec.mean = {0.f, 0.f, 0.f};
  spec.std = {1.f, 1.f, 1.f};
  spec.layout = ops::Layout::Hwc;
  spec.dtype = ops::DType::U8;
  const OutputPlan plan = make_output_plan(spec, frame.info, fmt::format("preview of output '{}'", spec.name));

  const auto exec = make_cpu_executor(1);   // one thread: previews are small and run off the frame path
  exec->setup(frame.info, make_color_params(color, frame.info), std::span(&plan, 1), 1);
  RgbImage img{plan.width(), plan.height(), std::vector<uint8_t>(size_t(3) * plan.width() * plan.height())};
  std::vector<uint8_t> gray(spec.channels == ChannelOrder::Gray ? plan.bytes_per_frame : 0);
  std::byte* out = reinterpret_cast<std::byte*>(gray.empty() ? img.pixels.data() : gray.data());
  const DecodedFrame host = to_host(frame);   // NVDEC frames are downloaded first
  exec->process(std::span(&host.view, 1), std::span(&out, 1));
  for (size_t i = 0; i < gray.size(); ++i) std::fill_n(img.pixels.begin() + 3 * i, 3, gray[i]);
  return img;
}

}  // namespace

RgbImage preview_rgb(const DecodedFrame& frame, int32_t max_width) {
  if (max_width < 1) throw std::invalid_argument(fmt::format("preview width must be >= 1, got {}", max_width));
  const FrameInfo& info = frame.info;
  OutputSpec spec;
  spec.name = "preview";
  if (info.width > max_width) {
    spec.resize.width = max_width;
    spec.resize.height = std::max<int32_t>(1, static_cast<int32_t>(std::lround(double(info.height) * max_width / info.width)));
  }
  spec.interp = ops::Interp::Area;
  spec.channels = ChannelOrder::Rgb;
  return pixels_of(frame, spec, ColorSpec{});
}

RgbImage output_preview_rgb(const DecodedFrame& frame, const OutputSpec& output, const ColorSpec& color) {
  OutputSpec spec = output;   // same geometry and channels; only the value mapping is undone
  if (spec.channels == ChannelOrder::Bgr) spec.channels = ChannelOrder::Rgb;
  return pixels_of(frame, spec, color);
}

void draw_rect(RgbImage& image, int32_t frame_w, int32_t frame_h, int32_t x, int32_t y, int32_t w, int32_t h,
               std::array<uint8_t, 3> colour, int32_t thickness) {
  if (frame_w < 1 || frame_h < 1 || w < 1 || h < 1 || thickness < 1) return;
  const double sx = double(image.width) / frame_w, sy = double(image.height) / frame_h;
  const auto x0 = int32_t(std::floor(x * sx)), y0 = int32_t(std::floor(y * sy));
  const int32_t x1 = std::max(x0 + 1, int32_t(std::ceil((x + w) * sx))), y1 = std::max(y0 + 1, int32_t(std::ceil((y + h) * sy)));
  const auto fill = [&](int32_t ax, int32_t ay, int32_t bx, int32_t by) {   // [ax, bx) x [ay, by), clipped
    for (int32_t py = std::max(ay, 0); py < std::min(by, image.height); ++py)
      for (int32_t px = std::max(ax, 0); px < std::min(bx, image.width); ++px)
        std::copy(colour.begin(), colour.end(), image.pixels.begin() + (size_t(py) * image.width + px) * 3);
  };
  fill(x0, y0, x1, y0 + thickness);   // top
  fill(x0, y1 - thickness, x1, y1);   // bottom
  fill(x0, y0, x0 + thickness, y1);   // left
  fill(x1 - thickness, y0, x1, y1);   // right
}

bool jpeg_encoder_available() { return avcodec_find_encoder(AV_CODEC_ID_MJPEG) != nullptr; }

std::vector<uint8_t> encode_jpeg(const RgbImage& image, int qscale) {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG);
  if (!codec) throw EncoderUnavailable("JPEG previews need FFmpeg's mjpeg encoder, which this libavcodec lacks");
  if (image.width < 1 || image.height < 1 || image.pixels.size() != size_t(3) * image.width * image.height)
    throw std::invalid_argument(fmt::format("jpeg encoder: {}x{} RGB image with {} bytes", image.width, image.height,
                                            image.pixels.size()));

  AvCodecPtr ctx(avcodec_alloc_context3(codec));
  if (!ctx) throw std::bad_alloc();
  ctx->width = image.width;
  ctx->height = image.height;
  // yuv420p + JPEG range is yuvj420p without the deprecated pixel format (swscale warns on yuvj*).
  ctx->pix_fmt = AV_PIX_FMT_YUV420P;
  ctx->color_range = AVCOL_RANGE_JPEG;
  ctx->time_base = {1, 25};
  ctx->flags |= AV_CODEC_FLAG_QSCALE;
  ctx->global_quality = FF_QP2LAMBDA * qscale;
  check(avcodec_open2(ctx.get(), codec, nullptr), "opening mjpeg");

  AvFramePtr yuv(av_frame_alloc());
  AvPacketPtr pkt(av_packet_alloc());
  if (!yuv || !pkt) throw std::bad_alloc();
  // swscale leaves the last chroma column of an odd-width rgb24 -> yuv420p conversion unset, so
  // odd widths are converted from a copy whose extra column repeats the last one; the encoder
  // then takes the frame at its true width (the chroma plane is the same size either way).
  const int conv_w = image.width + (image.width & 1);
  std::vector<uint8_t> padded;
  const uint8_t* rgb = image.pixels.data();
  if (conv_w != image.width) {
    const size_t row = size_t(3) * image.width;
    padded.resize(size_t(3) * conv_w * image.height);
    for (int y = 0; y < image.height; ++y) {
      uint8_t* dst = padded.data() + size_t(y) * 3 * conv_w;
      std::copy_n(rgb + y * row, row, dst);
      std::copy_n(dst + row - 3, 3, dst + row);
    }
    rgb = padded.data();
  }
  yuv->format = ctx->pix_fmt;
  yuv->width = conv_w;
  yuv->height = image.height;
  yuv->color_range = AVCOL_RANGE_JPEG;
  yuv->quality = ctx->global_quality;
  yuv->pts = 0;
  check(av_frame_get_buffer(yuv.get(), 0), "allocating the frame");

  SwsPtr sws(sws_getContext(conv_w, image.height, AV_PIX_FMT_RGB24, conv_w, image.height,
                                                          AV_PIX_FMT_YUV420P, SWS_BILINEAR | SWS_ACCURATE_RND,
                                                          nullptr, nullptr, nullptr));
  if (!sws) throw MediaError("jpeg encoder: swscale cannot convert rgb24 to yuv420p");
  const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
  check(sws_setColorspaceDetails(sws.get(), bt601, /*srcRange=*/1, bt601, /*dstRange=*/1, 0, 1 << 16, 1 << 16),
        "setting full-range BT.601");
  const uint8_t* src[1] = {rgb};
  const int src_stride[1] = {3 * conv_w};
  sws_scale(sws.get(), src, src_stride, 0, image.height, yuv->data, yuv->linesize);
  yuv->width = image.width;

  check(avcodec_send_frame(ctx.get(), yuv.get()), "sending the frame");
  check(avcodec_send_frame(ctx.get(), nullptr), "flushing");
  check(avcodec_receive_packet(ctx.get(), pkt.get()), "receiving the packet");
  return {pkt->data, pkt->data + pkt->size};
}

}  // namespace framefuse
