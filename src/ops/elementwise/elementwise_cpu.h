#pragma once
// Elementwise kernels on the CPU: ReLU, residual add, gradient accumulation, dropout.
// Every kernel treats its tensors as flat arrays of n elements; outputs may alias inputs
// (each element is read before it is written).
#include <cstdint>

#include "core/random.h"

namespace kiln::cpu {

// y = max(x, 0) (NaN passes through, so it stays visible in the loss); mask (nullable) gets
// 1 where x > 0, else 0.
template <class T>
void relu_forward(const T* x, int64_t n, T* y, uint8_t* mask);

// dx = mask ? dy : 0.
template <class T>
void relu_backward(const T* dy, const uint8_t* mask, int64_t n, T* dx);

template <class T>
void add_forward(const T* a, const T* b, int64_t n, T* y);

// sum = g[0] + g[1] + ... + g[k-1], added in that order for every element.
template <class T>
void grad_sum(const T* const* g, int k, int64_t n, T* sum);

// Random stream of one dropout layer at one optimizer step: masks differ between layers and
// steps and are a pure function of (seed, layer key, step, element index); the layer key is a
// hash of the layer's name (DropoutForward::layer_key).
KILN_HOST_DEVICE inline uint64_t dropout_stream(uint64_t layer_key, int64_t step) {
  return mix64(layer_key * 1000003ULL + static_cast<uint64_t>(step));
}

// Inverted dropout: element i is kept when random_uniform(seed, stream, i) >= p, then
// y = x / (1 - p) and mask = 1; dropped elements give y = 0, mask = 0. p must be in [0, 1]
// (p = 1 drops everything).
template <class T>
void dropout_forward(const T* x, int64_t n, double p, uint64_t seed, uint64_t stream, T* y,
                     uint8_t* mask);

// dx = dy * mask / (1 - p) (0 everywhere when p = 1).
template <class T>
void dropout_backward(const T* dy, const uint8_t* mask, int64_t n, double p, T* dx);

}  // namespace kiln::cpu
