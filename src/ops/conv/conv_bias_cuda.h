#pragma once
// The plain convolution's bias on the GPU (CONV_FWD's bias, CONV_WGRAD's dbias): y (or dy) is an
// NHWC tensor, viewed as rows = N*Ho*Wo rows of k channels, of the io dtype (F32, F16 or BF16);
// the bias and its gradient are fp32 vectors of k, also in mixed precision (as cuDNN's bias input).
// The forward adds the bias after cuDNN's convolution, a pass of its own: cuDNN's runtime-fusion
// engines would fuse it only for some dtypes and windows, and this pass runs for all of them.
// Every function only enqueues work on `stream` and throws kiln::Error naming `where` on bad
// arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// y[row, ch] = y[row, ch] + bias[ch], added in fp32 and rounded once to the io dtype.
void conv_add_bias(DType io, const float* bias, int64_t rows, int64_t k, void* y, cudaStream_t stream,
                   const std::string& where);

// Bytes of workspace conv_bias_grad needs for rows x k.
size_t conv_bias_grad_workspace_bytes(int64_t rows, int64_t k);

// dbias[ch] = sum over rows of dy[row, ch] (fp32, overwritten), with batch normalization's
// per-channel sums (batchnorm_cuda.h, channel_sums): fp32 partials added in a fixed order in
// fp64, so a run repeats its bits. `workspace` holds conv_bias_grad_workspace_bytes(rows, k).
void conv_bias_grad(DType io, const void* dy, int64_t rows, int64_t k, float* dbias, void* workspace,
                    size_t workspace_bytes, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
