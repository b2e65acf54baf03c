#pragma once
// Elementwise activations on the GPU (activation_functions.h): F32, F16 or BF16 tensors of n
// elements, arithmetic in fp32, rounded once on store. Only enqueue work on `stream`; throw
// kiln::Error naming `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/layer_vocabulary.h"
#include "kiln/dtype.h"

namespace kiln::cuda {

// y = f(x).
void activation_forward(Activation f, float alpha, DType dtype, const void* x, int64_t n, void* y,
                        cudaStream_t stream, const std::string& where);

// dx = dy * f'(x).
void activation_backward(Activation f, float alpha, DType dtype, const void* dy, const void* x, int64_t n,
                         void* dx, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
