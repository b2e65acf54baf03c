#pragma once
// The elementwise activations (activation_functions.h): y = f(x), and dx = dy * f'(x) from the
// forward's input.
#include "kiln/layer_vocabulary.h"
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct ActivationForward {
  static constexpr OpKind kind = OpKind::ACTIVATION_FWD;
  T x, y;
  Activation function = Activation::SiLU;
  float alpha = 0.f;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), v.attr("function", function), v.attr("alpha", alpha); }
};

template <class T>
struct ActivationBackward {
  static constexpr OpKind kind = OpKind::ACTIVATION_BWD;
  T dy, x, dx;
  Activation function = Activation::SiLU;
  float alpha = 0.f;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.out("dx", dx), v.attr("function", function), v.attr("alpha", alpha);
  }
};

// Eval mode: the same function; a kind of its own so inference programs read as such.
template <class T>
struct ActivationInference {
  static constexpr OpKind kind = OpKind::ACTIVATION_INF;
  T x, y;
  Activation function = Activation::SiLU;
  float alpha = 0.f;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), v.attr("function", function), v.attr("alpha", alpha); }
};

}  // namespace kiln
