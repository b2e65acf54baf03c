#pragma once
// Stochastic depth on the GPU, as on the CPU (stochastic_depth_cpu.h): `rows` samples of
// `row_size` consecutive elements, each kept whole and scaled by 1 / (1 - p) or zeroed whole; the
// mask (one byte per sample) is drawn with the CPU's counter-based randomness, so both backends
// keep the same samples. Tensors of dtype F32, F16 or BF16 (the product in fp32, rounded once on
// store). Every function only enqueues work on `stream` (two kernels for the forward: the draw,
// then the product) and throws kiln::Error naming `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// mask[r] = random_uniform(seed, random_stream, r) >= p; y = mask[r] ? x * (1 / (1 - p)) : 0 over
// row r. p in [0, 1]. y may alias x.
void stochastic_depth_forward(DType dtype, const void* x, int64_t rows, int64_t row_size, float p, uint64_t seed,
                              uint64_t random_stream, void* y, uint8_t* mask, cudaStream_t stream,
                              const std::string& where);

// The same with the seed and step read in device memory when the kernel runs (what a replayed
// CUDA Graph needs), the stream being the layer's cpu::dropout_stream(layer_key, *step).
void stochastic_depth_forward(DType dtype, const void* x, int64_t rows, int64_t row_size, float p,
                              const uint64_t* seed, const int64_t* step, uint64_t layer_key, void* y, uint8_t* mask,
                              cudaStream_t stream, const std::string& where);

// dx = mask[r] ? dy * (1 / (1 - p)) : 0 over row r (0 everywhere when p = 1). dx may alias dy.
void stochastic_depth_backward(DType dtype, const void* dy, const uint8_t* mask, int64_t rows, int64_t row_size,
                               float p, void* dx, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
