#include "core/mask_bits.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace kiln::cpu {
namespace {

bool bit(const std::vector<uint8_t>& bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

// Every start and length around byte edges and past several 64-flag words (the width an AVX-512
// build unpacks at once), against bit-by-bit reads of random bytes.
TEST(MaskBits, UnpackReadsEachBitAtAnyStartAndLength) {
  std::mt19937 rng(7);
  std::vector<uint8_t> bits(40);
  for (auto& b : bits) b = static_cast<uint8_t>(rng());
  for (int64_t first = 0; first < 24; ++first)
    for (int64_t n = 0; n < 200; ++n) {
      std::vector<uint8_t> flags(n + 1, 7);
      unpack_bits(bits.data(), first, n, flags.data());
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(flags[j], bit(bits, first + j) ? 1 : 0) << first << " " << n << " " << j;
      EXPECT_EQ(flags[n], 7) << "wrote past n";
    }
}

// Random flags packed at byte starts read back bit for bit; the last byte's spare bits are 0 and
// the bytes around the written run are left alone.
TEST(MaskBits, PackWritesEachFlagAsItsBit) {
  std::mt19937 rng(11);
  for (int64_t first : {0, 8, 24})
    for (int64_t n = 0; n < 200; ++n) {
      std::vector<uint8_t> flags(n);
      for (auto& f : flags) f = rng() & 1;
      std::vector<uint8_t> bits(32, 0xA5);
      pack_bits(flags.data(), n, bits.data(), first);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(bit(bits, first + j), flags[j] == 1) << first << " " << n << " " << j;
      const int64_t end_byte = (first + n + 7) / 8;
      for (int64_t i = first + n; i < end_byte * 8; ++i) EXPECT_FALSE(bit(bits, i)) << "spare bit " << i;
      for (int64_t b = 0; b < first / 8; ++b) EXPECT_EQ(bits[b], 0xA5);
      for (int64_t b = end_byte; b < 32; ++b) EXPECT_EQ(bits[b], 0xA5);
    }
}

// pack_positive's bit j is v[j] > 0: negatives, both zeros and NaN are 0 bits (as the ReLU's
// output is 0 there); lengths across its stack blocks (512 flags) and byte tails, other bytes kept.
template <class T>
void check_pack_positive() {
  std::mt19937 rng(13);
  std::uniform_real_distribution<T> value(-1, 1);
  for (int64_t first : {0, 16})
    for (int64_t n : {0, 1, 7, 63, 64, 65, 511, 512, 513, 1100}) {
      std::vector<T> v(n);
      for (int64_t j = 0; j < n; ++j) {
        const int kind = int(rng() % 8);
        v[j] = kind == 0 ? T(0) : kind == 1 ? T(-0.0) : kind == 2 ? std::numeric_limits<T>::quiet_NaN() : value(rng);
      }
      std::vector<uint8_t> bits(first / 8 + n / 8 + 2, 0xA5);
      pack_positive(v.data(), n, bits.data(), first);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(bit(bits, first + j), v[j] > T(0)) << first << " " << n << " " << j;
      for (int64_t b = 0; b < first / 8; ++b) EXPECT_EQ(bits[b], 0xA5);
      EXPECT_EQ(bits.back(), 0xA5) << "wrote past the run";
    }
}
TEST(MaskBits, PackPositiveSetsExactlyThePositiveValuesBits) {
  check_pack_positive<float>();
  check_pack_positive<double>();
}

TEST(MaskBits, AllOnesAndAllZerosRoundTrip) {
  std::vector<uint8_t> ones(64, 1), zeros(64, 0), bits(8), back(64);
  pack_bits(ones.data(), 64, bits.data(), 0);
  for (uint8_t b : bits) EXPECT_EQ(b, 0xFF);
  unpack_bits(bits.data(), 0, 64, back.data());
  EXPECT_EQ(back, ones);
  pack_bits(zeros.data(), 64, bits.data(), 0);
  for (uint8_t b : bits) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace kiln::cpu
