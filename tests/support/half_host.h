#pragma once
// Host-side fp16/bf16 <-> fp32 conversions for tests (round to nearest even), so test code does
// not depend on CUDA headers for reading tensors back.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::testing {

inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t b = float_to_bits(f);
  b += 0x7fff + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    return (h & 0x8000 ? -1.f : 1.f) * std::ldexp(float(mant), -24);  // subnormal
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000 | (mant << 13));
  return bits_to_float(sign | uint32_t(exp - 15 + 127) << 23 | (mant << 13));
}
inline uint16_t float_to_half(float f) {
  // Exact enough for tests: goes through the nearest representable value by search on exponent.
  const uint32_t b = float_to_bits(f);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (!(a < 65520.f)) return uint16_t(sign | 0x7c00);
  if (a < 6.103515625e-05f) return uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.f)));  // subnormal
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = uint32_t(std::nearbyint((m * 2.f - 1.f) * 1024.f));
  int exp = e - 1 + 15;
  if (mant == 1024) mant = 0, ++exp;
  return uint16_t(sign | uint16_t(exp << 10) | uint16_t(mant));
}

// The value `f` takes when stored as `dtype` (fp32 passes through).
inline float round_to(DType dtype, float f) {
  if (dtype == DType::F16) return half_to_float(float_to_half(f));
  if (dtype == DType::BF16) return bf16_to_float(float_to_bf16(f));
  return f;
}

// Encodes floats as `dtype` bytes, and decodes back.
inline std::vector<std::byte> encode(DType dtype, const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::F32) std::memcpy(&out[i * 4], &v[i], 4);
    if (dtype == DType::F16 || dtype == DType::BF16) {
      const uint16_t h = dtype == DType::F16 ? float_to_half(v[i]) : float_to_bf16(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}
inline std::vector<float> decode(DType dtype, const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == DType::F32) std::memcpy(&out[i], &bytes[i * 4], 4);
    if (dtype == DType::F16 || dtype == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = dtype == DType::F16 ? half_to_float(h) : bf16_to_float(h);
    }
  }
  return out;
}

}  // namespace kiln::testing
