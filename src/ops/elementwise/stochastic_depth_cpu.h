#pragma once
// Stochastic depth on the CPU (torchvision's StochasticDepth, mode "row"): a tensor is `rows`
// samples of `row_size` consecutive elements (its first dimension is the batch), and each sample
// is kept whole, scaled by 1 / (1 - p), or zeroed whole. The mask (one byte per sample) is drawn
// as dropout draws its elements (elementwise_cpu.h): sample r is kept when
// random_uniform(seed, stream, r) >= p, with stream = dropout_stream(layer key, step).
#include <cstdint>

#include "ops/elementwise/elementwise_cpu.h"

namespace kiln::cpu {

// mask[r] = the draw for sample r; y = mask[r] ? x * (1 / (1 - p)) : 0 over its row. p in [0, 1]
// (p = 1 drops every sample). y may alias x.
template <class T>
void stochastic_depth_forward(const T* x, int64_t rows, int64_t row_size, double p, uint64_t seed, uint64_t stream,
                              T* y, uint8_t* mask);

// dx = mask[r] ? dy * (1 / (1 - p)) : 0 over row r (0 everywhere when p = 1). dx may alias dy.
template <class T>
void stochastic_depth_backward(const T* dy, const uint8_t* mask, int64_t rows, int64_t row_size, double p, T* dx);

}  // namespace kiln::cpu
