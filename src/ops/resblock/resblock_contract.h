#pragma once
// ResNet's block ends fused the CBR way (docs/cbr.md). A block ends with Conv -> BN (no ReLU), adds
// the shortcut (the block input, or a downsample Conv -> BN) and applies ReLU. Fused:
//   CONV_BN_FWD      the convolution with its batch statistics in the same pass and the
//                    finalize step; it writes conv_out and the BN's scale / shift, never the
//                    normalized tensor;
//   BN_ADD_RELU_FWD  one pass: y = relu(a * scale_a + shift_a + b'), b' = b * scale_b + shift_b
//                    when the shortcut is a Conv -> BN too, else b itself; and the 1-bit mask;
//   BN_ADD_RELU_BWD  g = dy * mask (never stored) -> BN backward of each branch from g, or
//                    db = g for an identity shortcut; where the block's output feeds two layers
//                    (the next block's body and shortcut), dy may come as their two gradients,
//                    added as it reads them instead of by a GRAD_SUM pass before it;
//   CONV_BN_BWD      wgrad and dgrad from the gradient of conv_out.
// Inference: CONV_BN_INF (the convolution and the scale / shift of the running statistics) and
// BN_ADD_RELU_INF (the apply without the mask).
#include "runtime/op_contract.h"

namespace kiln {

// A seam's consumer (fusion across layers, src/compile/seams.cpp) reads the producing CBR's conv_out
// as x with its in_scale / in_shift and convolves relu(x * in_scale + in_shift); x_applied is
// scratch of x's shape where the backend materializes that input (the CPU's). The same three in
// ConvBnBackward, whose wgrad convolves the applied input and whose dx is the gradient of the
// producer's (never written) BN+ReLU output.
template <class T>
struct ConvBnForward {
  static constexpr OpKind kind = OpKind::CONV_BN_FWD;
  T x, w, gamma, beta;
  T in_scale, in_shift;  // optional: a seam's consumer
  T conv_out, saved_mean, saved_inv_std, scale, shift;
  T running_mean, running_var;  // updated in place
  T x_applied;                  // optional scratch: a seam consumer's input, applied
  int stride = 1, padding = 0;
  double eps = 1e-5, momentum = 0.1;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("gamma", gamma), v.in("beta", beta);
    v.in("in_scale", in_scale, kOptional), v.in("in_shift", in_shift, kOptional);
    v.out("conv_out", conv_out), v.out("saved_mean", saved_mean), v.out("saved_inv_std", saved_inv_std);
    v.out("scale", scale), v.out("shift", shift);
    v.out("running_mean", running_mean), v.out("running_var", running_var);
    v.out("x_applied", x_applied, kOptional);
    v.attr("stride", stride), v.attr("padding", padding), v.attr("eps", eps), v.attr("momentum", momentum);
  }
};

// The running statistics' scale and shift, and the convolution.
template <class T>
struct ConvBnInference {
  static constexpr OpKind kind = OpKind::CONV_BN_INF;
  T x, w, gamma, beta, running_mean, running_var;
  T conv_out, scale, shift;
  int stride = 1, padding = 0;
  double eps = 1e-5;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("gamma", gamma), v.in("beta", beta);
    v.in("running_mean", running_mean), v.in("running_var", running_var);
    v.out("conv_out", conv_out), v.out("scale", scale), v.out("shift", shift);
    v.attr("stride", stride), v.attr("padding", padding), v.attr("eps", eps);
  }
};

// dconv is the gradient of conv_out (BN_ADD_RELU_BWD's da or db). dx is absent when the
// convolution reads the data batch.
template <class T>
struct ConvBnBackward {
  static constexpr OpKind kind = OpKind::CONV_BN_BWD;
  // wgrad may still run on the GPU's side stream beside the next op (Op::side_work_outlives).
  static constexpr bool side_work_outlives_op = true;
  T dconv, x, w;
  T in_scale, in_shift;  // optional: a seam's consumer
  T dw, dx;
  T x_applied;  // optional scratch: a seam consumer's input, applied
  int stride = 1, padding = 0;
  template <class V>
  void fields(V& v) {
    v.in("dconv", dconv), v.in("x", x), v.in("w", w);
    v.in("in_scale", in_scale, kOptional), v.in("in_shift", in_shift, kOptional);
    v.out("dw", dw), v.out("dx", dx, kOptional), v.out("x_applied", x_applied, kOptional);
    v.attr("stride", stride), v.attr("padding", padding);
  }
};

// BN_ADD_RELU_FWD, and BN_ADD_RELU_INF without the bit mask. scale_b / shift_b are present
// exactly when the shortcut b is a conv output to normalize.
template <class T>
struct BnAddRelu {
  static constexpr OpKind kind = OpKind::BN_ADD_RELU_FWD;
  T a, scale_a, shift_a, b, scale_b, shift_b;
  T y, bitmask;
  template <class V>
  void fields(V& v) {
    v.in("a", a), v.in("scale_a", scale_a), v.in("shift_a", shift_a), v.in("b", b);
    v.in("scale_b", scale_b, kOptional), v.in("shift_b", shift_b, kOptional);
    v.out("y", y), v.out("bitmask", bitmask, kOptional);
  }
};

// With g = dy * mask: da (and db when the shortcut is normalized) is BN's input gradient of g,
// with dgamma / dbeta of each branch; for an identity shortcut db = g. The b-branch tensors
// (b, gamma_b, saved statistics, dgamma_b, dbeta_b) are present together or not at all; db is
// absent when the shortcut is the data batch. dy2 (optional, only with db) is a second term of
// the output's gradient: then dy + dy2 replaces dy, each element added in the activations'
// dtype exactly as GRAD_SUM adds two terms, so a block end whose output feeds two layers computes
// the same values without the summed tensor: the same bits on the CPU; on the GPU the BN sums'
// fp32 terms may be added in another order (the two-term kernels' grids follow their own
// occupancy).
template <class T>
struct BnAddReluBackward {
  static constexpr OpKind kind = OpKind::BN_ADD_RELU_BWD;
  T dy, dy2, bitmask;
  T a, gamma_a, saved_mean_a, saved_inv_std_a;
  T b, gamma_b, saved_mean_b, saved_inv_std_b;
  T da, dgamma_a, dbeta_a, db, dgamma_b, dbeta_b;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("dy2", dy2, kOptional), v.in("bitmask", bitmask);
    v.in("a", a), v.in("gamma_a", gamma_a), v.in("saved_mean_a", saved_mean_a);
    v.in("saved_inv_std_a", saved_inv_std_a);
    v.in("b", b, kOptional), v.in("gamma_b", gamma_b, kOptional), v.in("saved_mean_b", saved_mean_b, kOptional);
    v.in("saved_inv_std_b", saved_inv_std_b, kOptional);
    v.out("da", da), v.out("dgamma_a", dgamma_a), v.out("dbeta_a", dbeta_a);
    v.out("db", db, kOptional), v.out("dgamma_b", dgamma_b, kOptional), v.out("dbeta_b", dbeta_b, kOptional);
  }
};

}  // namespace kiln
