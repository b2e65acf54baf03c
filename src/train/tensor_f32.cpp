#include "train/tensor_f32.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kiln/error.h"

namespace kiln {
namespace {

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
float half_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  float v;
  if (exponent == 0) v = std::ldexp(float(mantissa), -24);  // zero and subnormals
  else if (exponent == 31) v = mantissa != 0 ? NAN : INFINITY;
  else v = std::ldexp(float(mantissa + 1024), exponent - 25);
  return (h & 0x8000) ? -v : v;
}

// bfloat16 is the upper half of a float32's bits.
float bf16_to_float(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

bool is_floating_point(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::F16 || dtype == DType::BF16;
}

std::vector<float> f32_values(const NamedTensor& tensor) {
  if (!is_floating_point(tensor.dtype))
    fail("tensor '{}' is {}, not a floating-point dtype", tensor.name, dtype_name(tensor.dtype));
  const size_t width = dtype_size(tensor.dtype), n = tensor.data.size() / width;
  std::vector<float> out(n);
  const std::byte* p = tensor.data.data();
  switch (tensor.dtype) {
    case DType::F32: std::memcpy(out.data(), p, n * sizeof(float)); break;
    case DType::F64:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(p + i * 8));
      break;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) out[i] = half_to_float(load<uint16_t>(p + i * 2));
      break;
    default:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(load<uint16_t>(p + i * 2));
      break;
  }
  return out;
}

}  // namespace kiln
