#pragma once
// Dynamic loss scaling (CompileOptions::loss_scaling; PyTorch's torch.amp.GradScaler): the loss
// op multiplies its gradient by the scale before rounding it (SoftmaxCrossEntropy::loss_scale),
// so the backward runs on scaled gradients; two ops around the fused optimizer update, which
// divides the scale out of the gradients and skips the step when FIND_NONFINITE found inf/NaN
// (optimizer_contract.h), keep the scale:
//   FIND_NONFINITE     first op of update: does any gradient hold inf or NaN? (the fp32 region
//                      and, in mixed precision, the fp16/bf16 gradients of the weights with
//                      compute copies, which the optimizer reads as they are)
//   UPDATE_LOSS_SCALE  last op of update: back off after a non-finite step, grow after
//                      growth_interval clean ones (loss_scale_rule.h)
// Their state is three one-element tensors of the program (Program::loss_scale,
// loss_scale_clean_steps, found_nonfinite), read and written on the device only, so a captured
// step needs no host decision.
#include <cstdint>

#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct FindNonFinite {
  static constexpr OpKind kind = OpKind::FIND_NONFINITE;
  T grads;  // the fp32 gradient region (absent when every parameter has a compute copy)
  T found;  // I32 [1]: 1 when any element of grads or compute_grads is inf or NaN, else 0
  T compute_grads{};  // mixed precision (CUDA): the F16/BF16 gradient region; else absent
  template <class V>
  void fields(V& v) {
    v.in("grads", grads, kOptional), v.in("compute_grads", compute_grads, kOptional), v.out("found", found);
  }
};

template <class T>
struct UpdateLossScale {
  static constexpr OpKind kind = OpKind::UPDATE_LOSS_SCALE;
  T found;        // I32 [1], FIND_NONFINITE's
  T scale;        // F32 [1]
  T clean_steps;  // I32 [1]: steps without inf/NaN since the scale last changed
  float growth_factor = 2.f, backoff_factor = 0.5f;
  int32_t growth_interval = 2000;
  template <class V>
  void fields(V& v) {
    v.in("found", found), v.out("scale", scale), v.out("clean_steps", clean_steps);
    v.attr("growth_factor", growth_factor), v.attr("backoff_factor", backoff_factor);
    v.attr("growth_interval", growth_interval);
  }
};

}  // namespace kiln
