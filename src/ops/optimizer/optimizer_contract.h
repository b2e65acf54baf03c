#pragma once
// Fused optimizer updates over the whole parameter region (every parameter and state slot shares
// one layout). The learning rate and step count come with each step's scalars.
//
// Mixed precision (CUDA only): the parameters with fp16/bf16 compute copies are the first
// `compute_grads.numel()` elements of the region. Their gradients come from the optional
// `compute_grads` (F16/BF16), the others' from `grads`, which then holds only the rest (element
// i of the update reads grads[i - prefix]); the update also writes each new parameter of the
// prefix, rounded, into `compute_params` (same dtype and length), so no separate cast refreshes
// the copies. `grads` is absent when every parameter has a copy. The CPU backend rejects both.
//
// With dynamic loss scaling (loss_scale_contract.h) the gradients arrive multiplied by the scale:
// the optional `loss_scale` (F32 [1]) is divided out of each gradient as it is read, and the
// optional `found_nonfinite` (I32 [1], FIND_NONFINITE's) skips the whole step when set:
// parameters, their copies and optimizer state stay as they were. Both are read where the kernel
// runs (device memory on the GPU), so the skip needs no host decision.
#include <vector>

#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct SgdUpdate {
  static constexpr OpKind kind = OpKind::SGD_UPDATE;
  T grads, params, momentum_buffer;  // momentum_buffer: absent when momentum is 0
  float momentum = 0.f, weight_decay = 0.f;
  bool nesterov = false;
  T loss_scale{}, found_nonfinite{};     // absent without loss scaling
  T compute_grads{}, compute_params{};   // absent without compute copies
  template <class V>
  void fields(V& v) {
    v.in("grads", grads, kOptional), v.in("compute_grads", compute_grads, kOptional);
    v.in("loss_scale", loss_scale, kOptional), v.in("found_nonfinite", found_nonfinite, kOptional);
    v.out("params", params), v.out("compute_params", compute_params, kOptional);
    v.out("momentum_buffer", momentum_buffer, kOptional);
    v.attr("momentum", momentum), v.attr("weight_decay", weight_decay), v.attr("nesterov", nesterov);
  }
};

template <class T>
struct AdamWUpdate {
  static constexpr OpKind kind = OpKind::ADAMW_UPDATE;
  T grads, params, exp_avg, exp_avg_sq;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.f;
  T loss_scale{}, found_nonfinite{};     // absent without loss scaling
  T compute_grads{}, compute_params{};   // absent without compute copies
  template <class V>
  void fields(V& v) {
    v.in("grads", grads, kOptional), v.in("compute_grads", compute_grads, kOptional);
    v.in("loss_scale", loss_scale, kOptional), v.in("found_nonfinite", found_nonfinite, kOptional);
    v.out("params", params), v.out("compute_params", compute_params, kOptional);
    v.out("exp_avg", exp_avg), v.out("exp_avg_sq", exp_avg_sq);
    v.attr("beta1", beta1), v.attr("beta2", beta2), v.attr("eps", eps), v.attr("weight_decay", weight_decay);
  }
};

// LARS (You et al., 2017, in the form of NVIDIA's and MLPerf's ResNet recipes): momentum SGD whose
// step for each parameter tensor is scaled by that tensor's trust ratio. For each tensor w of
// `tensors`, with its gradient g (the loss scale divided out), lr from the step scalars:
//   - skip_1d and w has one dimension (BatchNorm's scale and shift, biases): plain momentum SGD,
//     no weight decay and no trust ratio: v = momentum * v + g; w -= lr * v.
//   - else: trust = trust_coefficient * ||w|| / (||g|| + weight_decay * ||w||) when ||w|| > 0 and
//     ||g|| > 0, else 1; v = momentum * v + trust * (g + weight_decay * w); w -= lr * v.
// The norms are taken over the whole tensor before any of it changes, in the parameters' dtype
// (fp32; fp64 in fp64 programs), in a fixed order, so that a step repeats bit for bit. Elements of
// the region in no tensor (the alignment gaps between them) are left alone. The momentum buffer
// starts at zero (v = trust * d on the first step, as PyTorch's SGD) and is always bound.
//
// `tensors` are the parameter views (Program::params: TensorSpec::alias_of is `params`,
// alias_offset its bytes into it), in the order of their offsets; the kernels take each one's
// element range and number of dimensions from its spec (lars_op_args.h). The views are the record
// of the boundaries rather than attributes holding offsets: Op::attrs holds scalars only, and a
// copy of the offsets could disagree with the layout that the specs, and the memory plan made from
// them, give. Listed as inputs they also say what the op reads: every parameter, for its norm.
// (They cost no memory: views of the region, planned with it.)
template <class T>
struct LarsUpdate {
  static constexpr OpKind kind = OpKind::LARS_UPDATE;
  T grads, params, momentum_buffer;
  float momentum = 0.9f, weight_decay = 0.f, trust_coefficient = 0.001f;
  bool skip_1d = true;
  T loss_scale{}, found_nonfinite{};     // absent without loss scaling
  T compute_grads{}, compute_params{};   // absent without compute copies
  std::vector<T> tensors;                // the parameter views, one segment each
  template <class V>
  void fields(V& v) {
    v.in("grads", grads, kOptional), v.in("compute_grads", compute_grads, kOptional);
    v.in("loss_scale", loss_scale, kOptional), v.in("found_nonfinite", found_nonfinite, kOptional);
    v.in_list("tensors", tensors);
    v.out("params", params), v.out("compute_params", compute_params, kOptional);
    v.out("momentum_buffer", momentum_buffer);
    v.attr("momentum", momentum), v.attr("weight_decay", weight_decay);
    v.attr("trust_coefficient", trust_coefficient), v.attr("skip_1d", skip_1d);
  }
};

// RMSprop, as torch.optim.RMSprop: with g each gradient (the loss scale divided out) plus
// weight_decay * w (L2, PyTorch's weight_decay),
//   v = alpha * v + (1 - alpha) * g^2                                       (square_avg)
//   centered: a = alpha * a + (1 - alpha) * g, d = sqrt(v - a^2) + eps      (grad_avg)
//   else d = sqrt(v) + eps
//   momentum > 0: b = momentum * b + g / d, w -= lr * b                     (momentum_buffer)
//   else w -= lr * g / d
// eps is added after the square root (TensorFlow adds it inside). The state starts at zero.
// momentum_buffer is bound exactly when momentum > 0, grad_avg exactly when centered.
template <class T>
struct RmspropUpdate {
  static constexpr OpKind kind = OpKind::RMSPROP_UPDATE;
  T grads, params, square_avg;
  T momentum_buffer{}, grad_avg{};
  float alpha = 0.99f, eps = 1e-8f, weight_decay = 0.f, momentum = 0.f;
  bool centered = false;
  T loss_scale{}, found_nonfinite{};     // absent without loss scaling
  T compute_grads{}, compute_params{};   // absent without compute copies
  template <class V>
  void fields(V& v) {
    v.in("grads", grads, kOptional), v.in("compute_grads", compute_grads, kOptional);
    v.in("loss_scale", loss_scale, kOptional), v.in("found_nonfinite", found_nonfinite, kOptional);
    v.out("params", params), v.out("compute_params", compute_params, kOptional);
    v.out("square_avg", square_avg), v.out("momentum_buffer", momentum_buffer, kOptional);
    v.out("grad_avg", grad_avg, kOptional);
    v.attr("alpha", alpha), v.attr("eps", eps), v.attr("weight_decay", weight_decay);
    v.attr("momentum", momentum), v.attr("centered", centered);
  }
};

}  // namespace kiln
