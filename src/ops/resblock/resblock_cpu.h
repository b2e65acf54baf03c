#pragma once
// ResNet's fused block ends on the CPU (resblock_contract.h says what each op does). The
// statistics, finalize and backward passes are BatchNorm's pieces (batchnorm_cpu.h); what is
// new is the tail's apply, which adds the shortcut before the ReLU, and its backward, which
// routes the masked gradient to both branches without storing it.
//
// Activations are NHWC viewed as M rows x C channels; per-channel tensors have length C and the
// activations' dtype. Bit masks use CBR's layout (element i is bit i % 8 of byte i / 8).
#include <cstdint>

#include "ops/conv/conv_cpu.h"

namespace kiln::cpu {

// conv_out = conv(x, w); batch statistics of conv_out; saved_mean / saved_inv_std, scale =
// gamma * inv_std, shift = beta - mean * scale; running statistics updated as PyTorch does.
// Needs N * Ho * Wo > 1.
template <class T>
struct ConvBnForwardTensors {
  const T *x = nullptr, *w = nullptr, *gamma = nullptr, *beta = nullptr;
  T *conv_out = nullptr, *saved_mean = nullptr, *saved_inv_std = nullptr, *scale = nullptr, *shift = nullptr;
  T *running_mean = nullptr, *running_var = nullptr;
};
template <class T>
void conv_bn_forward(const ConvGeom& g, const ConvBnForwardTensors<T>& t, double eps, double momentum);

// Inference: scale / shift from the running statistics, and conv_out = conv(x, w).
template <class T>
void conv_bn_inference(const ConvGeom& g, const T* x, const T* w, const T* gamma, const T* beta,
                       const T* running_mean, const T* running_var, double eps, T* conv_out, T* scale, T* shift);

// dw = wgrad(dconv, x), then dx = dgrad(dconv, w) when dx is given (it may share x's storage).
template <class T>
void conv_bn_backward(const ConvGeom& g, const T* dconv, const T* x, const T* w, T* dw, T* dx);

// y = relu(a * scale_a + shift_a + b'), b' = b * scale_b + shift_b when scale_b is given, else b;
// bitmask (nullable) gets "pre-ReLU value > 0". y may alias a or b.
template <class T>
void bn_add_relu_forward(const T* a, const T* scale_a, const T* shift_a, const T* b, const T* scale_b,
                         const T* shift_b, int64_t M, int64_t C, T* y, uint8_t* bitmask);

// With g = dy where the mask bit is set, else 0: branch a's BN backward (da, dgamma_a, dbeta_a)
// and, when b is given, branch b's (db, dgamma_b, dbeta_b); for an identity shortcut (b null)
// db = g, or nothing when db is null too. dy2 (nullable): a second term of the gradient, so
// that g = (dy + dy2) where the bit is set, the sum added in T as GRAD_SUM adds it. Outputs must
// not share storage with dy or dy2.
template <class T>
struct BnAddReluBackwardTensors {
  const T *dy = nullptr, *dy2 = nullptr;
  const uint8_t* bitmask = nullptr;
  const T *a = nullptr, *gamma_a = nullptr, *saved_mean_a = nullptr, *saved_inv_std_a = nullptr;
  const T *b = nullptr, *gamma_b = nullptr, *saved_mean_b = nullptr, *saved_inv_std_b = nullptr;
  T *da = nullptr, *dgamma_a = nullptr, *dbeta_a = nullptr;
  T *db = nullptr, *dgamma_b = nullptr, *dbeta_b = nullptr;
};
template <class T>
void bn_add_relu_backward(const BnAddReluBackwardTensors<T>& t, int64_t M, int64_t C);

}  // namespace kiln::cpu
