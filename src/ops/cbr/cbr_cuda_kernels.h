#pragma once
// The stages of the fused Conv -> BatchNorm -> ReLU operator (docs/cbr.md) that are not cuDNN
// graphs, on the GPU. Forward: cuDNN's conv + genstats gives conv_out and the per-channel
// sum / sum of squares, batchnorm_cuda.h's bn_finalize turns them into scale / shift, and
// cbr_apply_relu_bitmask below writes y and the bit mask in one pass. Backward: cbr_backward
// does ReLU + BN backward in two passes (reduce, then apply) without storing dy * mask, and
// cuDNN's wgrad / dgrad then consume dconv.
//
// Tensors are NHWC viewed as m rows x c channels (m = N * Ho * Wo), dtype F32, F16 or BF16;
// scale, shift, gamma, saved statistics, dgamma, dbeta are fp32 device arrays of length c.
// Bit mask: element i (flat index row * c + channel) is bit i % 8 of byte i / 8, ceil(m*c/8)
// bytes, 1 = passed the ReLU; bits past m*c are 0.
//
// Speed: the fast paths need c % 8 == 0 and 16-byte aligned activations (one mask byte and one
// or two 16-byte accesses per thread); other shapes are handled correctly by narrower paths.
// All calls are asynchronous on `stream` and throw kiln::Error naming `where`.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/dtype.h"
#include "ops/batchnorm/batchnorm_cuda.h"

namespace kiln::cuda {

// y = relu(conv_out * scale + shift) and its bit mask, in one pass. y may alias conv_out.
void cbr_apply_relu_bitmask(DType dtype, const void* conv_out, const float* scale,
                            const float* shift, int64_t m, int64_t c, void* y, uint8_t* bitmask,
                            cudaStream_t stream, const std::string& where);

// Workspace bytes cbr_backward needs for an (m, c) output (independent of the dtype).
size_t cbr_backward_workspace_bytes(int64_t m, int64_t c);

// ReLU + BN backward: with g = dy * mask and xhat = (conv_out - saved_mean) * saved_inv_std,
//   dbeta = sum of g, dgamma = sum of g * xhat (per channel, fp32, overwritten),
//   dconv = gamma * saved_inv_std * (g - dbeta / m - xhat * dgamma / m).
// Reads dy, conv_out and the mask twice, writes dconv once. dconv may alias dy or conv_out.
// The same as cbr_backward_reduce over all m rows, then cbr_backward_apply over all m rows.
void cbr_backward(DType dtype, const void* dy, const uint8_t* bitmask, const void* conv_out,
                  const float* gamma, const float* saved_mean, const float* saved_inv_std,
                  int64_t m, int64_t c, void* dconv, float* dgamma, float* dbeta, void* workspace,
                  size_t workspace_bytes, cudaStream_t stream, const std::string& where);

// The two passes of cbr_backward on their own, so that the second can run slice by slice. Their
// mask is the forward's bit mask, or, for a seam's producer (which writes none), recomputed from
// conv_out and the forward's scale / shift (ReluMask, batchnorm_cuda.h).
// Pass 1: dbeta and dgamma over all m rows.
void cbr_backward_reduce(DType dtype, const void* dy, ReluMask mask, const void* conv_out,
                         const float* saved_mean, const float* saved_inv_std, int64_t m, int64_t c,
                         float* dgamma, float* dbeta, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, const std::string& where);
// Pass 2 over rows [row0, row0 + rows) of an m-row tensor (pointers are those of the whole
// tensors): dconv of those rows from pass 1's dgamma and dbeta. row0 * c must be a multiple of 8
// so that the slice of the bit mask starts on a whole byte.
void cbr_backward_apply(DType dtype, const void* dy, ReluMask mask, const void* conv_out,
                        const float* gamma, const float* saved_mean, const float* saved_inv_std,
                        const float* dgamma, const float* dbeta, int64_t m, int64_t c, int64_t row0,
                        int64_t rows, void* dconv, cudaStream_t stream, const std::string& where);

// Expands a bit mask over numel elements into one byte per element (0 or 1): the unfused
// ReLU's mask format, for equivalence checks.
void cbr_bitmask_to_bytes(const uint8_t* bitmask, int64_t numel, uint8_t* bytes,
                          cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
