#pragma once
// Elementwise kernels on the GPU: ReLU, residual add, gradient accumulation, dtype casts, fill,
// dropout. Semantics match the CPU kernels (elementwise_cpu.h). Tensors are flat arrays of n
// elements of dtype F32, F16 or BF16 (arithmetic in fp32, rounded once on store); byte masks
// hold one uint8 per element (1 = kept / passed, 0 = not). Outputs may alias inputs (each
// element is read before it is written, by the same thread). Every function only enqueues work
// on `stream` and throws kiln::Error naming `where` on bad arguments or CUDA errors.
//
// Any pointer alignment works; 16-byte aligned activations and 8-byte aligned masks take the
// vectorized path (8 elements per thread and step).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// y = x < 0 ? 0 : x (NaN passes through, as on the CPU); mask (nullable) = x > 0.
void relu_forward(DType dtype, const void* x, int64_t n, void* y, uint8_t* mask,
                  cudaStream_t stream, const std::string& where);

// dx = mask ? dy : 0.
void relu_backward(DType dtype, const void* dy, const uint8_t* mask, int64_t n, void* dx,
                   cudaStream_t stream, const std::string& where);

// y = a + b.
void add(DType dtype, const void* a, const void* b, int64_t n, void* y, cudaStream_t stream,
         const std::string& where);

// sum = inputs[0] + ... + inputs[k-1], added in that order in fp32 and rounded once per pass.
// `inputs` is a host array of k >= 1 device pointers; more than kGradSumMaxInputs inputs take
// several passes (sum is then rounded to dtype between passes). sum may alias any input.
constexpr int kGradSumMaxInputs = 16;
void grad_sum(DType dtype, const void* const* inputs, int k, int64_t n, void* sum,
              cudaStream_t stream, const std::string& where);

// dst = src converted to dst_dtype (round to nearest even); any pair of F32 / F16 / BF16. The
// same dtype is a plain copy. src and dst must not overlap unless they are the same pointer
// with the same dtype size.
void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
          cudaStream_t stream, const std::string& where);

// x[i] = value (rounded to dtype).
void fill(DType dtype, void* x, int64_t n, float value, cudaStream_t stream,
          const std::string& where);

// Inverted dropout with the CPU's counter-based randomness (core/random.h): element i is kept
// when random_uniform(seed, random_stream, i) >= p, then y = x * (1 / (1 - p)) and mask = 1,
// else y = 0 and mask = 0. Masks are bitwise identical to the CPU's for the same arguments.
// p must be in [0, 1].
void dropout_forward(DType dtype, const void* x, int64_t n, float p, uint64_t seed,
                     uint64_t random_stream, void* y, uint8_t* mask, cudaStream_t stream,
                     const std::string& where);

// The same with the seed and step read in device memory when the kernel runs (what a replayed
// CUDA Graph needs), the stream being the layer's cpu::dropout_stream(layer_key, *step).
void dropout_forward(DType dtype, const void* x, int64_t n, float p, const uint64_t* seed, const int64_t* step,
                     uint64_t layer_key, void* y, uint8_t* mask, cudaStream_t stream, const std::string& where);

// dx = mask ? dy * (1 / (1 - p)) : 0 (0 everywhere when p = 1).
void dropout_backward(DType dtype, const void* dy, const uint8_t* mask, int64_t n, float p,
                      void* dx, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
