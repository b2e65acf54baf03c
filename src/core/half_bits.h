#pragma once
// fp16 and bf16 values, as the host reads them back from a tensor, widened exactly to double.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln {

inline double half_bits_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  double v;
  if (exponent == 0) v = std::ldexp(double(mantissa), -24);  // zero and subnormals
  else if (exponent == 31) v = mantissa != 0 ? NAN : INFINITY;
  else v = std::ldexp(double(mantissa + 1024), exponent - 25);
  return (h >> 15) ? -v : v;
}

inline double bf16_bits_to_double(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;  // bf16 is the top half of an fp32
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace kiln
