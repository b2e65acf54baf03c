#pragma once
// BatchNorm's ops (PyTorch semantics: biased variance for normalizing, unbiased for the running
// variance, momentum the weight of the new batch).
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct BnForwardTrain {
  static constexpr OpKind kind = OpKind::BN_FWD_TRAIN;
  T x, gamma, beta;
  T y, saved_mean, saved_inv_std;
  T running_mean, running_var;  // updated in place
  double eps = 1e-5, momentum = 0.1;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("gamma", gamma), v.in("beta", beta);
    v.out("y", y), v.out("saved_mean", saved_mean), v.out("saved_inv_std", saved_inv_std);
    v.out("running_mean", running_mean), v.out("running_var", running_var);
    v.attr("eps", eps), v.attr("momentum", momentum);
  }
};

template <class T>
struct BnBackward {
  static constexpr OpKind kind = OpKind::BN_BWD;
  T dy, x, gamma, saved_mean, saved_inv_std;
  T dx, dgamma, dbeta;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("gamma", gamma), v.in("saved_mean", saved_mean);
    v.in("saved_inv_std", saved_inv_std);
    v.out("dx", dx), v.out("dgamma", dgamma), v.out("dbeta", dbeta);
  }
};

template <class T>
struct BnInference {
  static constexpr OpKind kind = OpKind::BN_INF;
  T x, gamma, beta, running_mean, running_var, y;
  double eps = 1e-5;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("gamma", gamma), v.in("beta", beta), v.in("running_mean", running_mean);
    v.in("running_var", running_var), v.out("y", y);
    v.attr("eps", eps);
  }
};

}  // namespace kiln
