#pragma once
// Depthwise convolutions on the CPU (groups == C > 1: each output channel reads one input channel,
// K / C of them per input channel), as direct loops: im2col + GEMM would copy every input value
// R x S times to multiply it by one weight per output channel. Used by conv_cpu.cpp's reference
// kernels for any window; the bias and its gradient are the caller's. Each output is computed by
// one task, its terms added in a fixed order: the bytes do not depend on the thread count.
#include "ops/conv/conv_cpu.h"

namespace kiln::cpu {

template <class T>
void depthwise_fwd(const ConvGeom& g, const T* x, const T* w, const T* bias /*nullable*/, T* y);
template <class T>
void depthwise_dgrad(const ConvGeom& g, const T* dy, const T* w, T* dx);
template <class T>
void depthwise_wgrad(const ConvGeom& g, const T* dy, const T* x, T* dw);

}  // namespace kiln::cpu
