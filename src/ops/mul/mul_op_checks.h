#pragma once
// What both backends check before they multiply (mul_ops_cpu.cpp, mul_ops_cuda.cpp): a program
// whose tensors do not fit the op is an error naming the op, its layer and the tensor, never an
// access out of bounds. Returns the product's extents (cpu::MulGeom, which the GPU takes too).
#include <initializer_list>

#include "ops/common/op_args.h"
#include "ops/mul/mul_contract.h"
#include "ops/mul/mul_cpu.h"
#include "runtime/op_call.h"

namespace kiln::mul_checks {

// a is an NHWC map; b has its shape or is its per-channel gate N x 1 x 1 x C, of a's dtype.
inline cpu::MulGeom geometry(const OpCall& call, const TensorArg& a, const TensorArg& b) {
  const Shape& s = a.shape();
  const Shape& g = b.shape();
  const bool same = g == s;
  const bool gate = g.size() == 4 && s.size() == 4 && g[0] == s[0] && g[1] == 1 && g[2] == 1 && g[3] == s[3];
  if (s.size() != 4 || !(same || gate) || a.dtype() != b.dtype())
    fail("{}: '{}' is {} {} and '{}' {} {}; the product needs an NHWC map and a map of its shape or its "
         "per-channel gate (N x 1 x 1 x C) of one dtype; recompile the program",
         call.where(), a.spec->name, dtype_name(a.dtype()), shape_str(s), b.spec->name, dtype_name(b.dtype()),
         shape_str(g));
  return {s[0], s[1] * s[2], s[3], !same};
}

// A result (or gradient) `t` with the shape and dtype of `like`, apart from every input.
inline void expect_result(const OpCall& call, const TensorArg& t, const char* role, const TensorArg& like,
                          std::initializer_list<const TensorArg*> inputs) {
  expect_like(call, t, role, like);
  for (const TensorArg* in : inputs)
    if (overlaps(t, *in))
      fail("{}: {} '{}' shares memory with '{}'; the product needs them apart (recompile the program)", call.where(),
           role, t.spec->name, in->spec->name);
}

inline cpu::MulGeom check_forward(const OpCall& call, const MulForward<TensorArg>& f) {
  const cpu::MulGeom g = geometry(call, f.a, f.b);
  expect_result(call, f.y, "output", f.a, {&f.b});
  return g;
}

inline cpu::MulGeom check_backward(const OpCall& call, const MulBackward<TensorArg>& f) {
  const cpu::MulGeom g = geometry(call, f.a, f.b);
  expect_like(call, f.dy, "output gradient", f.a);
  if (!f.da && !f.db)
    fail("{}: neither input wants a gradient, so the op should not exist; recompile the program", call.where());
  if (f.da) expect_result(call, f.da, "gradient of a", f.a, {&f.dy, &f.a, &f.b});
  if (f.db) expect_result(call, f.db, "gradient of b", f.b, {&f.dy, &f.a, &f.b});
  if (f.da && f.db && overlaps(f.da, f.db))
    fail("{}: the two gradients '{}' and '{}' share memory; recompile the program", call.where(), f.da.spec->name,
         f.db.spec->name);
  return g;
}

}  // namespace kiln::mul_checks
