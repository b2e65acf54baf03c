// find_non_finite (kiln/safetensors.h): the NaNs and infinities of a floating-point tensor, read
// from its bytes in the tensor's own dtype.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kiln/safetensors.h"

namespace kiln {
namespace {

template <class Bits>
Bits load_bits(const std::byte* p) {
  Bits b;
  std::memcpy(&b, p, sizeof(Bits));
  return b;
}

// The value of an element that is not finite (exponent all ones), for the message.
double non_finite_value(bool nan, bool negative) {
  if (nan) return std::nan("");
  return negative ? -INFINITY : INFINITY;
}

}  // namespace

NonFinite find_non_finite(const NamedTensor& tensor) {
  NonFinite out;
  const size_t size = tensor.dtype == DType::F32 || tensor.dtype == DType::F64 || tensor.dtype == DType::F16 ||
                              tensor.dtype == DType::BF16
                          ? dtype_size(tensor.dtype)
                          : 0;
  if (size == 0) return out;
  const size_t n = tensor.data.size() / size;
  for (size_t i = 0; i < n; ++i) {
    const std::byte* p = tensor.data.data() + i * size;
    bool bad = false, nan = false, negative = false;
    switch (tensor.dtype) {
      case DType::F32: {
        const uint32_t b = load_bits<uint32_t>(p);
        bad = (b & 0x7F800000u) == 0x7F800000u, nan = (b & 0x007FFFFFu) != 0, negative = b >> 31;
        break;
      }
      case DType::F64: {
        const uint64_t b = load_bits<uint64_t>(p);
        bad = (b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull, nan = (b & 0x000FFFFFFFFFFFFFull) != 0,
        negative = b >> 63;
        break;
      }
      case DType::F16: {
        const uint16_t b = load_bits<uint16_t>(p);
        bad = (b & 0x7C00u) == 0x7C00u, nan = (b & 0x03FFu) != 0, negative = b >> 15;
        break;
      }
      case DType::BF16: {
        const uint16_t b = load_bits<uint16_t>(p);
        bad = (b & 0x7F80u) == 0x7F80u, nan = (b & 0x007Fu) != 0, negative = b >> 15;
        break;
      }
      default: break;
    }
    if (!bad) continue;
    if (out.count++ == 0) out.first = int64_t(i), out.first_value = non_finite_value(nan, negative);
  }
  return out;
}

}  // namespace kiln
