// The bit packing of ReLU masks (core/mask_bits.h). Out of line on purpose: inlined into a caller
// whose buffer size GCC 12 can bound, its unrolled 8-byte copies draw a false -Wstringop-overflow
// at -O3 -march=native; a call per row of channels costs nothing beside the row's work.
#include "core/mask_bits.h"

#include <array>
#include <cstring>
#if defined(__AVX512BW__)
#include <immintrin.h>
#endif

namespace kiln::cpu {

namespace mask_bits_detail {
// byte_flags[v] holds v's eight bits as eight 0/1 bytes, bit 0 in the lowest byte.
constexpr std::array<uint64_t, 256> make_byte_flags() {
  std::array<uint64_t, 256> t{};
  for (uint64_t v = 0; v < 256; ++v)
    for (int b = 0; b < 8; ++b) t[v] |= ((v >> b) & 1) << (8 * b);
  return t;
}
constexpr std::array<uint64_t, 256> byte_flags = make_byte_flags();
}  // namespace mask_bits_detail

void unpack_bits(const uint8_t* bits, int64_t first, int64_t n, uint8_t* flags) {
  int64_t j = 0;
  for (; j < n && (first + j) % 8 != 0; ++j) flags[j] = (bits[(first + j) >> 3] >> ((first + j) & 7)) & 1;
  const uint8_t* byte = bits + ((first + j) >> 3);
#if defined(__AVX512BW__)
  // Built for AVX-512 (the release preset's -march=native on such a CPU): 64 flags per store, each
  // set bit of a mask word becoming a byte of 1.
  for (; j + 64 <= n; j += 64, byte += 8) {
    uint64_t word;
    std::memcpy(&word, byte, 8);
    _mm512_storeu_si512(flags + j, _mm512_maskz_set1_epi8(word, 1));
  }
#endif
  for (; j + 8 <= n; j += 8, ++byte) std::memcpy(flags + j, &mask_bits_detail::byte_flags[*byte], 8);
  for (int64_t b = 0; b < n - j; ++b) flags[j + b] = (*byte >> b) & 1;  // fewer than 8 left
}

void pack_bits(const uint8_t* flags, int64_t n, uint8_t* bits, int64_t first) {
  uint8_t* out = bits + first / 8;
  int64_t j = 0;
#if defined(__AVX512BW__)
  // 64 flags per load: bit b of the word is whether flag b is set.
  for (; j + 64 <= n; j += 64, out += 8) {
    const uint64_t word = _mm512_test_epi8_mask(_mm512_loadu_si512(flags + j), _mm512_set1_epi8(1));
    std::memcpy(out, &word, 8);
  }
#endif
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

}  // namespace kiln::cpu
