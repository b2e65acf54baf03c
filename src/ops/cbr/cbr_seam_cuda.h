#pragma once
// Fusion across layers (src/compile/seams.cpp) on the GPU. A seam's consumer (a CBR_FWD or
// CONV_BN_FWD given in_scale / in_shift, cbr_contract.h) convolves relu(x * in_scale + in_shift),
// x being the producing CBR's conv_out: bn_apply writes that applied input into the op's
// x_applied scratch, then the convolution with statistics runs on it (conv_stats_cuda.h), in every
// dtype. The consumer's wgrad writes the applied input again (into its backward's scratch) and
// convolves it (conv_wgrad_cuda.h).
//
// Numbers: the applied input takes the producer's fp32 scale and shift with bn_apply's expression,
// as the program without seams does, and the producer's backward recomputes its ReLU mask with the
// same expression (batchnorm_cuda.h's ReluMask): the same bits as without seams. The GPU tests
// bound the step against float64 (cbr_seam_gpu_test.cpp).
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

// The input of a seam consumer's op, from its contract's tensors (CBR's and conv_bn's name them
// alike: x, the producer's conv_out; in_scale, in_shift; x_applied).
template <class OpArgs>
SeamInput seam_input_of(const OpArgs& a) {
  return {a.x.data, a.in_scale.template as<float>(), a.in_shift.template as<float>(), a.x_applied.data};
}

// Prepares the convolution with statistics of the applied input (prepare_conv_stats, timing on
// the op's own tensors, which it overwrites) and returns the workspace bytes run_seam_conv_stats
// needs besides the sum kernel's (channel_sums_workspace_bytes). Not under CUDA Graph capture.
size_t prepare_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                               const std::string& where);
// Enqueues y = conv(relu(x * scale + shift), w) and sum / sqsum (fp32, p.k each) of y on `stream`.
void run_seam_conv_stats(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* w, void* y,
                         float* sum, float* sqsum, void* reduce, size_t reduce_bytes, void* workspace,
                         cudaStream_t stream, const std::string& where);

// Prepares the consumer's wgrad, dw = wgrad(relu(x * scale + shift), dy) (prepare_wgrad, timing on
// the op's own tensors: it overwrites dw), and returns the workspace bytes run_seam_wgrad needs.
// Not under CUDA Graph capture.
size_t prepare_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                          const std::string& where);
// Enqueues the consumer's wgrad on `stream`, the applied input written there first.
void run_seam_wgrad(CudaBackend& be, const ConvProblem& p, const SeamInput& in, const void* dy, void* dw,
                    void* workspace, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
