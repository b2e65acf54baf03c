#pragma once
// What both backends check before they normalize (layer_norm_ops_cpu.cpp, layer_norm_ops_cuda.cpp):
// a program whose tensors do not fit the op is an error naming the op, its layer and the tensor,
// never an access out of bounds. Returns the op's rows and channels.
#include <initializer_list>
#include <utility>

#include "ops/common/op_args.h"
#include "ops/layer_norm/layer_norm_contract.h"
#include "ops/layer_norm/layer_norm_cpu.h"
#include "ops/layer_norm/layer_norm_tiles.h"
#include "runtime/op_call.h"

namespace kiln::layer_norm_checks {

// The dtype of the parameters, their gradients and the saved statistics: double beside double
// activations, fp32 beside fp32, fp16 and bf16 (mixed precision reads the fp32 masters).
inline DType statistics_dtype(DType activations) { return activations == DType::F64 ? DType::F64 : DType::F32; }

// x is (..., C) with C >= 1: rows = its elements / C.
inline cpu::LayerNormGeom geometry(const OpCall& call, const TensorArg& x) {
  const Shape& s = x.shape();
  if (s.empty() || s.back() < 1)
    fail("{}: '{}' is {}; the layer norm needs rows of at least one channel (N,H,W,C or N,F); recompile the program",
         call.where(), x.spec->name, shape_str(s));
  return {x.numel() / s.back(), s.back()};
}

// A vector `t` in the statistics dtype of x's: one value per channel of x, or per row.
enum class Per { Channel, Row };
inline void expect_vector(const OpCall& call, const TensorArg& t, const char* role, Per per, const TensorArg& x) {
  const DType want = statistics_dtype(x.dtype());
  const int64_t n = per == Per::Channel ? x.shape().back() : x.numel() / x.shape().back();
  if (t.numel() != n || t.dtype() != want)
    fail("{}: {} '{}' is {} {} but must hold {} {} values (one per {} of '{}' {} {}); recompile the program",
         call.where(), role, t.spec->name, dtype_name(t.dtype()), shape_str(t.shape()), n, dtype_name(want),
         per == Per::Channel ? "channel" : "row", x.spec->name, dtype_name(x.dtype()), shape_str(x.shape()));
}

// An output `t` apart from every input (the kernels read the inputs while they write it).
inline void expect_apart(const OpCall& call, const TensorArg& t, const char* role,
                         std::initializer_list<const TensorArg*> inputs) {
  for (const TensorArg* in : inputs)
    if (overlaps(t, *in))
      fail("{}: {} '{}' shares memory with '{}'; the layer norm needs them apart (recompile the program)", call.where(),
           role, t.spec->name, in->spec->name);
}

inline cpu::LayerNormGeom check_forward(const OpCall& call, const LayerNormForward<TensorArg>& f) {
  const cpu::LayerNormGeom g = geometry(call, f.x);
  expect_vector(call, f.weight, "weight", Per::Channel, f.x);
  expect_vector(call, f.bias, "bias", Per::Channel, f.x);
  expect_like(call, f.y, "output", f.x);
  expect_apart(call, f.y, "output", {&f.x, &f.weight, &f.bias});
  if (bool(f.mean) != bool(f.rstd))
    fail("{}: the op saves {} but not {}; it saves both statistics or neither (recompile the program)", call.where(),
         f.mean ? "the mean" : "rstd", f.mean ? "rstd" : "the mean");
  if (f.mean) {
    expect_vector(call, f.mean, "saved mean", Per::Row, f.x);
    expect_vector(call, f.rstd, "saved rstd", Per::Row, f.x);
    expect_apart(call, f.mean, "saved mean", {&f.x, &f.y, &f.rstd});
    expect_apart(call, f.rstd, "saved rstd", {&f.x, &f.y});
  }
  return g;
}

inline cpu::LayerNormGeom check_backward(const OpCall& call, const LayerNormBackward<TensorArg>& f) {
  const cpu::LayerNormGeom g = geometry(call, f.x);
  expect_like(call, f.dy, "output gradient", f.x);
  expect_vector(call, f.weight, "weight", Per::Channel, f.x);
  expect_vector(call, f.mean, "saved mean", Per::Row, f.x);
  expect_vector(call, f.rstd, "saved rstd", Per::Row, f.x);
  if (!f.dx && !f.dweight && !f.dbias)
    fail("{}: no gradient is wanted, so the op should not exist; recompile the program", call.where());
  const std::initializer_list<const TensorArg*> inputs = {&f.dy, &f.x, &f.weight, &f.mean, &f.rstd};
  if (f.dx) {
    expect_like(call, f.dx, "input gradient", f.x);
    expect_apart(call, f.dx, "input gradient", inputs);
  }
  for (const auto& [t, role] : {std::pair{&f.dweight, "weight gradient"}, std::pair{&f.dbias, "bias gradient"}}) {
    if (!*t) continue;
    expect_vector(call, *t, role, Per::Channel, f.x);
    expect_apart(call, *t, role, inputs);
    expect_apart(call, *t, role, {&f.dx});
  }
  if (f.dweight && f.dbias && overlaps(f.dweight, f.dbias))
    fail("{}: the weight and bias gradients share memory; recompile the program", call.where());
  if (f.partials) {
    const int64_t want = layer_norm_tiles::partial_elements(g.rows, g.c);
    if (f.partials.numel() < want || f.partials.dtype() != DType::F32)
      fail("{}: workspace '{}' is {} {} but the sums of {} rows of {} channels need {} fp32 values; recompile the "
           "program",
           call.where(), f.partials.spec->name, dtype_name(f.partials.dtype()), shape_str(f.partials.shape()), g.rows,
           g.c, want);
    expect_apart(call, f.partials, "workspace", inputs);
    expect_apart(call, f.partials, "workspace", {&f.dx, &f.dweight, &f.dbias});
  }
  return g;
}

}  // namespace kiln::layer_norm_checks
