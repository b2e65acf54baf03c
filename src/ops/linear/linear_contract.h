#pragma once
// The fully connected layer: y = x w^T + b, x (N, F), w (O, F), b (O).
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct LinearForward {
  static constexpr OpKind kind = OpKind::LINEAR_FWD;
  T x, w, bias, y;  // bias: optional
  template <class V>
  void fields(V& v) { v.in("x", x), v.in("w", w), v.in("bias", bias, kOptional), v.out("y", y); }
};

template <class T>
struct LinearBackward {
  static constexpr OpKind kind = OpKind::LINEAR_BWD;
  T dy, x, w;
  T dx, dw, dbias;  // dx: absent for a first layer; dbias: absent without a bias
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("w", w);
    v.out("dx", dx, kOptional), v.out("dw", dw), v.out("dbias", dbias, kOptional);
  }
};

}  // namespace kiln
