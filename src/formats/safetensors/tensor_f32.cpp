#include "formats/safetensors/tensor_f32.h"

#include <cstdint>
#include <cstring>

#include "core/half_bits.h"
#include "kiln/error.h"

namespace kiln {
namespace {

template <class T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
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
      for (size_t i = 0; i < n; ++i) out[i] = float(half_bits_to_double(load<uint16_t>(p + i * 2)));  // exact
      break;
    default:
      for (size_t i = 0; i < n; ++i) out[i] = float(bf16_bits_to_double(load<uint16_t>(p + i * 2)));  // exact
      break;
  }
  return out;
}

}  // namespace kiln
