#include "ops/optimizer/optimizer_cpu.h"

#include <cmath>

#include "runtime/op_call.h"

namespace kiln {
namespace cpu {

namespace {
// Below this many elements one thread finishes before a team would start.
constexpr int64_t kParallelMin = 1 << 15;
}  // namespace

template <class T>
void sgd_update(int64_t n, const T* grad, T* param, T* momentum_buf, const SgdHyper& h) {
  const T lr = static_cast<T>(h.lr), mom = static_cast<T>(h.momentum),
          wd = static_cast<T>(h.weight_decay);
  const bool use_buf = h.momentum != 0, decay = h.weight_decay != 0, nesterov = h.nesterov;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    T g = decay ? grad[i] + wd * param[i] : grad[i];
    if (use_buf) {
      const T buf = mom * momentum_buf[i] + g;
      momentum_buf[i] = buf;
      g = nesterov ? g + mom * buf : buf;
    }
    param[i] -= lr * g;
  }
}

template <class T>
void adamw_update(int64_t n, const T* grad, T* param, T* m, T* v, const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const T keep = static_cast<T>(1 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T one_minus_b1 = static_cast<T>(1 - h.beta1), one_minus_b2 = static_cast<T>(1 - h.beta2);
  const T step_size = static_cast<T>(h.lr / (1 - std::pow(h.beta1, t)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1 - std::pow(h.beta2, t)));
  const T eps = static_cast<T>(h.eps);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    const T mi = b1 * m[i] + one_minus_b1 * g;
    const T vi = b2 * v[i] + one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    param[i] = param[i] * keep - step_size * (mi / denom);
  }
}

template void sgd_update<float>(int64_t, const float*, float*, float*, const SgdHyper&);
template void sgd_update<double>(int64_t, const double*, double*, double*, const SgdHyper&);
template void adamw_update<float>(int64_t, const float*, float*, float*, float*, const AdamWHyper&);
template void adamw_update<double>(int64_t, const double*, double*, double*, double*,
                                   const AdamWHyper&);

}  // namespace cpu

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

const TensorArg& slot(const std::vector<TensorArg>& args, size_t i) {
  static const TensorArg absent;
  return i < args.size() ? args[i] : absent;
}

void check_lr(const char* op, double lr) {
  if (!std::isfinite(lr) || lr < 0)
    fail("{}: learning rate {} is invalid; it must be finite and >= 0 (check the schedule)", op,
         lr);
}

void sgd_op(const OpCall& call) {
  const OptimizerConfig& opt = call.program.options.optimizer;
  cpu::SgdHyper h;
  h.lr = call.scalars.lr, h.momentum = opt.momentum, h.weight_decay = opt.weight_decay;
  h.nesterov = opt.nesterov;
  check_lr("SGD_UPDATE", h.lr);
  if (!(h.momentum >= 0) || !(h.weight_decay >= 0))
    fail("SGD_UPDATE: momentum ({}) and weight_decay ({}) must be >= 0; fix the optimizer options",
         h.momentum, h.weight_decay);
  if (h.nesterov && h.momentum == 0)
    fail(
        "SGD_UPDATE: nesterov needs a momentum > 0 (as in PyTorch); set momentum or drop nesterov");
  const TensorArg &grads = slot(call.in, 0), &params = slot(call.out, 0), &buf = slot(call.out, 1);
  if (h.momentum != 0)
    check_regions("SGD_UPDATE", {&grads, &params, &buf}, {"gradient", "parameter", "momentum"});
  else
    check_regions("SGD_UPDATE", {&grads, &params}, {"gradient", "parameter"});
  dispatch_float(params.dtype(), "SGD_UPDATE", [&](auto zero) {
    using T = decltype(zero);
    cpu::sgd_update<T>(params.numel(), grads.as<T>(), params.as<T>(),
                       h.momentum != 0 ? buf.as<T>() : nullptr, h);
  });
}

void adamw_op(const OpCall& call) {
  const OptimizerConfig& opt = call.program.options.optimizer;
  cpu::AdamWHyper h;
  h.lr = call.scalars.lr, h.beta1 = opt.beta1, h.beta2 = opt.beta2, h.eps = opt.eps;
  h.weight_decay = opt.weight_decay;
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
  const TensorArg &grads = slot(call.in, 0), &params = slot(call.out, 0), &m = slot(call.out, 1),
                  &v = slot(call.out, 2);
  check_regions("ADAMW_UPDATE", {&grads, &params, &m, &v},
                {"gradient", "parameter", "exp_avg", "exp_avg_sq"});
  dispatch_float(params.dtype(), "ADAMW_UPDATE", [&](auto zero) {
    using T = decltype(zero);
    cpu::adamw_update<T>(params.numel(), grads.as<T>(), params.as<T>(), m.as<T>(), v.as<T>(), h);
  });
}

}  // namespace

void register_optimizer_cpu() {
  register_op(Device::CPU, OpKind::SGD_UPDATE, sgd_op);
  register_op(Device::CPU, OpKind::ADAMW_UPDATE, adamw_op);
}

}  // namespace kiln
