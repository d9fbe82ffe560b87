#pragma once
//! Views of decoded frames as the ops read them. POD: copied by value into kernels and parameter
//! blocks. Pointers are host or device addresses depending on which executor reads them.
#include <cstdint>

#include "pipeline/ops/op_traits.hpp"

namespace framefuse::ops {

//! Pixel layouts the input readers understand.
//!  Nv12:    plane0 Y (u8), plane1 interleaved UV (u8), chroma 2x2 subsampled.
//!  P010:    like NV12 with u16 samples, value in the high 10 bits (NVDEC 10-bit output).
//!  Yuv420p: planes Y, U, V (u8), chroma 2x2 subsampled (software decode; also YUVJ420P).
//!  Rgb24 / Bgr24: one packed plane, 3 bytes per pixel.
//!  Yuv420p10: like Yuv420p with u16 samples, value in the low 10 bits (software 10-bit decode).
//!  Yuv422p: planes Y, U, V (u8), chroma subsampled 2x horizontally only (software decode of MJPEG
//!           cameras, YUVJ422P, and of 4:2:2 H.264/HEVC).
enum class PixelFormat : uint8_t { Nv12, P010, Yuv420p, Rgb24, Bgr24, Yuv420p10, Yuv422p };
//! PixelFormat's values are 0 .. kPixelFormats - 1 (Yuv422p the last).
inline constexpr int kPixelFormats = static_cast<int>(PixelFormat::Yuv422p) + 1;

enum class ColorMatrix : uint8_t { Bt601, Bt709 };
enum class ColorRange : uint8_t { Limited, Full };
//! How subsampled chroma (4:2:0, 4:2:2) is brought to luma resolution.
//!  Nearest: each chroma sample covers its 2x2 luma block (2x1 in 4:2:2; what OpenCV's cvtColor does).
//!  Linear:  bilinear between chroma samples, placed per ChromaLocation.
enum class ChromaUpsample : uint8_t { Nearest, Linear };
//! Where 4:2:0 chroma samples sit relative to luma (FFmpeg AVChromaLocation subset; 4:2:2 chroma
//! is on every luma row, and only the horizontal part applies).
//!  Left:   co-sited with even luma columns, vertically between rows (MPEG-2/H.264 default).
//!  Center: between the 2x2 luma block (JPEG/MPEG-1).
//!  TopLeft: co-sited with the top-left luma sample.
enum class ChromaLocation : uint8_t { Left, Center, TopLeft };

//! One frame in memory. pitch in bytes; unused planes are null.
struct ImageView {
  const uint8_t* data[3];
  int32_t pitch[3];
  int32_t width;
  int32_t height;
  PixelFormat format;
};

//! The u16 sample x of row y of plane `plane` (P010, Yuv420p10; x counts samples, not bytes).
FF_HD uint16_t sample16(const ImageView& img, int plane, int x, int y) {
  return reinterpret_cast<const uint16_t*>(img.data[plane] + static_cast<int64_t>(y) * img.pitch[plane])[x];
}

//! Bytes per row and rows of plane `i` of a w x h frame (subsampled chroma rounds up).
struct PlaneShape {
  int32_t row_bytes, rows;
};

//! Bytes per sample: 2 for the 10-bit formats (u16 samples), 1 otherwise.
constexpr int sample_bytes(PixelFormat f) { return f == PixelFormat::P010 || f == PixelFormat::Yuv420p10 ? 2 : 1; }

//! log2 of the vertical chroma subsampling: 0 for 4:2:2 (a chroma row per luma row), 1 for 4:2:0.
constexpr int chroma_shift_y(PixelFormat f) { return f == PixelFormat::Yuv422p ? 0 : 1; }

constexpr int plane_count(PixelFormat f) {
  if (f == PixelFormat::Yuv420p || f == PixelFormat::Yuv420p10 || f == PixelFormat::Yuv422p) return 3;
  return f == PixelFormat::Rgb24 || f == PixelFormat::Bgr24 ? 1 : 2;
}

constexpr PlaneShape plane_shape(PixelFormat f, int32_t w, int32_t h, int i) {
  const int32_t cw = (w + 1) / 2, ch = (h + 1) / 2;
  switch (f) {
    case PixelFormat::Nv12: return i == 0 ? PlaneShape{w, h} : PlaneShape{2 * cw, ch};
    case PixelFormat::P010: return i == 0 ? PlaneShape{2 * w, h} : PlaneShape{4 * cw, ch};
    case PixelFormat::Yuv420p: return i == 0 ? PlaneShape{w, h} : PlaneShape{cw, ch};
    case PixelFormat::Yuv420p10: return i == 0 ? PlaneShape{2 * w, h} : PlaneShape{2 * cw, ch};
    case PixelFormat::Yuv422p: return i == 0 ? PlaneShape{w, h} : PlaneShape{cw, h};
    case PixelFormat::Rgb24:
    case PixelFormat::Bgr24: break;
  }
  return {3 * w, h};
}

}  // namespace framefuse::ops
