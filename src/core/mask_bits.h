#pragma once
// ReLU bit masks on the CPU, in branch-free pieces: a ReLU mask is as good as random, so a
// branch on each bit mispredicts half the time, and a loop that tests bits one at a time does
// not vectorize. The kernels unpack a row's bits into a local array of 0/1 bytes, work on whole
// vectors of channels, and pack their "passed" flags back eight at a time.
//
// Layout (shared by BatchNorm, CBR and the residual joins): element i of the flat tensor is
// bit i % 8 of byte i / 8, least significant bit first; a set bit means "passed the ReLU".
#include <bit>
#include <cstdint>

namespace kiln::cpu {

// flags[j] = bit (first + j) of `bits`, 0 or 1, for j in [0, n).
void unpack_bits(const uint8_t* bits, int64_t first, int64_t n, uint8_t* flags);

// Writes flags[0..n) (each 0 or 1) as n bits from bit `first`, which must be a multiple of 8;
// the bits of the last byte beyond n are written as 0.
void pack_bits(const uint8_t* flags, int64_t n, uint8_t* bits, int64_t first);

// Writes the flags v[j] > 0 for j in [0, n) as n bits from bit `first` (a multiple of 8), in
// blocks of a stack buffer: the comparison runs as whole vectors (v is a local pointer here, so a
// flag's byte store cannot alias it and the vectorizer takes the loop), the packing eight at a time.
template <class T>
void pack_positive(const T* v, int64_t n, uint8_t* bits, int64_t first) {
  constexpr int64_t kBlock = 512;  // a multiple of 8: every block starts on a mask byte
  uint8_t flags[kBlock];
  for (int64_t j = 0; j < n; j += kBlock) {
    const int64_t len = n - j < kBlock ? n - j : kBlock;
    for (int64_t i = 0; i < len; ++i) flags[i] = v[j + i] > T(0);
    pack_bits(flags, len, bits, first + j);
  }
}

// v where on is 1, +0 where on is 0: the select done on v's bits, which the vectorizer takes
// whatever the widths of the flag and the value (a `?:` on a byte flag with a double operand
// turns into a masked load it cannot vectorize).
inline double keep_if(uint8_t on, double v) {
  return std::bit_cast<double>(std::bit_cast<uint64_t>(v) & (uint64_t{0} - on));
}
inline float keep_if(uint8_t on, float v) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & (uint32_t{0} - on));
}

// out[i] = keep_if(on[i], v[i]) for i in [0, n).
template <class T>
void keep_where(const uint8_t* on, const T* v, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = keep_if(on[i], v[i]);
}

}  // namespace kiln::cpu
