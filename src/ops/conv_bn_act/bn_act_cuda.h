#pragma once
// BN_ACT's passes on the GPU (conv_bn_act_contract.h): the statistics and finalize are
// batchnorm_cuda.h's; these apply the activation with the BatchNorm's per-channel scale and shift,
// and run the backward with the activation's derivative folded into BatchNorm's reduce and apply. Tensors are NHWC viewed as m rows x c channels,
// F32, F16 or BF16, any c and alignment (16-byte aligned pointers take packed accesses); scale and
// shift are fp32 device arrays of length c; arithmetic in fp32 (the pre-activation as
// fmaf(x, scale, shift)), rounded once on store. `activation`: bn_act_functions.h's code. All only
// enqueue work on `stream` and throw kiln::Error naming `where`.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// y = act(x * scale + shift). y may alias x.
void bn_act_apply(DType dtype, int activation, float alpha, const void* x, const float* scale, const float* shift,
                  int64_t m, int64_t c, void* y, cudaStream_t stream, const std::string& where);

// The backward of y = act(BatchNorm(x)) with the batch's statistics, in two passes over dy and x
// (a reduce, then an apply) that never store the gradient at the BatchNorm's output,
// g = dy * act'(x * scale + shift) (the pre-activation recomputed as bn_act_apply computed it, in
// fp32): dbeta = sum of g, dgamma = sum of g * xhat, dx = gamma * inv_std * (g - dbeta / m -
// xhat * dgamma / m), xhat = (x - saved_mean) * saved_inv_std. dgamma, dbeta: fp32 device arrays
// of length c. workspace: batchnorm_cuda.h's bn_backward_reduce_workspace_bytes(m, c). dx may
// alias dy or x. Deterministic as batchnorm_cuda.h's reductions.
// The per-sample terms of a squeeze-and-excitation block (conv_bn_act_contract.h), each nullable,
// x's dtype, N x C, rows_per_sample = m / N rows each: gate, by which dy is multiplied; dy_pooled,
// a global average pool's gradient, added as dy_pooled[row / rows_per_sample, c] / rows_per_sample.
struct BnActBackwardArgs {
  const void *dy, *x;
  const void *gate, *dy_pooled;
  int64_t rows_per_sample;
  const float *scale, *shift, *gamma, *saved_mean, *saved_inv_std;
  float *dgamma, *dbeta;
  void* dx;
};
void bn_act_backward(DType dtype, int activation, float alpha, const BnActBackwardArgs& a, int64_t m, int64_t c,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream, const std::string& where);

// db[i, ch] = sum over image i's hw rows of dy * y, y = act(x * scale + shift) rounded to the dtype
// as bn_act_apply stored it: a squeeze-and-excitation gate's gradient (BN_ACT_GATE_GRAD), summed in
// fp32 in an order fixed by the extents alone. x and dy: n x hw x c; db: n x c.
void bn_act_gate_gradient(DType dtype, int activation, float alpha, const void* dy, const void* x, const float* scale,
                          const float* shift, int64_t n, int64_t hw, int64_t c, void* db, cudaStream_t stream,
                          const std::string& where);

}  // namespace kiln::cuda
