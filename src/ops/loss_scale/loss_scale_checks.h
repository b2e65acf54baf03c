#pragma once
// The checks the CPU and CUDA loss-scaling ops share (loss_scale_ops_cpu.cpp,
// loss_scale_ops_cuda.cpp): the state tensors' dtypes and sizes and the update rule's attributes.
// The optimizers check the same state where they read it (optimizer_contract.h).
#include <cmath>

#include "ops/loss_scale/loss_scale_contract.h"
#include "ops/loss_scale/loss_scale_rule.h"
#include "runtime/op_call.h"

namespace kiln::loss_scale {

// One element of `dtype`: the scale (F32) or a counter or flag (I32).
inline void expect_scalar(const OpCall& call, const TensorArg& t, const char* role, DType dtype) {
  if (t.numel() != 1 || t.dtype() != dtype)
    fail("{}: {} '{}' is {} {} but must be one {}; recompile the program", call.where(), role, t.spec->name,
         dtype_name(t.dtype()), shape_str(t.shape()), dtype_name(dtype));
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
