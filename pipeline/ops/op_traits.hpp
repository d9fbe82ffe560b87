#pragma once
//! Shared vocabulary of the ops: FF_HD marks functions compiled for host and device, Vec3 is the
//! float RGB pixel every op passes along. Nothing here includes CUDA headers, so CPU-only builds
//! (no toolkit) compile the same op definitions.
#include <cstdint>

#if defined(__CUDACC__)
#define FF_HD __host__ __device__ __forceinline__
#else
#define FF_HD inline
#endif

namespace framefuse::ops {

//! An RGB (or gray in .x) pixel in float, 0..255 scale before normalize.
struct Vec3 {
  float x, y, z;
};

FF_HD Vec3 operator+(Vec3 a, Vec3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
FF_HD Vec3 operator*(Vec3 a, float s) { return {a.x * s, a.y * s, a.z * s}; }

FF_HD int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
FF_HD float clampf(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }
//! floor() for the coordinate ranges used here (|v| < 2^30), identical on host and device.
FF_HD int floori(float v) {
  int i = static_cast<int>(v);
  return (static_cast<float>(i) > v) ? i - 1 : i;
}

}  // namespace framefuse::ops
