#pragma once
// Fusion across layers (src/compile/seams.cpp) on the GPU. A seam's consumer (a CBR_FWD or
// CONV_BN_FWD given in_scale / in_shift, cbr_contract.h) convolves relu(x * in_scale + in_shift),
// x being the producing CBR's conv_out, and takes the per-channel sums of its own output, in one of
// two ways chosen once per shape and graph cache at prepare, by timing (as conv_stats_cuda.h):
//   - prologue: cuDNN's fp16 graph that applies scale, shift and the ReLU as it loads x and
//     convolves with the statistics in its epilogue; the applied input is never written. cuDNN 9.19
//     builds it only with fp16 scale / shift (docs/cudnn-support.md), so fp16 programs only;
//   - written: bn_apply writes the applied input into the op's x_applied scratch, then the
//     convolution with statistics (conv_stats_cuda.h). Every dtype.
// CudaOptions::seam_input (KILN_SEAM_INPUT) picks: 0, the default, writes the applied input (the
// numbers of the program without seams); 1 takes the prologue wherever it builds; 2 times both at
// prepare and keeps the faster (the prologue where nothing is timed). The tests run every way.
// The consumer's wgrad convolves the applied input the same two ways (cuDNN's prologue wgrad graph,
// or the input written first), chosen the same way.
//
// Numbers: the written way applies the producer's fp32 scale and shift with bn_apply's expression,
// as the program without seams does, and the producer's backward recomputes its ReLU mask with the
// same expression (batchnorm_cuda.h's ReluMask): the same bits as without seams. The prologue graph
// takes fp16 copies of scale and shift, whose rounding (half an fp16 ulp of each) can exceed the
// applied value's own fp16 rounding where x * scale and shift nearly cancel; the recomputed mask
// may then differ from the prologue's ReLU for values within that rounding of 0. The GPU tests
// bound both ways against float64 (cbr_seam_gpu_test.cpp).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

// A seam consumer's input: p.c channels of the convolution problem it feeds.
struct SeamInput {
  const void* x = nullptr;        // the producer's conv_out, NHWC, the problem's io dtype
  const float* scale = nullptr;   // the producer's scale and shift, fp32, p.c each
  const float* shift = nullptr;
  void* applied = nullptr;        // scratch of x's shape (the op's x_applied)
};

// Chooses the way for `p` (timing on the op's own tensors, which it overwrites) and returns the
// workspace bytes run_seam_conv_stats needs besides the sum kernel's
// (channel_sums_workspace_bytes). Not under CUDA Graph capture.
size_t prepare_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                               const std::string& where);
// Enqueues y = conv(relu(x * scale + shift), w) and sum / sqsum (fp32, p.k each) of y on
// `stream`, the way chosen at prepare.
void run_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                         float* sum, float* sqsum, void* reduce, size_t reduce_bytes, void* workspace,
                         cudaStream_t stream, const std::string& where);

// Chooses the way of the consumer's wgrad, dw = wgrad(relu(x * scale + shift), dy), timing on the
// op's own tensors (it overwrites dw and the scratch), and returns the workspace bytes
// run_seam_wgrad needs. Not under CUDA Graph capture.
size_t prepare_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                          const std::string& where);
// Enqueues the consumer's wgrad on `stream` (all of it: the written way writes the applied input
// there first), the way chosen at prepare.
void run_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                    void* workspace, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
