#pragma once
// The math of every elementwise activation, once, for the CPU kernels (float, double) and the
// CUDA kernels (float; fp16/bf16 values are widened to float first). Each function is a struct
// with the value and the derivative at x; `a` is the layer's alpha (LeakyReLU's negative slope,
// ELU's alpha), unused by the others. Definitions as PyTorch's functionals of the same name.
//
// Adding an activation: an enumerator in kiln::Activation and its DSL call (include/kiln/
// blueprint.h, src/model/blueprint.cpp), a struct here and its line in KILN_ACTIVATIONS.
#include <cmath>

#include "kiln/layer_vocabulary.h"

#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln::activation {

struct ReLU6 {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return x < T(0) ? T(0) : (x > T(6) ? T(6) : x); }
  template <class T>  // PyTorch's hardtanh backward: 1 strictly inside (0, 6)
  KILN_HOST_DEVICE static T derivative(T x, T) { return x > T(0) && x < T(6) ? T(1) : T(0); }
};

struct LeakyReLU {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T a) { return x > T(0) ? x : a * x; }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T a) { return x > T(0) ? T(1) : a; }
};

struct ELU {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T a) { return x > T(0) ? x : a * (std::exp(x) - T(1)); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T a) { return x > T(0) ? T(1) : a * std::exp(x); }
};

struct Sigmoid {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return T(1) / (T(1) + std::exp(-x)); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) {
    const T s = value(x, T(0));
    return s * (T(1) - s);
  }
};

struct SiLU {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return x * Sigmoid::value(x, T(0)); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) {
    const T s = Sigmoid::value(x, T(0));
    return s * (T(1) + x * (T(1) - s));
  }
};

struct Hardswish {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return x * ReLU6::value(x + T(3), T(0)) / T(6); }
  template <class T>  // PyTorch's: 0 up to -3, 1 from 3 on (both ends included), (2x + 3) / 6 between
  KILN_HOST_DEVICE static T derivative(T x, T) {
    return x <= T(-3) ? T(0) : (x < T(3) ? (T(2) * x + T(3)) / T(6) : T(1));
  }
};

struct GELU {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440))); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    const T pdf = T(0.39894228040143267794) * std::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
};

struct GELUTanh {
  template <class T>
  KILN_HOST_DEVICE static T inner(T x) { return T(0.79788456080286535588) * (x + T(0.044715) * x * x * x); }
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return T(0.5) * x * (T(1) + std::tanh(inner(x))); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) {
    const T t = std::tanh(inner(x));
    const T dinner = T(0.79788456080286535588) * (T(1) + T(3) * T(0.044715) * x * x);
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
  }
};

struct Tanh {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return std::tanh(x); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) {
    const T t = std::tanh(x);
    return T(1) - t * t;
  }
};

// X(enumerator, struct, name): every activation; kernels and names are generated from this list.
#define KILN_ACTIVATIONS(X)                   \
  X(ReLU6, ReLU6, "relu6")                    \
  X(LeakyReLU, LeakyReLU, "leaky_relu")       \
  X(ELU, ELU, "elu")                          \
  X(SiLU, SiLU, "silu")                       \
  X(Hardswish, Hardswish, "hardswish")        \
  X(GELU, GELU, "gelu")                       \
  X(GELUTanh, GELUTanh, "gelu_tanh")          \
  X(Sigmoid, Sigmoid, "sigmoid")              \
  X(Tanh, Tanh, "tanh")

// Calls f(Function{}) for the activation `a`.
template <class F>
KILN_HOST_DEVICE auto visit(Activation a, F&& f) {
  switch (a) {
#define KILN_ACTIVATION_CASE(E, S, N) \
  case Activation::E: return f(S{});
    KILN_ACTIVATIONS(KILN_ACTIVATION_CASE)
#undef KILN_ACTIVATION_CASE
  }
  return f(SiLU{});  // unreachable for a valid enumerator
}

}  // namespace kiln::activation
