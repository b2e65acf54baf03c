#pragma once
// The layer_scale family's GPU kernels, the CPU's (layer_scale_cpu.h) on the device: x, y, dy and
// dx are F32, F16 or BF16, gamma and dgamma fp32 (the parameter's master and gradient). y and dx
// are the exact products rounded once to the element type: fp32's own product for F32; for F16 and
// BF16 the product with the fp32 factor, which fp32 cannot hold exactly (up to 35 significant
// bits), is formed in double, where it is exact, and rounded once on store (fp32 then fp16 would
// round twice). dgamma's products and sums are fp32, added in two stages through `partials` in an
// order fixed by the extents alone (layer_scale_partials.h): the same bits on every run. Only
// enqueues work on `stream` (no allocation, no host wait: a CUDA Graph can capture it); throws
// kiln::Error naming `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <string>

#include "kiln/dtype.h"
#include "ops/layer_scale/layer_scale_cpu.h"

namespace kiln::cuda {

// y = x * gamma (gamma broadcast over the rows).
void layer_scale_forward(DType dtype, const cpu::LayerScaleGeom& g, const void* x, const float* gamma, void* y,
                         cudaStream_t stream, const std::string& where);

// dx = dy * gamma where dx is given; dgamma[c] = sum over rows of dy * x. `partials` holds
// layer_scale_partial_chunks(g.rows) x g.c floats. Outputs must not alias inputs.
void layer_scale_backward(DType dtype, const cpu::LayerScaleGeom& g, const void* dy, const void* x,
                          const float* gamma, void* dx, float* dgamma, float* partials, cudaStream_t stream,
                          const std::string& where);

}  // namespace kiln::cuda
