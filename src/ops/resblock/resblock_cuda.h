#pragma once
// ResNet's block ends on the GPU (ops/resblock/resblock_contract.h): the residual add + ReLU
// after both branches' BN, and its backward apply. Layout, dtypes, masks, determinism and errors as
// BatchNorm's kernels (ops/batchnorm/batchnorm_cuda.h), whose statistics and reductions the
// block ends use for each branch.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// --- Residual add + ReLU (ResNet's block end, ops/resblock/resblock_contract.h) ---
// v = a * scale_a + shift_a + b', with b' = b * scale_b + shift_b when scale_b is given (the
// shortcut is a conv output still to normalize) and b' = b when it is nullptr (identity
// shortcut); y = v > 0 ? v : 0, and bitmask (nullable: inference) gets "v > 0" (a NaN v gives
// y = 0 and a 0 bit, as bn_apply). a, b and y have the same dtype and (m, c) shape; y may alias
// a or b. scale_b and shift_b are given together or not at all.
void bn_add_relu_apply(DType dtype, const void* a, const float* scale_a, const float* shift_a,
                       const void* b, const float* scale_b, const float* shift_b, int64_t m,
                       int64_t c, void* y, uint8_t* bitmask, cudaStream_t stream,
                       const std::string& where);

// A residual block end's backward apply in one pass (resblock's BN_ADD_RELU_BWD): with
// g = dy * bitmask (never stored), da = BN's input gradient of g for branch a (as
// bn_backward_apply over all m rows) and db the same for branch b when branch_b is given (a
// normalized downsample shortcut), else db = g (an identity shortcut). Each branch's sums come
// from bn_backward_reduce over the same g. Reads dy, the mask, a (and b) once; da and db must
// not overlap each other, nor any input at another element. dy2 (nullable) is a second term of
// the gradient, added as bn_backward_reduce adds it.
struct BnBranch {
  const float *gamma, *saved_mean, *saved_inv_std, *sum_dy, *sum_dy_xhat;
};
void bn_add_relu_backward_apply(DType dtype, const void* dy, const void* dy2, const uint8_t* bitmask, const void* a,
                                const BnBranch& branch_a, const void* b, const BnBranch* branch_b, int64_t m,
                                int64_t c, void* da, void* db, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
