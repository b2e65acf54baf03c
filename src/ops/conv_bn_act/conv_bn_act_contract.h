#pragma once
// The BatchNorm + activation op of a conv_bn_act layer (conv_bn_act_layer.cpp), the part after
// its convolution, which runs as CONV_FWD / CONV_WGRAD / CONV_DGRAD of any window. NHWC tensors
// viewed as rows x channels. Forward: batch statistics of conv_out, finalize (running statistics
// as PyTorch's), y = act(conv_out * scale + shift) in one pass; the BatchNorm's output is never
// stored. Its per-channel scale and shift are kept, with conv_out, so the backward recomputes the
// pre-activation and the activation's derivative there. `activation`: bn_act::kReluCode or an
// enumerator of kiln::Activation (bn_act_functions.h); `alpha` its parameter (LeakyReLU, ELU).
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct BnActForward {
  static constexpr OpKind kind = OpKind::BN_ACT_FWD;
  T x, gamma, beta;  // x: the convolution's output
  T y, saved_mean, saved_inv_std, scale, shift;
  T running_mean, running_var;  // updated in place
  int activation = -1;
  double alpha = 0, eps = 1e-5, momentum = 0.1;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("gamma", gamma), v.in("beta", beta);
    v.out("y", y), v.out("saved_mean", saved_mean), v.out("saved_inv_std", saved_inv_std);
    v.out("scale", scale), v.out("shift", shift);
    v.out("running_mean", running_mean), v.out("running_var", running_var);
    v.attr("activation", activation), v.attr("alpha", alpha), v.attr("eps", eps), v.attr("momentum", momentum);
  }
};

// dx = the gradient of x (the convolution's output) from dy, the gradient of y; it may share dy's
// storage. Where y feeds a squeeze-and-excitation block (conv_bn_act_layer.cpp), the block's
// backward passes over y's size fold in, each term formed as the kernels read dy, x being
// N x H x W x C and both optional tensors N x 1 x 1 x C:
//  - gate: dy is the gradient of the gated product y * gate[n, c], so y's gradient from it is
//    dy * gate[n, c] (what the multiply's backward would have written, rounded to x's dtype);
//  - dy_pooled: the gradient of a global average pool of y, which adds dy_pooled[n, c] / (H W) to
//    it (what the pool's backward would have written broadcast and a GRAD_SUM added).
template <class T>
struct BnActBackward {
  static constexpr OpKind kind = OpKind::BN_ACT_BWD;
  T dy, x, gamma, saved_mean, saved_inv_std, scale, shift, gate, dy_pooled;
  T dx, dgamma, dbeta;
  int activation = -1;
  double alpha = 0;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("gamma", gamma), v.in("saved_mean", saved_mean);
    v.in("saved_inv_std", saved_inv_std), v.in("scale", scale), v.in("shift", shift);
    v.in("gate", gate, kOptional), v.in("dy_pooled", dy_pooled, kOptional);
    v.out("dx", dx), v.out("dgamma", dgamma), v.out("dbeta", dbeta);
    v.attr("activation", activation), v.attr("alpha", alpha);
  }
};

// A squeeze-and-excitation gate's gradient from the layer's own tensors: with dy the gradient of
// y * gate[n, c] and y = act(x * scale + shift) recomputed (rounded to x's dtype, as the forward
// stored it), db[n, c] = sum over the image's rows of dy * y, the multiply's backward's sum, so the
// backward never reads y, and y need not be kept from the forward (conv_bn_act_layer.cpp).
template <class T>
struct BnActGateGrad {
  static constexpr OpKind kind = OpKind::BN_ACT_GATE_GRAD;
  T dy, x, scale, shift, db;
  int activation = -1;
  double alpha = 0;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("scale", scale), v.in("shift", shift), v.out("db", db);
    v.attr("activation", activation), v.attr("alpha", alpha);
  }
};

template <class T>
struct BnActInference {
  static constexpr OpKind kind = OpKind::BN_ACT_INF;
  T x, gamma, beta, running_mean, running_var, y;
  int activation = -1;
  double alpha = 0, eps = 1e-5;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("gamma", gamma), v.in("beta", beta), v.in("running_mean", running_mean);
    v.in("running_var", running_var), v.out("y", y);
    v.attr("activation", activation), v.attr("alpha", alpha), v.attr("eps", eps);
  }
};

}  // namespace kiln
