#pragma once
// The fused Conv -> BatchNorm -> ReLU operator (CBR) on the CPU, per its functional spec (docs/cbr.md).
//
// Training forward runs three stages with one pass over memory each after the convolution:
//   1. per-channel sum and sum of squares of conv_out (accumulated in double),
//   2. finalize: batch mean / inverse std, scale and shift, running statistics,
//   3. y = relu(conv_out * scale + shift) together with a bit-packed ReLU mask.
// The BN output before the ReLU is never stored. Backward reads the bit mask, so dy * mask is
// never stored either; it writes only dL/d(conv_out) (dconv), then runs wgrad and dgrad.
//
// Running statistics follow PyTorch: momentum is the weight of the new batch, and running_var
// takes the unbiased batch variance (count / (count - 1) * var) while normalization uses the
// biased one.
//
// All reductions split rows into chunks fixed by the shape alone and add the chunks' partial
// sums in chunk order, so results are bitwise identical at any thread count.
#include <cstdint>

#include "ops/conv/conv_cpu.h"

namespace kiln::cpu {

// Bytes of a bit-packed mask over `numel` elements (element i is bit i % 8 of byte i / 8).
inline int64_t cbr_mask_bytes(int64_t numel) { return (numel + 7) / 8; }

// Expands a bit-packed mask into one byte per element (0 or 1): the unfused ReLU's mask format.
void cbr_mask_to_bytes(const uint8_t* bits, int64_t numel, uint8_t* bytes);

// Fusion across layers (a seam: cbr_contract.h): a producer gives scale and shift instead of y and
// bitmask; a consumer gives in_scale, in_shift and x_applied, scratch of x's shape that receives
// relu(x * in_scale + in_shift), the input it convolves. The values are those the unfused layers
// compute: the apply is the same expression.
template <class T>
struct CbrForwardTensors {
  const T* x = nullptr;        // (N, H, W, C)
  const T* w = nullptr;        // (K, R, S, C)
  const T* gamma = nullptr;    // (K)
  const T* beta = nullptr;     // (K)
  T* conv_out = nullptr;       // (N, Ho, Wo, K), kept for backward
  T* y = nullptr;              // (N, Ho, Wo, K); nullptr in a seam's producer
  T* saved_mean = nullptr;     // (K) batch mean
  T* saved_inv_std = nullptr;  // (K) 1 / sqrt(biased batch var + eps)
  uint8_t* bitmask = nullptr;  // cbr_mask_bytes(N * Ho * Wo * K) bytes; nullptr with y
  T* running_mean = nullptr;   // (K), updated in place
  T* running_var = nullptr;    // (K), updated in place
  T* scale = nullptr;          // (K): a seam's producer writes its BatchNorm's scale and shift
  T* shift = nullptr;
  const T* in_scale = nullptr;  // (C): a seam's consumer applies the producer's to x
  const T* in_shift = nullptr;
  T* x_applied = nullptr;  // (N, H, W, C) scratch, with in_scale
};

template <class T>
struct CbrBackwardTensors {
  const T* dy = nullptr;  // (N, Ho, Wo, K)
  const uint8_t* bitmask = nullptr;  // nullptr in a seam's producer: the mask comes from scale and shift
  const T* conv_out = nullptr;
  const T* x = nullptr;
  const T* w = nullptr;
  const T* gamma = nullptr;
  const T* saved_mean = nullptr;
  const T* saved_inv_std = nullptr;
  const T* scale = nullptr;  // (K), without bitmask
  const T* shift = nullptr;
  const T* in_scale = nullptr;  // (C), a seam's consumer
  const T* in_shift = nullptr;
  T* x_applied = nullptr;  // (N, H, W, C) scratch, with in_scale
  T* dx = nullptr;  // nullptr: first layer, dgrad is skipped. May share storage with x.
  T* dw = nullptr;
  T* dgamma = nullptr;
  T* dbeta = nullptr;
  T* dconv = nullptr;  // workspace of conv_out's shape: dL/d(conv_out)
};

// A seam consumer's input (of any op that convolves it, conv_bn's too): relu(x * in_scale + in_shift)
// written into x_applied, exactly as the producer's CBR would have written its output; x itself when
// in_scale is null (no seam).
template <class T>
const T* cbr_seam_input(const ConvGeom& g, const T* x, const T* in_scale, const T* in_shift, T* x_applied);

// Training forward. Needs N * Ho * Wo > 1 (the unbiased variance divides by count - 1).
template <class T>
void cbr_forward(const ConvGeom& g, const CbrForwardTensors<T>& t, double eps, double momentum);

// Backward: dgamma, dbeta, dconv, then dw (wgrad) and, if t.dx, dx (dgrad). wgrad runs before
// dgrad so that dx may overwrite x's storage.
template <class T>
void cbr_backward(const ConvGeom& g, const CbrBackwardTensors<T>& t);

// Inference with running statistics. y doubles as the conv output buffer.
template <class T>
void cbr_inference(const ConvGeom& g, const T* x, const T* w, const T* gamma, const T* beta,
                   const T* running_mean, const T* running_var, double eps, T* y);

}  // namespace kiln::cpu
