#pragma once
// Fused optimizer updates over the whole parameter region (every parameter, gradient and state
// slot shares one layout). The learning rate and step count come with each step's scalars.
//
// With dynamic loss scaling (loss_scale_contract.h) the gradients arrive multiplied by the scale:
// the optional `loss_scale` (F32 [1]) is divided out of each gradient as it is read, and the
// optional `found_nonfinite` (I32 [1], FIND_NONFINITE's) skips the whole step when set:
// parameters and optimizer state stay as they were. Both are read where the kernel runs (device
// memory on the GPU), so the skip needs no host decision.
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct SgdUpdate {
  static constexpr OpKind kind = OpKind::SGD_UPDATE;
  T grads, params, momentum_buffer;  // momentum_buffer: absent when momentum is 0
  float momentum = 0.f, weight_decay = 0.f;
  bool nesterov = false;
  T loss_scale{}, found_nonfinite{};  // absent without loss scaling
  template <class V>
  void fields(V& v) {
    v.in("grads", grads), v.in("loss_scale", loss_scale, kOptional);
    v.in("found_nonfinite", found_nonfinite, kOptional);
    v.out("params", params), v.out("momentum_buffer", momentum_buffer, kOptional);
    v.attr("momentum", momentum), v.attr("weight_decay", weight_decay), v.attr("nesterov", nesterov);
  }
};

template <class T>
struct AdamWUpdate {
  static constexpr OpKind kind = OpKind::ADAMW_UPDATE;
  T grads, params, exp_avg, exp_avg_sq;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  T loss_scale{}, found_nonfinite{};  // absent without loss scaling
  template <class V>
  void fields(V& v) {
    v.in("grads", grads), v.in("loss_scale", loss_scale, kOptional);
    v.in("found_nonfinite", found_nonfinite, kOptional);
    v.out("params", params), v.out("exp_avg", exp_avg), v.out("exp_avg_sq", exp_avg_sq);
    v.attr("beta1", beta1), v.attr("beta2", beta2), v.attr("eps", eps), v.attr("weight_decay", weight_decay);
  }
};

}  // namespace kiln
