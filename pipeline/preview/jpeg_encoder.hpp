#pragma once
//! Still previews of decoded frames. The frame is turned into RGB by the fused chain every pipeline
//! runs (CPU executor: same colour conversion, same resize), then encoded as a baseline JPEG by
//! libavcodec's mjpeg encoder. Stateless: every call sets up and frees its own contexts.
#include <array>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pipeline/decode/decoded_frame.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

//! This libavcodec has no mjpeg encoder (minimal FFmpeg builds): previews are unavailable.
struct EncoderUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

//! Packed RGB24: rows of exactly 3 * width bytes, top row first.
struct RgbImage {
  int32_t width = 0, height = 0;
  std::vector<uint8_t> pixels;
};

//! `frame` as RGB, area-scaled to `max_width` pixels wide (aspect kept) when it is wider; colour
//! from the frame's own metadata. Throws std::invalid_argument when max_width < 1.
RgbImage preview_rgb(const DecodedFrame& frame, int32_t max_width);

//! What `output` sees of `frame`, de-normalized back to pixels: the output's own crop, resize,
//! aspect window and padding (so the image has the tensor's width and height), colour per `color`,
//! stored as RGB u8 with scale 1, mean 0, std 1; a gray output shows its gray in all three
//! channels. Throws ConfigError when the output cannot be planned for this frame.
RgbImage output_preview_rgb(const DecodedFrame& frame, const OutputSpec& output, const ColorSpec& color);

//! Outlines a rectangle given in pixels of a `frame_w` x `frame_h` frame, scaled onto `image`
//! (which shows that whole frame), with lines `thickness` image pixels wide inside the rectangle,
//! clipped to the image.
void draw_rect(RgbImage& image, int32_t frame_w, int32_t frame_h, int32_t x, int32_t y, int32_t w, int32_t h,
               std::array<uint8_t, 3> colour, int32_t thickness = 2);

//! Whether encode_jpeg can work with the libavcodec this process runs against.
bool jpeg_encoder_available();

//! Baseline JFIF JPEG: 4:2:0, full-range BT.601 (yuvj420p). `qscale` 2 (best) .. 31 (smallest).
//! Throws EncoderUnavailable without an mjpeg encoder, MediaError when encoding fails.
std::vector<uint8_t> encode_jpeg(const RgbImage& image, int qscale = 5);

}  // namespace framefuse
