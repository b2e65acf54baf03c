#pragma once
// The convolution of an op that batch normalization follows (CBR_FWD, CONV_BN_FWD), with the
// per-channel sum and sum of squares of its output:
//   - cuDNN's conv + genstats graph, where cuDNN has one (fp16);
//   - otherwise cuDNN's conv graph, then kiln's sum kernel over the output, or, where
//     CudaOptions::conv_stats asks for it, cuDNN's runtime-fused graph that sums the convolution's
//     results in its epilogue (CONV_FPROP_SUMS), if faster when timed at prepare;
//   - or kiln's CUTLASS convolution that sums its output in its epilogue (conv_sums_cutlass.h),
//     for 1x1 convolutions of stride 1 where it is faster when timed at prepare (unless
//     CudaOptions::cutlass is off);
//   - or the few-channel kernel (few_channel_conv_cuda.h), where it takes the shape and, timed at
//     prepare on the op's own tensors, is faster than the cuDNN way (conv and sums together).
// The choice is made once per shape for each graph cache, at prepare, and every run takes it.
// Both cuDNN graphs end their sums in atomics (two runs differ in the last bits); conv_stats 0 takes
// the sum kernel everywhere, for repeatable bits. Without tuning (KILN_CUDNN_TUNE=0: no timing at
// prepare) the first way is kept: genstats, else the reductions graph where conv_stats asks for it,
// else the sum kernel.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

// Chooses for `p` (timing on x, w and y, which it overwrites) and returns the workspace bytes
// run_conv_stats needs besides the sum kernel's (channel_sums_workspace_bytes). Not under CUDA
// Graph capture.
size_t prepare_conv_stats(CudaBackend& be, const ConvProblem& p, const void* x, const void* w, void* y,
                          const std::string& where);
// Enqueues y = conv(x, w) and sum / sqsum (fp32, p.k each) of y on `stream`, the way chosen at
// prepare. `reduce` holds channel_sums_workspace_bytes(rows of y, p.k); `workspace` what
// prepare_conv_stats returned.
void run_conv_stats(CudaBackend& be, const ConvProblem& p, const void* x, const void* w, void* y, float* sum,
                    float* sqsum, void* reduce, size_t reduce_bytes, void* workspace, cudaStream_t stream,
                    const std::string& where);

}  // namespace kiln::cuda
