#pragma once
// The fused Conv + BatchNorm + ReLU operator (CBR.md): conv_out and the batch statistics are kept
// for backward, the ReLU mask packed 8 elements a byte (least significant bit first).
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct CbrForward {
  static constexpr OpKind kind = OpKind::CBR_FWD;
  T x, w, gamma, beta;
  T conv_out, y, saved_mean, saved_inv_std, bitmask;
  T running_mean, running_var;  // updated in place
  int stride = 1, padding = 0;
  float eps = 1e-5f, momentum = 0.1f;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("gamma", gamma), v.in("beta", beta);
    v.out("conv_out", conv_out), v.out("y", y), v.out("saved_mean", saved_mean);
    v.out("saved_inv_std", saved_inv_std), v.out("bitmask", bitmask);
    v.out("running_mean", running_mean), v.out("running_var", running_var);
    v.attr("stride", stride), v.attr("padding", padding), v.attr("eps", eps), v.attr("momentum", momentum);
  }
};

// CBR_BWD; the same contract as CBR_BWD_FIRST, the network's first layer, which has no dx.
template <class T>
struct CbrBackward {
  static constexpr OpKind kind = OpKind::CBR_BWD;
  // On the GPU wgrad (reading x and dconv, writing dw) may still run on the side stream when the
  // op returns, beside the next op (Op::side_work_outlives).
  static constexpr bool side_work_outlives_op = true;
  T dy, bitmask, conv_out, x, w, gamma, saved_mean, saved_inv_std;
  T dx, dw, dgamma, dbeta;
  T dconv;  // workspace: the gradient of conv_out
  int stride = 1, padding = 0;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("bitmask", bitmask), v.in("conv_out", conv_out), v.in("x", x), v.in("w", w);
    v.in("gamma", gamma), v.in("saved_mean", saved_mean), v.in("saved_inv_std", saved_inv_std);
    v.out("dx", dx, kOptional), v.out("dw", dw), v.out("dgamma", dgamma), v.out("dbeta", dbeta);
    v.out("dconv", dconv);
    v.attr("stride", stride), v.attr("padding", padding);
  }
};

template <class T>
struct CbrInference {
  static constexpr OpKind kind = OpKind::CBR_INF;
  T x, w, gamma, beta, running_mean, running_var, y;
  int stride = 1, padding = 0;
  float eps = 1e-5f;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("gamma", gamma), v.in("beta", beta);
    v.in("running_mean", running_mean), v.in("running_var", running_var), v.out("y", y);
    v.attr("stride", stride), v.attr("padding", padding), v.attr("eps", eps);
  }
};

}  // namespace kiln
