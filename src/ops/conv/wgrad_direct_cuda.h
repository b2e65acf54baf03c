#pragma once
// A weight gradient for convolutions with few weights (a first layer's 1-3 input channels):
//   dW(k,r,s,c) = sum over n, ho, wo of dY(n,ho,wo,k) * X(n, ho*stride - pad + r, wo*stride - pad + s, c)
// One thread per weight sums a slice of the rows into a partial (fp32), reading dY from a tile
// its block loaded into shared memory; a second kernel, one block per weight, adds the partials
// in a fixed order, so the result is the same bits on every run. cuDNN's wgrad plans
// for such shapes are slow (the digits CNN's 1-channel first layer on an H200: 0.14 ms, the
// slowest kernel of its step); conv_wgrad_cuda.h picks between the two by timing both.
// Layouts as conv_shape_cuda.h.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/conv/conv_shape_cuda.h"

namespace kiln::cuda {

// Whether the kernel takes the problem: at most kWgradDirectMaxWeights weights (one block's
// threads) and rows that an int64 indexes.
constexpr int kWgradDirectMaxWeights = 1024;
bool wgrad_direct_supported(const ConvShape& p);
// The scratch it needs (the partials), 256-byte aligned.
size_t wgrad_direct_workspace_bytes(const ConvShape& p);
// Enqueues the two kernels on `stream`; `workspace` holds wgrad_direct_workspace_bytes(p).
void wgrad_direct(const ConvShape& p, const void* x, const void* dy, void* dw, void* workspace,
                  cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
