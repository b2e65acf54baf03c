#pragma once
// The math of every elementwise activation, once, for the CPU kernels (float, double) and the
// CUDA kernels (float; fp16/bf16 values are widened to float first). Each function is a struct
// with the value and the derivative at x; `a` is the layer's alpha (LeakyReLU's negative slope,
// ELU's alpha), unused by the others. Definitions as PyTorch's functionals of the same name.
//
// Adding an activation: a struct here and its line in activation_list.def (which the build turns
// into the enumerator of kiln::Activation); the kernels, names, alpha checks, tests and the
// PyTorch reference follow from the list. blueprint.activation(Activation::X) adds it to a model.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "core/host_device.h"
#include "kiln/layer_vocabulary.h"
#include "ops/activation/activation_exp.h"

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
  KILN_HOST_DEVICE static T value(T x, T a) { return x > T(0) ? x : a * (exp_of(x) - T(1)); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T a) { return x > T(0) ? T(1) : a * exp_of(x); }
};

struct Sigmoid {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return T(1) / (T(1) + exp_of(-x)); }
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
  template <class T>  // PyTorch's: 0 up to -3, 1 from 3 on (both ends included), x / 3 + 1/2 between
  KILN_HOST_DEVICE static T derivative(T x, T) {
    return x <= T(-3) ? T(0) : (x < T(3) ? x / T(3) + T(0.5) : T(1));
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

struct Mish {
  template <class T>  // log(1 + e^x), as log1p so small e^x keep their digits; e^x overflowing gives x
  KILN_HOST_DEVICE static T softplus(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return x * std::tanh(softplus(x)); }
  template <class T>  // PyTorch's: tanh(sp) + x * sigmoid(x) * (1 - tanh(sp)^2)
  KILN_HOST_DEVICE static T derivative(T x, T) {
    const T t = std::tanh(softplus(x));
    return t + x * Sigmoid::value(x, T(0)) * (T(1) - t * t);
  }
};

struct Hardsigmoid {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return ReLU6::value(x + T(3), T(0)) / T(6); }
  // PyTorch's: 1/6 strictly inside (-3, 3), 0 at and beyond both ends. Its 1/6 is float's in every
  // dtype (1.0f / 6.0f, 3.0e-8 above 1/6): torch.ops.aten.hardsigmoid_backward(1., 0.5) in float64
  // is 0.1666666716337204. With the exact 1/6 a float64 MobileNetV3's gradients came to 5e-9 of
  // PyTorch's, its SE layers' to 3e-8, against 1e-13 for every other float64 network.
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) { return x > T(-3) && x < T(3) ? T(1.0f / 6.0f) : T(0); }
};

// What the layer's alpha may be.
enum class AlphaRule : uint8_t { Unused, AtLeastZero, AboveZero };

struct Info {
  Activation kind;
  const char* name;       // kiln's name (activation_name)
  AlphaRule alpha;
  float default_alpha;    // PyTorch's default
  const char* torch;      // the same function in PyTorch, of x and a (bench/torch_activation_reference.py)
};

// Every activation, in the enum's order (activation_list.def).
inline constexpr Info kAll[] = {
#define KILN_ACTIVATION(E, N, R, A, T) {Activation::E, N, AlphaRule::R, A, T},
#include "ops/activation/activation_list.def"
#undef KILN_ACTIVATION
};
static_assert(std::size(kAll) == size_t(kActivationCount));
constexpr bool listed_in_enum_order() {
  for (size_t i = 0; i < std::size(kAll); ++i)
    if (kAll[i].kind != Activation(i)) return false;
  return true;
}
static_assert(listed_in_enum_order());

// The entry of `a` (an enumerator of kiln::Activation).
inline const Info& info(Activation a) { return kAll[size_t(a)]; }

// Calls f(Function{}) for the activation `a`.
template <class F>
KILN_HOST_DEVICE auto visit(Activation a, F&& f) {
  switch (a) {
#define KILN_ACTIVATION(E, N, R, A, T) \
  case Activation::E: return f(E{});
#include "ops/activation/activation_list.def"
#undef KILN_ACTIVATION
  }
  return f(SiLU{});  // unreachable for a valid enumerator
}

}  // namespace kiln::activation
