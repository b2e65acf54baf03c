#pragma once
// Weights stored in another floating-point dtype, as the float32 kiln loads: PyTorch users and
// model hubs save state_dicts in fp16, bf16 or float64 as often as in float32.
#include <vector>

#include "kiln/safetensors.h"

namespace kiln {

// F32, F64, F16 and BF16: the dtypes whose tensors f32_values takes.
bool is_floating_point(DType dtype);

// The tensor's values as float32: F32 as stored, F16 and BF16 exactly (each of their values is a
// float32), F64 rounded to nearest, where a finite value beyond float32's range becomes an
// infinity (the caller checks). Throws kiln::Error for an integer dtype.
std::vector<float> f32_values(const NamedTensor& tensor);

}  // namespace kiln
