#pragma once
// The checks of the loss scaler's state, shared by every op that reads it: the loss-scaling ops
// (loss_scale_ops_cpu.cpp, loss_scale_ops_cuda.cpp), the optimizers that unscale and skip, and
// the loss that scales its gradient; and the update rule's attributes.
#include <cmath>
#include <string>

#include "ops/loss_scale/loss_scale_contract.h"
#include "ops/loss_scale/loss_scale_rule.h"
#include "runtime/op_call.h"

namespace kiln::loss_scale {

// One element of `dtype`: the scale (F32) or a counter or flag (I32). `who` names the op.
inline void expect_scalar(const std::string& who, const TensorArg& t, const char* role, DType dtype) {
  if (t.numel() != 1 || t.dtype() != dtype)
    fail("{}: {} '{}' is {} {} but must be one {}; recompile the program", who, role, t.spec->name,
         dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(dtype));
}
inline void expect_scalar(const OpCall& call, const TensorArg& t, const char* role, DType dtype) {
  expect_scalar(call.where(), t, role, dtype);
}
// The same for state an op reads only with loss scaling on: absent, or one element of `dtype`.
inline void expect_optional_scalar(const std::string& who, const TensorArg& t, const char* role, DType dtype) {
  if (t) expect_scalar(who, t, role, dtype);
}

// The rule of an UPDATE_LOSS_SCALE op, its attributes checked (CompileOptions::loss_scaling says
// the ranges, as PyTorch's GradScaler).
inline Rule checked_rule(const OpCall& call, const UpdateLossScale<TensorArg>& a) {
  if (!(a.growth_factor > 1.f) || !std::isfinite(a.growth_factor))
    fail("{}: growth factor {} must be finite and > 1", call.where(), a.growth_factor);
  if (!(a.backoff_factor > 0.f && a.backoff_factor < 1.f))
    fail("{}: backoff factor {} must lie in (0, 1)", call.where(), a.backoff_factor);
  if (a.growth_interval < 1) fail("{}: growth interval {} must be >= 1", call.where(), a.growth_interval);
  expect_scalar(call, a.found, "flag", DType::I32);
  expect_scalar(call, a.scale, "scale", DType::F32);
  expect_scalar(call, a.clean_steps, "clean-step count", DType::I32);
  return Rule{a.growth_factor, a.backoff_factor, a.growth_interval};
}

}  // namespace kiln::loss_scale
