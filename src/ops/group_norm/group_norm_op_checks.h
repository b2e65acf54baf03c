#pragma once
// What both backends check before they normalize (group_norm_ops_cpu.cpp, group_norm_ops_cuda.cpp):
// a program whose tensors do not fit the op is an error naming the op, its layer and the tensor,
// never an access out of bounds. Returns the extents the kernels take.
#include <initializer_list>

#include "ops/common/op_args.h"
#include "ops/group_norm/group_norm_contract.h"
#include "ops/group_norm/group_norm_geometry.h"
#include "runtime/op_call.h"

namespace kiln::group_norm_checks {

// x is an (N,H,W,C) map or (N,C) features, every extent positive, whose channels `groups` divides.
inline GroupNormGeom geometry(const OpCall& call, const TensorArg& x, int groups) {
  const Shape& s = x.shape();
  const bool ranked = s.size() == 4 || s.size() == 2;
  if (!ranked || groups < 1 || x.numel() <= 0 || s.back() % groups != 0)
    fail("{}: '{}' is {} with {} groups; group normalization needs an (N,H,W,C) map or (N,C) features, not "
         "empty, whose channels the groups divide; recompile the program",
         call.where(), x.spec->name, shape_str(s), groups);
  return {s[0], s.size() == 4 ? s[1] * s[2] : 1, s.back(), groups};
}

// weight, bias, the statistics and the parameters' gradients are in the program's parameter dtype:
// fp64 beside fp64 activations, else fp32 (the masters beside fp16/bf16).
inline DType parameter_dtype(DType activations) { return activations == DType::F64 ? DType::F64 : DType::F32; }

inline void expect_vector(const OpCall& call, const TensorArg& t, const char* role, int64_t count, DType dtype) {
  if (t.numel() != count || t.dtype() != dtype)
    fail("{}: {} '{}' is {} {} but must hold {} {} values; recompile the program", call.where(), role, t.spec->name,
         dtype_name(t.dtype()), shape_str(t.shape()), count, dtype_name(dtype));
}

inline void expect_apart(const OpCall& call, const TensorArg& out, const char* role,
                         std::initializer_list<const TensorArg*> others) {
  for (const TensorArg* other : others)
    if (overlaps(out, *other))
      fail("{}: {} '{}' shares memory with '{}'; the op needs them apart (recompile the program)", call.where(), role,
           out.spec->name, other->spec->name);
}

inline GroupNormGeom check_forward(const OpCall& call, const GroupNormForward<TensorArg>& f) {
  const GroupNormGeom g = geometry(call, f.x, f.groups);
  const DType p = parameter_dtype(f.x.dtype());
  expect_vector(call, f.weight, "weight", g.c, p);
  expect_vector(call, f.bias, "bias", g.c, p);
  expect_like(call, f.y, "output", f.x);
  expect_apart(call, f.y, "output", {&f.x, &f.weight, &f.bias});
  if (bool(f.mean) != bool(f.rstd))
    fail("{}: the op saves the mean without the rstd or the other way round; recompile the program", call.where());
  if (f.mean) {
    expect_vector(call, f.mean, "saved mean", g.statistics(), p);
    expect_vector(call, f.rstd, "saved rstd", g.statistics(), p);
    expect_apart(call, f.mean, "saved mean", {&f.x, &f.y, &f.rstd});
    expect_apart(call, f.rstd, "saved rstd", {&f.x, &f.y});
  }
  return g;
}

inline GroupNormGeom check_backward(const OpCall& call, const GroupNormBackward<TensorArg>& f) {
  const GroupNormGeom g = geometry(call, f.x, f.groups);
  const DType p = parameter_dtype(f.x.dtype());
  expect_like(call, f.dy, "output gradient", f.x);
  expect_vector(call, f.weight, "weight", g.c, p);
  expect_vector(call, f.mean, "saved mean", g.statistics(), p);
  expect_vector(call, f.rstd, "saved rstd", g.statistics(), p);
  expect_vector(call, f.dweight, "weight gradient", g.c, p);
  expect_vector(call, f.dbias, "bias gradient", g.c, p);
  const std::initializer_list<const TensorArg*> inputs = {&f.dy, &f.x, &f.weight, &f.mean, &f.rstd};
  if (f.dx) {
    expect_like(call, f.dx, "input gradient", f.x);
    expect_apart(call, f.dx, "input gradient", inputs);
  }
  expect_apart(call, f.dweight, "weight gradient", inputs);
  expect_apart(call, f.dbias, "bias gradient", inputs);
  expect_apart(call, f.dweight, "weight gradient", {&f.dbias, &f.dx});
  return g;
}

// The GPU's partial sums (group_norm_gpu::workspace): an fp32 tensor of at least the layout's
// floats, apart from every other tensor of the op.
inline void check_workspace(const OpCall& call, const TensorArg& workspace, const GroupNormGeom& g,
                            std::initializer_list<const TensorArg*> others) {
  const int64_t floats = group_norm_gpu::workspace(g).floats;
  if (!workspace || workspace.dtype() != DType::F32 || workspace.numel() < floats)
    fail("{}: the GPU kernels need an fp32 workspace of {} floats for n = {}, hw = {}, c = {}, got {}; recompile the "
         "program for the GPU",
         call.where(), floats, g.n, g.hw, g.c,
         workspace ? fmt::format("{} {}", dtype_name(workspace.dtype()), shape_str(workspace.shape())) : "none");
  expect_apart(call, workspace, "workspace", others);
}

}  // namespace kiln::group_norm_checks
