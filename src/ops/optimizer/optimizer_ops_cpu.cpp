// Op wrappers binding SGD_UPDATE, ADAMW_UPDATE, LARS_UPDATE and RMSPROP_UPDATE to the CPU optimizer
// kernels (optimizer_cpu.h, rmsprop_cpu.h): hyper-parameters from the op's contract, lr and step from the step scalars
// (LARS: its tensors from the parameter views, lars_op_args.h), and with loss scaling the skip of
// a step whose gradients hold inf/NaN and the scale to divide out.
#include <cmath>
#include <vector>

#include "ops/loss_scale/loss_scale_checks.h"
#include "ops/optimizer/lars_op_args.h"
#include "ops/optimizer/optimizer_contract.h"
#include "ops/optimizer/optimizer_cpu.h"
#include "ops/optimizer/rmsprop_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

// The regions must all be bound, as long as the parameter region (regions[1]) and of its dtype.
void check_regions(const char* op, const std::vector<const TensorArg*>& regions,
                   const std::vector<const char*>& roles) {
  for (size_t i = 0; i < regions.size(); ++i)
    if (!*regions[i])
      fail("{}: the {} region is not bound; the program's update op must name it", op, roles[i]);
  const TensorArg& params = *regions[1];
  for (size_t i = 0; i < regions.size(); ++i) {
    const TensorArg& r = *regions[i];
    if (r.numel() != params.numel())
      fail(
          "{}: {} region '{}' has {} elements but the parameter region has {}; recompile the "
          "program so all optimizer regions share the parameter layout",
          op, roles[i], r.spec->name, r.numel(), params.numel());
    if (r.dtype() != params.dtype())
      fail("{}: {} region '{}' is {} but the parameters are {}", op, roles[i], r.spec->name,
           dtype_name(r.dtype()), dtype_name(params.dtype()));
  }
}

// fp32/fp64 CPU programs have no compute copies: compile() allows fp16/bf16 on CUDA only.
void reject_compute_copies(const OpCall& call, const TensorArg& compute_grads, const TensorArg& compute_params) {
  if (compute_grads || compute_params)
    fail("{}: compute_grads/compute_params are bound, but mixed precision (fp16/bf16 compute copies) runs on "
         "CUDA only; compile the program for --device cuda, or in fp32 for the CPU",
         call.where());
}

void check_lr(const char* op, double lr) {
  if (!std::isfinite(lr) || lr < 0)
    fail("{}: learning rate {} is invalid; it must be finite and >= 0 (check the schedule)", op,
         lr);
}

// Loss scaling (optimizer_contract.h): true when FIND_NONFINITE flagged this step, which the
// update then skips; else `unscale` becomes 1 / the loss scale (1 without scaling).
bool skip_step(const char* op, const TensorArg& loss_scale, const TensorArg& found_nonfinite, double& unscale) {
  loss_scale::expect_optional_scalar(op, loss_scale, "loss scale", DType::F32);
  loss_scale::expect_optional_scalar(op, found_nonfinite, "non-finite flag", DType::I32);
  if (found_nonfinite && *found_nonfinite.as<int32_t>() != 0) return true;
  unscale = loss_scale ? 1.0 / double(*loss_scale.as<float>()) : 1.0;
  return false;
}

void sgd(const OpCall& call, const SgdUpdate<TensorArg>& a) {
  cpu::SgdHyper h;
  h.lr = call.scalars.lr, h.momentum = a.momentum, h.weight_decay = a.weight_decay;
  h.nesterov = a.nesterov;
  reject_compute_copies(call, a.compute_grads, a.compute_params);
  check_lr("SGD_UPDATE", h.lr);
  if (!(h.momentum >= 0) || !(h.weight_decay >= 0))
    fail("SGD_UPDATE: momentum ({}) and weight_decay ({}) must be >= 0; fix the optimizer options",
         h.momentum, h.weight_decay);
  if (h.nesterov && h.momentum == 0)
    fail(
        "SGD_UPDATE: nesterov needs a momentum > 0 (as in PyTorch); set momentum or drop nesterov");
  if (h.momentum != 0)
    check_regions("SGD_UPDATE", {&a.grads, &a.params, &a.momentum_buffer}, {"gradient", "parameter", "momentum"});
  else
    check_regions("SGD_UPDATE", {&a.grads, &a.params}, {"gradient", "parameter"});
  if (skip_step("SGD_UPDATE", a.loss_scale, a.found_nonfinite, h.unscale)) return;
  dispatch_float(a.params.dtype(), "SGD_UPDATE", [&](auto zero) {
    using T = decltype(zero);
    cpu::sgd_update<T>(a.params.numel(), a.grads.as<T>(), a.params.as<T>(),
                       h.momentum != 0 ? a.momentum_buffer.as<T>() : nullptr, h);
  });
}

void adamw(const OpCall& call, const AdamWUpdate<TensorArg>& a) {
  cpu::AdamWHyper h;
  h.lr = call.scalars.lr, h.beta1 = a.beta1, h.beta2 = a.beta2, h.eps = a.eps;
  h.weight_decay = a.weight_decay;
  reject_compute_copies(call, a.compute_grads, a.compute_params);
  check_lr("ADAMW_UPDATE", h.lr);
  if (call.scalars.step < 0)
    fail("ADAMW_UPDATE: step count {} is negative; pass the number of updates taken so far",
         call.scalars.step);
  h.step = call.scalars.step + 1;
  if (!(h.beta1 >= 0 && h.beta1 < 1) || !(h.beta2 >= 0 && h.beta2 < 1))
    fail("ADAMW_UPDATE: betas ({}, {}) must lie in [0, 1); fix the optimizer options", h.beta1,
         h.beta2);
  if (!(h.eps >= 0) || !(h.weight_decay >= 0))
    fail("ADAMW_UPDATE: eps ({}) and weight_decay ({}) must be >= 0; fix the optimizer options",
         h.eps, h.weight_decay);
  check_regions("ADAMW_UPDATE", {&a.grads, &a.params, &a.exp_avg, &a.exp_avg_sq},
                {"gradient", "parameter", "exp_avg", "exp_avg_sq"});
  if (skip_step("ADAMW_UPDATE", a.loss_scale, a.found_nonfinite, h.unscale)) return;
  dispatch_float(a.params.dtype(), "ADAMW_UPDATE", [&](auto zero) {
    using T = decltype(zero);
    cpu::adamw_update<T>(a.params.numel(), a.grads.as<T>(), a.params.as<T>(), a.exp_avg.as<T>(),
                         a.exp_avg_sq.as<T>(), h);
  });
}

void lars(const OpCall& call, const LarsUpdate<TensorArg>& a) {
  cpu::LarsHyper h;
  h.lr = call.scalars.lr, h.momentum = a.momentum, h.weight_decay = a.weight_decay;
  h.trust_coefficient = a.trust_coefficient;
  reject_compute_copies(call, a.compute_grads, a.compute_params);
  check_lr("LARS_UPDATE", h.lr);
  check_lars_hyper(call.where(), a);
  check_regions("LARS_UPDATE", {&a.grads, &a.params, &a.momentum_buffer}, {"gradient", "parameter", "momentum"});
  const std::vector<LarsSegment> segments = lars_segments(call, a);
  if (skip_step("LARS_UPDATE", a.loss_scale, a.found_nonfinite, h.unscale)) return;
  dispatch_float(a.params.dtype(), "LARS_UPDATE", [&](auto zero) {
    using T = decltype(zero);
    cpu::lars_update<T>(segments, a.grads.as<T>(), a.params.as<T>(), a.momentum_buffer.as<T>(), h);
  });
}

void rmsprop(const OpCall& call, const RmspropUpdate<TensorArg>& a) {
  cpu::RmspropHyper h;
  h.lr = call.scalars.lr, h.alpha = a.alpha, h.eps = a.eps, h.weight_decay = a.weight_decay;
  h.momentum = a.momentum, h.centered = a.centered;
  reject_compute_copies(call, a.compute_grads, a.compute_params);
  check_lr("RMSPROP_UPDATE", h.lr);
  const bool in_range = h.alpha >= 0 && h.alpha < 1 && h.momentum >= 0 && h.momentum < 1 && h.eps >= 0 &&
                        h.weight_decay >= 0;
  if (!in_range)
    fail("RMSPROP_UPDATE: alpha ({}) and momentum ({}) must lie in [0, 1), eps ({}) and weight_decay ({}) be >= 0; "
         "fix the optimizer options",
         h.alpha, h.momentum, h.eps, h.weight_decay);
  std::vector<const TensorArg*> regions = {&a.grads, &a.params, &a.square_avg};
  std::vector<const char*> roles = {"gradient", "parameter", "square_avg"};
  if (h.momentum != 0) regions.push_back(&a.momentum_buffer), roles.push_back("momentum");
  if (h.centered) regions.push_back(&a.grad_avg), roles.push_back("grad_avg");
  check_regions("RMSPROP_UPDATE", regions, roles);
  if (skip_step("RMSPROP_UPDATE", a.loss_scale, a.found_nonfinite, h.unscale)) return;
  dispatch_float(a.params.dtype(), "RMSPROP_UPDATE", [&](auto zero) {
    using T = decltype(zero);
    cpu::rmsprop_update<T>(a.params.numel(), a.grads.as<T>(), a.params.as<T>(), a.square_avg.as<T>(),
                           h.momentum != 0 ? a.momentum_buffer.as<T>() : nullptr,
                           h.centered ? a.grad_avg.as<T>() : nullptr, h);
  });
}

}  // namespace

namespace ops {
extern const OpTable optimizer_cpu_ops{
    Device::CPU,
    {kernel<SgdUpdate, sgd>(), kernel<AdamWUpdate, adamw>(), kernel<LarsUpdate, lars>(),
     kernel<RmspropUpdate, rmsprop>()}};
}  // namespace ops

}  // namespace kiln
