#pragma once
// Counter-based randomness: a value is a pure function of (seed, stream, index), so results
// do not depend on thread count or on the order in which workers run. The uniform draws
// (mix64, random_bits, random_uniform) are also callable from CUDA kernels: the GPU and the CPU
// draw the same bits, so a kernel reproduces the CPU's dropout masks exactly.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace kiln {

KILN_HOST_DEVICE inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

KILN_HOST_DEVICE inline uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

// Uniform in [0, 1) with 24 random bits.
KILN_HOST_DEVICE inline float random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(random_bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller on two counter draws).
inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = (static_cast<double>(random_bits(seed, stream, 2 * index) >> 11) + 1.0) * 0x1.0p-53;
  double u2 = static_cast<double>(random_bits(seed, stream, 2 * index + 1) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace kiln
