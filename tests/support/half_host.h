#pragma once
// The tests' one host-side fp16/bf16 converter: fp32 <-> fp16/bf16 bits with round to nearest
// even, bit for bit what CUDA's __float2half_rn / __float2bfloat16_rn / __half2float /
// __bfloat162float give on the host (NaN included: 0x7fff, and 0x7fffffff back from an fp16 NaN),
// plus rounding, encoding and decoding of whole vectors by DType. Test code converts with these,
// never with CUDA's intrinsics, so it needs no CUDA header to read tensors back; device kernels
// keep CUDA's own types.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
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

// m / 2^s rounded to nearest, ties to even (1 <= s <= 31).
inline uint32_t shift_right_rne(uint32_t m, uint32_t s) {
  const uint32_t q = m >> s, rest = m & ((1u << s) - 1), half = 1u << (s - 1);
  return q + ((rest > half || (rest == half && (q & 1))) ? 1u : 0u);
}

inline uint16_t float_to_bf16(float f) {
  const uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
  return uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }

inline uint16_t float_to_half(float f) {
  const uint32_t b = float_to_bits(f), a = b & 0x7fffffffu;
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  if (a > 0x7f800000u) return 0x7fff;                      // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);   // from 65520 (a tie going up): infinity
  if (a >= 0x38800000u)                                    // normal: rebias, round off 13 bits
    return uint16_t(sign | shift_right_rne(a - 0x38000000u, 13));  // a carry moves up the exponent
  if (a < 0x33000001u) return sign;                        // up to 2^-25 (a tie going down): zero
  const uint32_t exponent = a >> 23;                       // subnormal: units of 2^-24
  return uint16_t(sign | shift_right_rne((a & 0x7fffffu) | 0x800000u, 126u - exponent));
}
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_to_float(mantissa ? 0x7fffffffu : sign | 0x7f800000u);  // NaN, infinity
  if (exponent != 0) return bits_to_float(sign | (exponent + 112) << 23 | mantissa << 13);
  if (mantissa == 0) return bits_to_float(sign);
  // Subnormal: mantissa * 2^-24, normalized.
  uint32_t e = 113, m = mantissa;
  while (!(m & 0x400u)) m <<= 1, --e;
  return bits_to_float(sign | e << 23 | (m & 0x3ffu) << 13);
}

// The value `f` takes when stored as `dtype` (fp32 passes through).
inline float round_to(DType dtype, float f) {
  if (dtype == DType::F16) return half_to_float(float_to_half(f));
  if (dtype == DType::BF16) return bf16_to_float(float_to_bf16(f));
  return f;
}

// Every value rounded to `dtype` (to fp32 first), kept as V.
template <class V>
std::vector<V> rounded(DType dtype, std::vector<V> values) {
  for (V& v : values) v = static_cast<V>(round_to(dtype, static_cast<float>(v)));
  return values;
}

// Encodes values (float or double, stored through fp32) as `dtype` bytes (F32, F16 or BF16).
template <class V>
std::vector<std::byte> encode(DType dtype, const std::vector<V>& v) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw std::runtime_error("encode: not a float activation dtype");
  std::vector<std::byte> out(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = static_cast<float>(v[i]);
    if (dtype == DType::F32) {
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      const uint16_t h = dtype == DType::F16 ? float_to_half(f) : float_to_bf16(f);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

// Decodes `bytes` bytes of `dtype` (F32, F16 or BF16) into V values (float unless asked otherwise).
template <class V = float>
std::vector<V> decode(DType dtype, const void* data, size_t bytes) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw std::runtime_error("decode: not a float activation dtype");
  const auto* in = static_cast<const unsigned char*>(data);
  std::vector<V> out(bytes / dtype_size(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    float f;
    if (dtype == DType::F32) {
      std::memcpy(&f, in + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, in + i * 2, 2);
      f = dtype == DType::F16 ? half_to_float(h) : bf16_to_float(h);
    }
    out[i] = static_cast<V>(f);
  }
  return out;
}
template <class V = float>
std::vector<V> decode(DType dtype, const std::vector<std::byte>& bytes) {
  return decode<V>(dtype, bytes.data(), bytes.size());
}

}  // namespace kiln::testing
