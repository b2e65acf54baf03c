#pragma once
// The weight gradient of a convolution op on the GPU: cuDNN's tuned CONV_WGRAD plan, the direct
// kernel (wgrad_direct_cuda.h) or the few-channel implicit GEMM (few_channel_conv_cuda.h), where
// such a kernel takes the shape and, timed at prepare on the op's own tensors, beats the plan's
// tuned time. The choice is made once per shape for each graph cache (device and cuDNN options),
// at prepare, and every run takes it. Without tuning (no plan time to compare with) cuDNN's plan
// is kept.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

// Chooses for `p` (timing on x, dy and dw, which it overwrites) and returns the workspace bytes
// run_wgrad needs. Not under CUDA Graph capture.
size_t prepare_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw,
                     const std::string& where);
// Enqueues dW = wgrad(x, dy) on `stream` with the engine chosen at prepare.
void run_wgrad(CudaBackend& be, const ConvProblem& p, const void* x, const void* dy, void* dw, void* workspace,
               cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
