#pragma once
// Fully connected layer on the CPU: y = x w^T + b with x (N, F), w (O, F) as in PyTorch.
#include <cstdint>

namespace kiln::cpu {

struct LinearDims {
  int64_t n;         // batch rows
  int64_t in, out;   // F and O
};

template <class T>
void linear_fwd(const LinearDims& d, const T* x, const T* w, const T* b /*nullable*/, T* y);

// Overwrites the gradients (no accumulation). dx is skipped when nullptr (a network's first
// layer needs no input gradient), db when the layer has no bias.
template <class T>
void linear_bwd(const LinearDims& d, const T* dy, const T* x, const T* w, T* dx /*nullable*/,
                T* dw, T* db /*nullable*/);

}  // namespace kiln::cpu
