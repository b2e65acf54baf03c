#pragma once
// Maps kiln dtypes to CUDA element types for kernel templates.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::cuda {

// Calls f(T{}) with T = float, __half or __nv_bfloat16 for the activation dtype.
template <class F>
void dispatch_activation(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::F32: return f(float{});
    case DType::F16: return f(__half{});
    case DType::BF16: return f(__nv_bfloat16{});
    default: fail("{}: dtype {} is not supported on the GPU (use fp32, fp16 or bf16)", what, dtype_name(dtype));
  }
}

}  // namespace kiln::cuda
