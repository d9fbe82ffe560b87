#pragma once
//! Still previews of decoded frames. The frame is turned into RGB by the fused chain every pipeline
//! runs (CPU executor: same colour conversion, same resize), then encoded as a baseline JPEG by
//! libavcodec's mjpeg encoder. Stateless: every call sets up and frees its own contexts.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "pipeline/decode/decoded_frame.hpp"

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

//! Whether encode_jpeg can work with the libavcodec this process runs against.
bool jpeg_encoder_available();

//! Baseline JFIF JPEG: 4:2:0, full-range BT.601 (yuvj420p). `qscale` 2 (best) .. 31 (smallest).
//! Throws EncoderUnavailable without an mjpeg encoder, MediaError when encoding fails.
std::vector<uint8_t> encode_jpeg(const RgbImage& image, int qscale = 5);

}  // namespace framefuse
