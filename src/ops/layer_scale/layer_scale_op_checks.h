#pragma once
// What both backends check before they scale (layer_scale_ops_cpu.cpp, layer_scale_ops_cuda.cpp):
// a program whose tensors do not fit the op is an error naming the op, its layer and the tensor,
// never an access out of bounds. Returns the rows and channels (cpu::LayerScaleGeom, which the GPU
// takes too).
#include <initializer_list>

#include "ops/common/op_args.h"
#include "ops/layer_scale/layer_scale_contract.h"
#include "ops/layer_scale/layer_scale_cpu.h"
#include "ops/layer_scale/layer_scale_partials.h"
#include "runtime/op_call.h"

namespace kiln::layer_scale_checks {

// x is a map (N, H, W, C) or rows (N, C); gamma holds its C factors as (C, 1, 1) or (C), in the
// parameters' dtype: F64 in fp64 programs, F32 (the master) in every other.
inline cpu::LayerScaleGeom geometry(const OpCall& call, const TensorArg& x, const TensorArg& gamma) {
  const Shape& s = x.shape();
  if (s.size() != 4 && s.size() != 2)
    fail("{}: input '{}' is {}; the op scales the channels of a map (N, H, W, C) or of rows (N, C); recompile the "
         "program", call.where(), x.spec->name, shape_str(s));
  const int64_t c = s.back();
  const Shape& gs = gamma.shape();
  const bool per_channel = gs == Shape{c, 1, 1} || gs == Shape{c};
  const DType want = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  if (!per_channel || gamma.dtype() != want)
    fail("{}: scale '{}' is {} {} but input '{}' ({} {}) needs {} {} or {}; recompile the program", call.where(),
         gamma.spec->name, dtype_name(gamma.dtype()), shape_str(gs), x.spec->name, dtype_name(x.dtype()),
         shape_str(s), dtype_name(want), shape_str({c, 1, 1}), shape_str({c}));
  return {c == 0 ? 0 : x.numel() / c, c};
}

// A result `t` apart from every input in `inputs` (the memory plan must not have placed one over another).
inline void expect_apart(const OpCall& call, const TensorArg& t, const char* role,
                         std::initializer_list<const TensorArg*> inputs) {
  for (const TensorArg* in : inputs)
    if (overlaps(t, *in))
      fail("{}: {} '{}' shares memory with '{}'; the op needs them apart (recompile the program)", call.where(), role,
           t.spec->name, in->spec->name);
}

inline cpu::LayerScaleGeom check_forward(const OpCall& call, const LayerScaleForward<TensorArg>& f) {
  const cpu::LayerScaleGeom g = geometry(call, f.x, f.gamma);
  expect_like(call, f.y, "output", f.x);
  expect_apart(call, f.y, "output", {&f.x, &f.gamma});
  return g;
}

// `need_partials`: the GPU's two-stage sum reads its workspace, which must be
// (layer_scale_partial_chunks(rows), C) fp32.
inline cpu::LayerScaleGeom check_backward(const OpCall& call, const LayerScaleBackward<TensorArg>& f,
                                          bool need_partials) {
  const cpu::LayerScaleGeom g = geometry(call, f.x, f.gamma);
  expect_like(call, f.dy, "output gradient", f.x);
  if (f.dx) {
    expect_like(call, f.dx, "input gradient", f.x);
    expect_apart(call, f.dx, "input gradient", {&f.dy, &f.x, &f.gamma});
  }
  expect_like(call, f.dgamma, "scale gradient", f.gamma);
  expect_apart(call, f.dgamma, "scale gradient", {&f.dy, &f.x, &f.gamma, &f.dx});
  if (!need_partials) return g;
  const Shape want = {layer_scale_partial_chunks(g.rows), g.c};
  if (!f.partials || f.partials.shape() != want || f.partials.dtype() != DType::F32)
    fail("{}: the scale gradient's fp32 workspace must be {}, got {}; recompile the program for this device",
         call.where(), shape_str(want),
         f.partials ? fmt::format("'{}' {} {}", f.partials.spec->name, dtype_name(f.partials.dtype()),
                                  shape_str(f.partials.shape()))
                    : std::string("none"));
  expect_apart(call, f.partials, "workspace", {&f.dy, &f.x, &f.gamma, &f.dx, &f.dgamma});
  return g;
}

}  // namespace kiln::layer_scale_checks
