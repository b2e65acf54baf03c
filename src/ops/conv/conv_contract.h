#pragma once
// The convolution's ops: NHWC activations, KRSC filters (K, R, S, C / groups), zero padding, any
// window (core/conv_window.h: strides, the padding of each side, dilation, groups).
#include "core/conv_window.h"
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct ConvForward {
  static constexpr OpKind kind = OpKind::CONV_FWD;
  T x, w, bias, y;  // bias: optional, fp32 also in mixed precision (cuDNN's bias input)
  ConvWindow window;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("w", w), v.in("bias", bias, kOptional), v.out("y", y);
    window.attrs(v);
  }
};

template <class T>
struct ConvDgrad {
  static constexpr OpKind kind = OpKind::CONV_DGRAD;
  T dy, w, dx;
  ConvWindow window;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("w", w), v.out("dx", dx);
    window.attrs(v);
  }
};

template <class T>
struct ConvWgrad {
  static constexpr OpKind kind = OpKind::CONV_WGRAD;
  T dy, x, dw, dbias;  // dbias: optional
  ConvWindow window;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.out("dw", dw), v.out("dbias", dbias, kOptional);
    window.attrs(v);
  }
};

}  // namespace kiln
