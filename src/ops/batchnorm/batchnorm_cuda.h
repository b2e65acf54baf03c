#pragma once
// Batch normalization kernels on the GPU, the pieces docs/cbr.md describes (statistics, finalize,
// apply, backward reduce/apply) exposed separately so that BN layers, the fused CBR op and
// ResNet's fused block ends (ops/resblock/) can run them in their own order. Semantics match the CPU kernels (batchnorm_cpu.h) and PyTorch:
// normalization uses the biased batch variance, running_var takes the unbiased one
// (count / (count - 1) * var), running = (1 - momentum) * running + momentum * batch.
//
// Layout: activations are NHWC, viewed as m rows x c channels (m = N*H*W; flat (N, F) tensors:
// m = N), of dtype F32, F16 or BF16. All arithmetic is fp32; BN parameters, statistics and
// scale/shift are fp32 device arrays of length c. Every function only enqueues work on
// `stream` (asynchronous) and throws kiln::Error naming `where` on bad arguments or CUDA errors.
//
// Determinism: reductions never use float atomics. Each block writes per-channel partial sums
// of its rows (accumulated in fp32 over at most a few thousand values per thread) to a
// caller-provided workspace, then a second kernel adds the partials in a fixed order in fp64.
// The tiling depends on (m, c), the pointers' alignment and the GPU model's occupancy, so
// results are bitwise identical run to run on the same kind of GPU. Workspace sizes from the
// *_workspace_bytes functions are upper bounds valid for any GPU and any pointer alignment.
//
// Masks: a bit mask holds element i (flat index row * c + channel) in bit i % 8 of byte i / 8,
// ceil(m*c/8) bytes, bits past m*c zero; a set bit means "passed the ReLU" (value > 0). A byte
// mask holds one byte per element, 1 where passed, else 0.
//
// Alignment: any pointer alignment is accepted. Fast paths need activation pointers aligned to
// 16 bytes (cudaMalloc gives 256) and c divisible by 8; otherwise narrower accesses are used.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

inline int64_t bitmask_bytes(int64_t elements) { return (elements + 7) / 8; }

// --- Statistics ---
// Bytes of workspace channel_sums needs for an (m, c) tensor (independent of the dtype).
size_t channel_sums_workspace_bytes(int64_t m, int64_t c);

// sum[ch] = sum over rows of x, sqsum[ch] = sum of x^2 (fp32 outputs, length c).
void channel_sums(DType dtype, const void* x, int64_t m, int64_t c, float* sum, float* sqsum,
                  void* workspace, size_t workspace_bytes, cudaStream_t stream,
                  const std::string& where);

// --- Finalize (docs/cbr.md forward stage 2; one tiny kernel, computed in fp64) ---
// mean = sum / count, var = max(sqsum / count - mean^2, 0), inv_std = 1 / sqrt(var + eps);
// writes saved_mean, saved_inv_std, scale = gamma * inv_std, shift = beta - mean * scale, and
// updates running_mean / running_var in place (skipped when both are nullptr). count > 1 for
// the unbiased variance; count == 1 uses the biased one (as the CPU kernel).
void bn_finalize(const float* sum, const float* sqsum, int64_t count, const float* gamma,
                 const float* beta, double eps, double momentum, float* running_mean,
                 float* running_var, float* saved_mean, float* saved_inv_std, float* scale,
                 float* shift, int64_t c, cudaStream_t stream, const std::string& where);

// Inference: scale = gamma / sqrt(running_var + eps), shift = beta - running_mean * scale.
void bn_inference_scale_shift(const float* gamma, const float* beta, const float* running_mean,
                              const float* running_var, double eps, int64_t c, float* scale,
                              float* shift, cudaStream_t stream, const std::string& where);

// --- Apply (docs/cbr.md forward stage 3) ---
// v = x * scale + shift per channel (fp32); y = relu ? (v > 0 ? v : 0) : v. bitmask and
// bytemask (nullable) get "v > 0" and require relu. y may alias x.
void bn_apply(DType dtype, const void* x, const float* scale, const float* shift, int64_t m,
              int64_t c, bool relu, void* y, uint8_t* bitmask, uint8_t* bytemask,
              cudaStream_t stream, const std::string& where);

// --- Backward ---
// The ReLU mask a backward applies to dy: a bit mask (the forward's), or recomputed as
// x * scale + shift > 0 from the x the backward reads anyway and the forward's per-channel fp32
// scale / shift (a seam's producer, which writes no mask: ops/cbr/cbr_contract.h), with the
// apply's own expression (fmaf, as bn_apply), so the bits are those bn_apply would have written.
// Neither: every element passes.
struct ReluMask {
  const uint8_t* bits = nullptr;
  const float* scale = nullptr;
  const float* shift = nullptr;
  ReluMask() = default;
  ReluMask(const uint8_t* bitmask) : bits(bitmask) {}  // NOLINT: a bit mask (or none) is a mask
  ReluMask(const float* scale_, const float* shift_) : scale(scale_), shift(shift_) {}
  bool recomputed() const { return scale != nullptr; }
  // The mask of the rows from flat element `first` on (a multiple of 8 for a bit mask).
  ReluMask from_element(int64_t first) const {
    ReluMask m = *this;
    if (bits) m.bits += first / 8;
    return m;
  }
};

// With g = dy (zero where the mask, if any, has a 0 bit: dy * mask is never stored) and
// xhat = (x - saved_mean) * saved_inv_std recomputed from x:
//   sum_dy[ch] = sum of g (= dbeta),  sum_dy_xhat[ch] = sum of g * xhat (= dgamma).
// dy2 (nullable; with a stored mask only) is a second term: dy + dy2 takes dy's place, each
// element added in fp32 and rounded to the dtype, as GRAD_SUM would have stored it.
size_t bn_backward_reduce_workspace_bytes(int64_t m, int64_t c);
void bn_backward_reduce(DType dtype, const void* dy, const void* dy2, ReluMask relu_mask, const void* x,
                        const float* saved_mean, const float* saved_inv_std, int64_t m, int64_t c,
                        float* sum_dy, float* sum_dy_xhat, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream, const std::string& where);

// A block end's two normalized branches (a projection shortcut) from one pass over dy (and dy2)
// and the bit mask: each branch's sums as bn_backward_reduce gives them for its own x, the sum of
// g computed once and written to both (the same bits). Its workspace holds three partial arrays.
struct BnReduceBranch {
  const void* x;
  const float *saved_mean, *saved_inv_std;
  float *sum_dy, *sum_dy_xhat;
};
size_t bn_backward_reduce_pair_workspace_bytes(int64_t m, int64_t c);
void bn_backward_reduce_pair(DType dtype, const void* dy, const void* dy2, const uint8_t* bitmask,
                             const BnReduceBranch& a, const BnReduceBranch& b, int64_t m, int64_t c, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream, const std::string& where);

// dx = gamma * inv_std * (g - sum_dy / count - xhat * sum_dy_xhat / count) over m rows, where
// count is how many values per channel the sums cover: m for a whole tensor, more when this call
// handles one slice of its rows (pointers then point at the slice; the bit mask slice must start
// on a whole byte). dx may alias dy or x.
void bn_backward_apply(DType dtype, const void* dy, ReluMask relu_mask, const void* x,
                       const float* gamma, const float* saved_mean, const float* saved_inv_std,
                       const float* sum_dy, const float* sum_dy_xhat, int64_t m, int64_t c,
                       int64_t count, void* dx, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
