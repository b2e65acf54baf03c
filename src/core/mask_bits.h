#pragma once
// ReLU bit masks on the CPU, in branch-free pieces: a ReLU mask is as good as random, so a
// branch on each bit mispredicts half the time, and a loop that tests bits one at a time does
// not vectorize. The kernels unpack a row's bits into a local array of 0/1 bytes, work on whole
// vectors of channels, and pack their "passed" flags back eight at a time.
//
// Layout (shared by BatchNorm, CBR and the residual joins): element i of the flat tensor is
// bit i % 8 of byte i / 8, least significant bit first; a set bit means "passed the ReLU".
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

namespace kiln::cpu {

namespace mask_bits_detail {
// byte_flags[v] holds v's eight bits as eight 0/1 bytes, bit 0 in the lowest byte.
constexpr std::array<uint64_t, 256> make_byte_flags() {
  std::array<uint64_t, 256> t{};
  for (uint64_t v = 0; v < 256; ++v)
    for (int b = 0; b < 8; ++b) t[v] |= ((v >> b) & 1) << (8 * b);
  return t;
}
inline constexpr std::array<uint64_t, 256> byte_flags = make_byte_flags();
}  // namespace mask_bits_detail

// flags[j] = bit (first + j) of `bits`, 0 or 1, for j in [0, n).
inline void unpack_bits(const uint8_t* bits, int64_t first, int64_t n, uint8_t* flags) {
  int64_t j = 0;
  for (; j < n && (first + j) % 8 != 0; ++j) flags[j] = (bits[(first + j) >> 3] >> ((first + j) & 7)) & 1;
  const uint8_t* byte = bits + ((first + j) >> 3);
  for (; j + 8 <= n; j += 8, ++byte) std::memcpy(flags + j, &mask_bits_detail::byte_flags[*byte], 8);
  for (int64_t b = 0; b < n - j; ++b) flags[j + b] = (*byte >> b) & 1;  // fewer than 8 left
}

// Writes flags[0..n) (each 0 or 1) as n bits from bit `first`, which must be a multiple of 8;
// the bits of the last byte beyond n are written as 0.
inline void pack_bits(const uint8_t* flags, int64_t n, uint8_t* bits, int64_t first) {
  uint8_t* out = bits + first / 8;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    uint64_t eight;
    std::memcpy(&eight, flags + j, 8);
    // Each byte of `eight` is 0 or 1; the product gathers byte b's bit into bit b of the top
    // byte (the partial products land on distinct bits, so nothing carries into it).
    *out++ = static_cast<uint8_t>((eight * 0x0102040810204080ull) >> 56);
  }
  if (j < n) {
    uint8_t last = 0;
    for (int64_t b = 0; b < n - j; ++b) last |= static_cast<uint8_t>(flags[j + b] << b);  // fewer than 8
    *out = last;
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
