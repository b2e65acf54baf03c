#pragma once
// e^x for the activations (activation_functions.h): Sigmoid, SiLU, ELU and Mish's sigmoid.
//
// On the host in float, kiln's own host_expf: std::exp may set errno, so GCC keeps a loop that calls
// it scalar, and SiLU's forward and backward took a third of EfficientNet-B0's CPU training step
// (1.45 s of 4.25 s at batch 32 on one thread, docs/results.md 2026-12-07). host_expf is plain
// arithmetic and bit moves, which the loops over a tensor vectorize. In float64, and on the device,
// the library's exp: float64 results stay PyTorch's to the last bits its float64 checks read.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace kiln::activation {

// e^x within 2 units in the last place of the rounded true value for x in [-87.3, 88.7] (the normal
// results; tested over every 4099th float there), gradually underflowing below that and +inf above
// 88.73, NaN for NaN. x = k ln2 + r with |r| <= ln2 / 2 (k rounded to the nearest by adding 1.5 * 2^23,
// whose bits then hold k); e^r = 1 + r + r^2 p(r), p of degree 4 fitted by weighted least squares on
// Chebyshev nodes of [-ln2 / 2, ln2 / 2] (relative error 3.8e-9 before float rounding); 2^k applied as
// two factors 2^(k/2) and 2^(k - k/2), each a normal float for k in [-150, 129].
inline float host_expf(float x) {
  // Beyond these e^x is 0 or +inf in float; comparisons that keep NaN (a clamp by fmin/fmax would not).
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer, kept in the low bits
  const float t = x * 1.44269504088896341f + kRound;
  const float k = t - kRound;
  uint32_t t_bits, round_bits;
  std::memcpy(&t_bits, &t, 4);
  std::memcpy(&round_bits, &kRound, 4);
  const int32_t ki = int32_t(t_bits - round_bits);  // k as an integer, in [-150, 129]
  // ln2 split so that k * kLn2High is exact for |k| < 2^9 (kLn2High has 9 significant bits).
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440054690583e-4f;
  const float r = (x - k * kLn2High) - k * kLn2Low;
  const float p = 0.499999940f + r * (0.166665211f + r * (0.0416683853f + r * (0.00836871006f + r * 0.00138146465f)));
  const float e_r = 1.0f + r + r * r * p;
  const int32_t half = ki / 2;
  const uint32_t s1_bits = uint32_t(half + 127) << 23, s2_bits = uint32_t(ki - half + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &s1_bits, 4);
  std::memcpy(&s2, &s2_bits, 4);
  return e_r * s1 * s2;
}

// The exp the activations use: host_expf for float on the host, std::exp otherwise.
template <class T>
KILN_HOST_DEVICE inline T exp_of(T x) {
#ifdef __CUDA_ARCH__
  return std::exp(x);
#else
  if constexpr (sizeof(T) == sizeof(float)) return host_expf(x);
  else return std::exp(x);
#endif
}

}  // namespace kiln::activation
