#pragma once
// Elementwise activations on the CPU (float for training, double for gradient checks).
#include <cstdint>

#include "kiln/layer_vocabulary.h"

namespace kiln::cpu {

template <class T>
void activation_forward(Activation f, float alpha, const T* x, int64_t n, T* y);
template <class T>
void activation_backward(Activation f, float alpha, const T* dy, const T* x, int64_t n, T* dx);

}  // namespace kiln::cpu
