#pragma once
// The convolution's ops: NHWC activations, KRSC filters, square kernel, zero padding.
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct ConvForward {
  static constexpr OpKind kind = OpKind::CONV_FWD;
  T x, w, bias, y;  // bias: optional, fp32 also in mixed precision (cuDNN's bias input)
  int stride = 1, padding = 0;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("bias", bias, kOptional), v.out("y", y);
    v.attr("stride", stride), v.attr("padding", padding);
  }
};

template <class T>
struct ConvDgrad {
  static constexpr OpKind kind = OpKind::CONV_DGRAD;
  T dy, w, dx;
  int stride = 1, padding = 0;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("w", w), v.out("dx", dx);
    v.attr("stride", stride), v.attr("padding", padding);
  }
};

template <class T>
struct ConvWgrad {
  static constexpr OpKind kind = OpKind::CONV_WGRAD;
  T dy, x, dw, dbias;  // dbias: optional
  int stride = 1, padding = 0;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.out("dw", dw), v.out("dbias", dbias, kOptional);
    v.attr("stride", stride), v.attr("padding", padding);
  }
};

}  // namespace kiln
