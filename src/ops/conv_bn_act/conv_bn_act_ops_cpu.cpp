// BN_ACT_FWD / BN_ACT_BWD / BN_ACT_GATE_GRAD / BN_ACT_INF on the CPU: the bound tensors checked against x's (M, C)
// view, naming the layer and the tensor at fault, then bn_act_cpu.h in x's dtype.
#include "ops/common/cpu_op_checker.h"
#include "ops/conv_bn_act/bn_act_cpu.h"
#include "ops/conv_bn_act/bn_act_per_sample.h"
#include "ops/conv_bn_act/conv_bn_act_contract.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

using Checker = CpuOpChecker;

// x's rows and channels (its last dimension).
struct Rows {
  int64_t m, c;
};
Rows rows_of(const Checker& check, const TensorArg& x) {
  const Shape& s = x.shape();
  if (s.empty() || s.back() <= 0)
    fail("{} layer '{}': input '{}' has shape {}, with no channel dimension; the op needs (..., C)", check.op,
         check.layer, x.spec->name, shape_str(s));
  return {x.numel() / s.back(), s.back()};
}

void bn_act_fwd(const OpCall& call, const BnActForward<TensorArg>& a) {
  const Checker check{call, "BN_ACT_FWD"};
  const DType dt = check.activation_dtype(a.x);
  const Rows r = rows_of(check, a.x);
  check.like(a.y, a.x.shape(), dt, "output");
  for (const auto& [t, role] : {std::pair{&a.gamma, "gamma"}, {&a.beta, "beta"}, {&a.saved_mean, "saved_mean"},
                                {&a.saved_inv_std, "saved_inv_std"}, {&a.scale, "scale"}, {&a.shift, "shift"},
                                {&a.running_mean, "running_mean"}, {&a.running_var, "running_var"}})
    check.per_channel(*t, r.c, dt, role);
  check.batch_statistics(r.m);
  dispatch_float(dt, "BN_ACT_FWD", [&](auto zero) {
    using T = decltype(zero);
    cpu::BnActForwardTensors<T> t;
    t.x = a.x.as<T>(), t.gamma = a.gamma.as<T>(), t.beta = a.beta.as<T>(), t.y = a.y.as<T>();
    t.saved_mean = a.saved_mean.as<T>(), t.saved_inv_std = a.saved_inv_std.as<T>();
    t.scale = a.scale.as<T>(), t.shift = a.shift.as<T>();
    t.running_mean = a.running_mean.as<T>(), t.running_var = a.running_var.as<T>();
    cpu::bn_act_forward<T>(t, r.m, r.c, a.activation, a.alpha, a.eps, a.momentum);
  });
}

void bn_act_bwd(const OpCall& call, const BnActBackward<TensorArg>& a) {
  const Checker check{call, "BN_ACT_BWD"};
  const DType dt = check.activation_dtype(a.x);
  const Rows r = rows_of(check, a.x);
  check.like(a.dy, a.x.shape(), dt, "dy");
  check.like(a.dx, a.x.shape(), dt, "dx");
  for (const auto& [t, role] : {std::pair{&a.gamma, "gamma"}, {&a.saved_mean, "saved_mean"},
                                {&a.saved_inv_std, "saved_inv_std"}, {&a.scale, "scale"}, {&a.shift, "shift"},
                                {&a.dgamma, "dgamma"}, {&a.dbeta, "dbeta"}})
    check.per_channel(*t, r.c, dt, role);
  const int64_t samples = per_sample_terms(call, a);
  dispatch_float(dt, "BN_ACT_BWD", [&](auto zero) {
    using T = decltype(zero);
    cpu::BnActBackwardTensors<T> t;
    t.dy = a.dy.as<T>(), t.x = a.x.as<T>(), t.gamma = a.gamma.as<T>();
    t.saved_mean = a.saved_mean.as<T>(), t.saved_inv_std = a.saved_inv_std.as<T>();
    t.scale = a.scale.as<T>(), t.shift = a.shift.as<T>();
    t.dx = a.dx.as<T>(), t.dgamma = a.dgamma.as<T>(), t.dbeta = a.dbeta.as<T>();
    t.gate = a.gate.as<T>(), t.dy_pooled = a.dy_pooled.as<T>(), t.samples = samples;
    cpu::bn_act_backward<T>(t, r.m, r.c, a.activation, a.alpha);
  });
}

void bn_act_gate_grad(const OpCall& call, const BnActGateGrad<TensorArg>& a) {
  const Checker check{call, "BN_ACT_GATE_GRAD"};
  const DType dt = check.activation_dtype(a.x);
  const Rows r = rows_of(check, a.x);
  check.like(a.dy, a.x.shape(), dt, "dy");
  check.per_channel(a.scale, r.c, dt, "scale");
  check.per_channel(a.shift, r.c, dt, "shift");
  const int64_t n = check_per_sample(call, a.db, a.x, "gate gradient");
  dispatch_float(dt, "BN_ACT_GATE_GRAD", [&](auto zero) {
    using T = decltype(zero);
    cpu::bn_act_gate_gradient<T>(a.dy.as<T>(), a.x.as<T>(), a.scale.as<T>(), a.shift.as<T>(), n, r.m, r.c,
                                 a.activation, a.alpha, a.db.as<T>());
  });
}

void bn_act_inf(const OpCall& call, const BnActInference<TensorArg>& a) {
  const Checker check{call, "BN_ACT_INF"};
  const DType dt = check.activation_dtype(a.x);
  const Rows r = rows_of(check, a.x);
  check.like(a.y, a.x.shape(), dt, "output");
  for (const auto& [t, role] : {std::pair{&a.gamma, "gamma"}, {&a.beta, "beta"}, {&a.running_mean, "running_mean"},
                                {&a.running_var, "running_var"}})
    check.per_channel(*t, r.c, dt, role);
  dispatch_float(dt, "BN_ACT_INF", [&](auto zero) {
    using T = decltype(zero);
    cpu::bn_act_inference<T>(a.x.as<T>(), a.gamma.as<T>(), a.beta.as<T>(), a.running_mean.as<T>(),
                             a.running_var.as<T>(), r.m, r.c, a.activation, a.alpha, a.eps, a.y.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable conv_bn_act_cpu_ops{Device::CPU,
                                         {kernel<BnActForward, bn_act_fwd>(), kernel<BnActBackward, bn_act_bwd>(),
                                          kernel<BnActGateGrad, bn_act_gate_grad>(),
                                          kernel<BnActInference, bn_act_inf>()}};
}  // namespace ops

}  // namespace kiln
