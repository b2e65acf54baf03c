#pragma once
// The elementwise passes of BN_ACT on the GPU (conv_bn_act_contract.h): the statistics, finalize
// and BatchNorm's backward reduce and apply are batchnorm_cuda.h's; these two apply the activation
// with the BatchNorm's per-channel scale and shift. Tensors are NHWC viewed as m rows x c channels,
// F32, F16 or BF16, any c and alignment (16-byte aligned pointers take packed accesses); scale and
// shift are fp32 device arrays of length c; arithmetic in fp32 (the pre-activation as
// fmaf(x, scale, shift)), rounded once on store. `activation`: bn_act_functions.h's code. Both only
// enqueue work on `stream` and throw kiln::Error naming `where`.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// y = act(x * scale + shift). y may alias x.
void bn_act_apply(DType dtype, int activation, float alpha, const void* x, const float* scale, const float* shift,
                  int64_t m, int64_t c, void* y, cudaStream_t stream, const std::string& where);

// g = dy * act'(x * scale + shift), the pre-activation recomputed as bn_act_apply computed it. g
// may alias dy.
void bn_act_gradient(DType dtype, int activation, float alpha, const void* dy, const void* x, const float* scale,
                     const float* shift, int64_t m, int64_t c, void* g, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
