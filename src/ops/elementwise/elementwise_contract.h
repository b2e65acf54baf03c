#pragma once
// Elementwise ops: ReLU with a byte mask (the unfused path; CBR packs its mask in bits), dropout,
// stochastic depth (dropout of whole samples), the residual add, the sum of a fanned-out layer's
// gradients, and dtype casts.
#include <cstdint>
#include <vector>

#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct ReluForward {
  static constexpr OpKind kind = OpKind::RELU_FWD;
  T x, y, mask;  // mask: one byte per element, 1 where x > 0
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), v.out("mask", mask); }
};

template <class T>
struct ReluBackward {
  static constexpr OpKind kind = OpKind::RELU_BWD;
  T dy, mask, dx;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.in("mask", mask), v.out("dx", dx); }
};

template <class T>
struct ReluInference {
  static constexpr OpKind kind = OpKind::RELU_INF;
  T x, y;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y); }
};

// Inverted dropout: kept elements scaled by 1/(1-p); the mask is drawn from (seed, layer key,
// step). The layer key is a hash of the layer's name, so a layer draws the same masks whatever
// its position (fused and unfused programs alike).
template <class T>
struct DropoutForward {
  static constexpr OpKind kind = OpKind::DROPOUT_FWD;
  T x, y, mask;
  double p = 0;
  uint32_t layer_key = 0;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.out("y", y), v.out("mask", mask), v.attr("p", p), v.attr("layer_key", layer_key);
  }
};

template <class T>
struct DropoutBackward {
  static constexpr OpKind kind = OpKind::DROPOUT_BWD;
  T dy, mask, dx;
  double p = 0;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.in("mask", mask), v.out("dx", dx), v.attr("p", p); }
};

// Stochastic depth, torchvision's StochasticDepth(p, "row"): each sample (x's first dimension)
// keeps its whole input, scaled by 1/(1-p), or is zeroed. The mask holds one byte per sample,
// drawn as dropout draws its elements: sample n is kept when random_uniform(seed,
// cpu::dropout_stream(layer_key, step), n) >= p.
template <class T>
struct StochasticDepthForward {
  static constexpr OpKind kind = OpKind::STOCHASTIC_DEPTH_FWD;
  T x, y, mask;
  double p = 0;
  uint32_t layer_key = 0;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.out("y", y), v.out("mask", mask), v.attr("p", p), v.attr("layer_key", layer_key);
  }
};

// dx = dy * mask[n] / (1 - p) over sample n's elements.
template <class T>
struct StochasticDepthBackward {
  static constexpr OpKind kind = OpKind::STOCHASTIC_DEPTH_BWD;
  T dy, mask, dx;
  double p = 0;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.in("mask", mask), v.out("dx", dx), v.attr("p", p); }
};

template <class T>
struct Add {
  static constexpr OpKind kind = OpKind::ADD_FWD;
  T a, b, y;
  template <class V>
  void fields(V& v) { v.in("a", a), v.in("b", b), v.out("y", y); }
};

// The gradient of a layer whose output feeds several consumers: the sum of theirs.
template <class T>
struct GradSum {
  static constexpr OpKind kind = OpKind::GRAD_SUM;
  std::vector<T> terms;
  T sum;
  template <class V>
  void fields(V& v) { v.out("sum", sum), v.in_list("terms", terms); }
};

// The first min(numel) elements of src converted into dst's dtype.
template <class T>
struct Cast {
  static constexpr OpKind kind = OpKind::CAST;
  T src, dst;
  template <class V>
  void fields(V& v) { v.in("src", src), v.out("dst", dst); }
};

}  // namespace kiln
