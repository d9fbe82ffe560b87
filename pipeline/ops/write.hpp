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

//! Round to nearest, ties to even (cvRound / saturate_cast semantics).
FF_HD int round_even(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int>(__builtin_rintf(v));
#endif
}

//! Clamps in float first: converting an out-of-int-range float (or NaN) to int is undefined on the
//! host, so large values, infinities and NaN (-> 0) must never reach the conversion.
FF_HD uint8_t saturate_u8(float v) {
  return static_cast<uint8_t>(round_even(v > 0.f ? (v < 255.f ? v : 255.f) : 0.f));
}

//! IEEE binary16 bits of v, round-to-nearest-even; identical on host and device.
FF_HD uint16_t to_half_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(v));
#else
  uint32_t x = __builtin_bit_cast(uint32_t, v);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (x > 0x7f800000u ? 0x200u : 0u));  // inf/nan
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);   // rounds to >= 65520: overflow to inf
  if (x < 0x38800000u) {                                     // subnormal half (or zero)
    if (x < 0x33000000u) return uint16_t(sign);              // < 2^-25 rounds to zero
    const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(x >> 23);                    // 14..24
    const uint32_t half_ulp = 1u << (shift - 1), rest = mant & ((1u << shift) - 1u);
    uint32_t h = mant >> shift;
    if (rest > half_ulp || (rest == half_ulp && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((x - 0x38000000u) >> 13);
  const uint32_t rest = x & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
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
