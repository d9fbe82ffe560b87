#pragma once
//! Last ops of a chain: normalize, channel order, layout and dtype of the output tensor.
#include "pipeline/ops/op_traits.hpp"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace framefuse::ops {

enum class Layout : uint8_t { Chw, Hwc };
enum class DType : uint8_t { F32, F16, U8 };

FF_HD int dtype_size(DType t) { return t == DType::F32 ? 4 : (t == DType::F16 ? 2 : 1); }

//! numpy's name of the dtype ("float32", "float16", "uint8"), as sinks describe their tensors.
constexpr const char* dtype_name(DType t) {
  return t == DType::F32 ? "float32" : (t == DType::F16 ? "float16" : "uint8");
}

//! Round to nearest, ties to even (cvRound / saturate_cast semantics).
FF_HD int round_even(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int>(__builtin_rintf(v));
#endif
}

//! Clamps in float first: converting an out-of-int-range float (or NaN) to int is undefined on the
//! host, so large values, infinities and NaN (-> 0) must never reach the conversion. On the host,
//! adding and removing 2^23 rounds 0..255 to an integer, ties to even, exactly as rintf does, with
//! no library call, so loops of stores vectorise (not under -ffast-math, which would fold it).
FF_HD uint8_t saturate_u8(float v) {
  const float c = v > 0.f ? (v < 255.f ? v : 255.f) : 0.f;
#if defined(__CUDA_ARCH__) || defined(__FAST_MATH__)
  return static_cast<uint8_t>(round_even(c));
#else
  return static_cast<uint8_t>(static_cast<int>((c + 0x1p23f) - 0x1p23f));
#endif
}

//! IEEE binary16 bits of v, round-to-nearest-even; identical on host and device. The host path is
//! branch-free (selects only), so loops of it vectorise: normal halves round by integer adds on the
//! rebased bits; subnormal halves come from one float add of 0.5, whose own rounding (to nearest,
//! ties to even) leaves the half's mantissa in the low bits.
FF_HD uint16_t to_half_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(v));
#else
  const uint32_t bits = __builtin_bit_cast(uint32_t, v);
  const int32_t x = static_cast<int32_t>(bits & 0x7fffffffu);   // |v|, compared as signed: SSE2 has that
  const int32_t normal = (x - 0x37fff001 + ((x >> 13) & 1)) >> 13;   // rebias 127 -> 15, + 0xfff + odd
  const int32_t subnormal = __builtin_bit_cast(int32_t, __builtin_bit_cast(float, x) + 0.5f) - 0x3f000000;
  int32_t h = x < 0x38800000 ? subnormal : normal;   // below 2^-14: a subnormal half (or zero)
  h = x >= 0x47800000 ? (x > 0x7f800000 ? 0x7e00 : 0x7c00) : h;   // >= 2^16 (or inf): inf; NaN: quiet NaN
  return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | static_cast<uint32_t>(h));
#endif
}

//! (v * scale - mean) / std per channel, folded into v * mul + add; gray uses channel 0.
struct Normalize {
  struct Params {
    float mul[3];
    float add[3];
  };
  FF_HD static float apply(float v, int c, const Params& p) { return v * p.mul[c] + p.add[c]; }
};

//! Stores channel c of pixel (x, y) into a tensor of `channels` x h x w (CHW) or h x w x channels.
struct Store {
  struct Params {
    void* data;          //!< first element of this frame's tensor
    int32_t width, height, channels;
    Layout layout;
    DType dtype;
  };
  FF_HD static void apply(const Params& p, int x, int y, int c, float v) {
    const int64_t i = p.layout == Layout::Chw
                          ? (int64_t(c) * p.height + y) * p.width + x
                          : (int64_t(y) * p.width + x) * p.channels + c;
    switch (p.dtype) {
      case DType::F32: static_cast<float*>(p.data)[i] = v; break;
      case DType::F16: static_cast<uint16_t*>(p.data)[i] = to_half_bits(v); break;
      case DType::U8: static_cast<uint8_t*>(p.data)[i] = saturate_u8(v); break;
    }
  }
};

}  // namespace framefuse::ops
