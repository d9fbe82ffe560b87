#include "tests/support/test_images.hpp"

#include <cmath>
#include <cstring>
#include <random>

namespace framefuse::test {

ops::ImageView HostImage::view() const {
  ops::ImageView v{};
  v.width = width;
  v.height = height;
  v.format = format;
  for (size_t i = 0; i < planes.size(); ++i) {
    v.data[i] = planes[i].data();
    v.pitch[i] = pitch[i];
  }
  return v;
}

HostImage random_image(ops::PixelFormat format, int32_t width, int32_t height, uint32_t seed, int32_t pad) {
  HostImage img;
  img.format = format;
  img.width = width;
  img.height = height;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < ops::plane_count(format); ++i) {
    const auto s = ops::plane_shape(format, width, height, i);
    // 10-bit rows hold u16 samples: keep the pitch even so every row stays 2-byte aligned.
    const int32_t pitch = s.row_bytes + (ops::sample_bytes(format) == 2 ? (pad + 1) & ~1 : pad);
    std::vector<uint8_t> plane(size_t(pitch) * s.rows);
    for (auto& b : plane) b = static_cast<uint8_t>(byte(rng));
    // Little-endian u16 with 10 significant bits: P010's low byte keeps only its top 2 bits,
    // Yuv420p10's high byte only its bottom 2.
    if (format == ops::PixelFormat::P010) {
      for (size_t j = 0; j + 1 < plane.size(); j += 2) plane[j] &= 0xC0;
    } else if (format == ops::PixelFormat::Yuv420p10) {
      for (size_t j = 0; j + 1 < plane.size(); j += 2) plane[j + 1] &= 0x03;
    }
    img.planes.push_back(std::move(plane));
    img.pitch.push_back(pitch);
  }
  return img;
}

FrameInfo frame_info(const HostImage& img, ops::ColorMatrix m, ops::ColorRange r) {
  FrameInfo f;
  f.width = img.width;
  f.height = img.height;
  f.format = img.format;
  f.matrix = m;
  f.range = r;
  return f;
}

std::vector<std::vector<std::byte>> poisoned_outputs(std::span<const OutputPlan> plans, int batch) {
  std::vector<std::vector<std::byte>> out;
  for (const auto& p : plans) out.emplace_back(p.bytes_per_frame * batch, std::byte{0xFF});
  return out;
}

std::vector<std::byte*> pointers(std::vector<std::vector<std::byte>>& bufs) {
  std::vector<std::byte*> p;
  for (auto& b : bufs) p.push_back(b.data());
  return p;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(float(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::nanf("") : INFINITY;
  } else {
    v = std::ldexp(float(mant | 0x400u), exp - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

std::vector<double> to_double(std::span<const std::byte> bytes, ops::DType dtype) {
  std::vector<double> out(bytes.size() / ops::dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case ops::DType::F32: {
        float f;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        out[i] = f;
        break;
      }
      case ops::DType::F16: {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = half_to_float(h);
        break;
      }
      case ops::DType::U8: out[i] = double(std::to_integer<uint8_t>(bytes[i])); break;
    }
  }
  return out;
}

Diff compare(std::span<const double> a, std::span<const double> b, double rel_floor) {
  Diff d;
  d.count = std::min(a.size(), b.size());
  for (size_t i = 0; i < d.count; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      ++d.non_finite;
      continue;
    }
    const double e = std::abs(a[i] - b[i]);
    if (e > 0) ++d.differing;
    d.max_abs = std::max(d.max_abs, e);
    d.max_rel = std::max(d.max_rel, e / std::max(std::abs(b[i]), rel_floor));
  }
  return d;
}

}  // namespace framefuse::test
