#pragma once
// The activation a conv_bn_act layer applies after its BatchNorm, as the ops carry it: one code,
// kReluCode for ReLU (a layer kind of its own, outside activation_list.def) or an enumerator of
// kiln::Activation. Host and device code visit it the same way, so the CPU and CUDA kernels apply
// the functions of activation_functions.h, PyTorch's definitions, and nothing of their own.
#include "core/host_device.h"
#include "ops/activation/activation_functions.h"

namespace kiln::bn_act {

inline constexpr int kReluCode = -1;

// ReLU in activation_functions.h's form. Its derivative at 0 is 0, as PyTorch's threshold_backward.
struct ReLU {
  template <class T>
  KILN_HOST_DEVICE static T value(T x, T) { return x > T(0) ? x : T(0); }
  template <class T>
  KILN_HOST_DEVICE static T derivative(T x, T) { return x > T(0) ? T(1) : T(0); }
};

// Calls f(Function{}) for the activation of `code`.
template <class F>
KILN_HOST_DEVICE auto visit(int code, F&& f) {
  if (code == kReluCode) return f(ReLU{});
  return activation::visit(static_cast<Activation>(code), static_cast<F&&>(f));
}

}  // namespace kiln::bn_act
