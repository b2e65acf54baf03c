#pragma once
// The fused Conv + BatchNorm + ReLU operator (docs/cbr.md): conv_out and the batch statistics are
// kept for backward, the ReLU mask packed 8 elements a byte (least significant bit first).
#include "runtime/op_contract.h"

namespace kiln {

//
// Fusion across layers (a seam, src/compile/seams.cpp) uses the optional fields:
// - the producer of a seam writes no y and no bitmask but its BatchNorm's per-channel `scale` and
//   `shift` (y = relu(conv_out * scale + shift));
// - a consumer reads the producer's conv_out as x with `in_scale` and `in_shift`, and convolves
//   relu(x * in_scale + in_shift); `x_applied` is scratch of x's shape where a backend materializes
//   that input (the CPU's), absent where the convolution applies it as it loads x.
template <class T>
struct CbrForward {
  static constexpr OpKind kind = OpKind::CBR_FWD;
  T x, w, gamma, beta;
  T in_scale, in_shift;  // optional: a seam's consumer
  T conv_out, y, saved_mean, saved_inv_std, bitmask;
  T running_mean, running_var;  // updated in place
  T scale, shift, x_applied;    // optional: a seam's producer (scale, shift); scratch (x_applied)
  int stride = 1, padding = 0;
  double eps = 1e-5, momentum = 0.1;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("gamma", gamma), v.in("beta", beta);
    v.in("in_scale", in_scale, kOptional), v.in("in_shift", in_shift, kOptional);
    v.out("conv_out", conv_out), v.out("y", y, kOptional), v.out("saved_mean", saved_mean);
    v.out("saved_inv_std", saved_inv_std), v.out("bitmask", bitmask, kOptional);
    v.out("running_mean", running_mean), v.out("running_var", running_var);
    v.out("scale", scale, kOptional), v.out("shift", shift, kOptional), v.out("x_applied", x_applied, kOptional);
    v.attr("stride", stride), v.attr("padding", padding), v.attr("eps", eps), v.attr("momentum", momentum);
  }
};

// CBR_BWD; the same contract as CBR_BWD_FIRST, the network's first layer, which has no dx.
// In a seam: a producer has no bitmask and recomputes the ReLU mask as conv_out * scale + shift > 0;
// a consumer's x is the producer's conv_out, its wgrad convolves relu(x * in_scale + in_shift)
// (materialized in x_applied where the backend needs it), and dx is the gradient of the producer's
// BatchNorm + ReLU output.
template <class T>
struct CbrBackward {
  static constexpr OpKind kind = OpKind::CBR_BWD;
  // On the GPU wgrad (reading x and dconv, writing dw) may still run on the side stream when the
  // op returns, beside the next op (Op::side_work_outlives).
  static constexpr bool side_work_outlives_op = true;
  T dy, bitmask, conv_out, x, w, gamma, saved_mean, saved_inv_std;
  T scale, shift, in_scale, in_shift;  // optional: a seam's producer (scale, shift) or consumer (in_*)
  T dx, dw, dgamma, dbeta;
  T dconv;      // workspace: the gradient of conv_out
  T x_applied;  // optional scratch: a seam consumer's input, applied
  int stride = 1, padding = 0;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("bitmask", bitmask, kOptional), v.in("conv_out", conv_out), v.in("x", x), v.in("w", w);
    v.in("gamma", gamma), v.in("saved_mean", saved_mean), v.in("saved_inv_std", saved_inv_std);
    v.in("scale", scale, kOptional), v.in("shift", shift, kOptional);
    v.in("in_scale", in_scale, kOptional), v.in("in_shift", in_shift, kOptional);
    v.out("dx", dx, kOptional), v.out("dw", dw), v.out("dgamma", dgamma), v.out("dbeta", dbeta);
    v.out("dconv", dconv), v.out("x_applied", x_applied, kOptional);
    v.attr("stride", stride), v.attr("padding", padding);
  }
};

template <class T>
struct CbrInference {
  static constexpr OpKind kind = OpKind::CBR_INF;
  T x, w, gamma, beta, running_mean, running_var, y;
  int stride = 1, padding = 0;
  double eps = 1e-5;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("gamma", gamma), v.in("beta", beta);
    v.in("running_mean", running_mean), v.in("running_var", running_var), v.out("y", y);
    v.attr("stride", stride), v.attr("padding", padding), v.attr("eps", eps);
  }
};

}  // namespace kiln
