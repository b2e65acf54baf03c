#pragma once
// The layer_norm family's GPU kernels, the CPU's (layer_norm_cpu.h) on the device: activations are
// F32, F16 or BF16, the weight, bias, saved statistics and parameter gradients fp32; all arithmetic
// in fp32, each result rounded once on store. Every sum runs in an order fixed by the extents alone
// (the same bits on every run): a row's within a team of lanes, the parameter gradients' in two
// passes through the `partials` workspace (layer_norm_tiles.h). Only enqueues work on `stream` (no
// allocation, no host wait: a CUDA Graph can capture it); throws kiln::Error naming `where` on bad
// arguments or CUDA errors.
#include <cuda_runtime.h>

#include <string>

#include "kiln/dtype.h"
#include "ops/layer_norm/layer_norm_cpu.h"

namespace kiln::cuda {

// y = (x - mean) * rstd * weight + bias per row; mean and rstd saved where given (both or neither).
void layer_norm_forward(DType dtype, const cpu::LayerNormGeom& g, const void* x, const float* weight,
                        const float* bias, float eps, void* y, float* mean, float* rstd, cudaStream_t stream,
                        const std::string& where);

// dx where given; dweight and dbias where given, through `partials` (at least
// layer_norm_tiles::partial_elements(rows, c) floats, needed when either is).
void layer_norm_backward(DType dtype, const cpu::LayerNormGeom& g, const void* dy, const void* x, const float* weight,
                         const float* mean, const float* rstd, void* dx, float* dweight, float* dbias, float* partials,
                         cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
