// The LINEAR_FWD / LINEAR_BWD op wrappers: they validate the tensors an op was compiled with,
// then run the CPU kernels (linear_cpu.cpp) in the op's dtype.
#include <string>

#include "ops/common/op_args.h"
#include "ops/linear/linear_contract.h"
#include "ops/linear/linear_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void expect_shape(const OpCall& call, const TensorArg& t, const char* role, const Shape& want) {
  if (t && t.shape() != want)
    fail("layer '{}': {} '{}' has shape {} but the linear layer needs {}", layer_name(call), role,
         t.spec->name, shape_str(t.shape()), shape_str(want));
}

void expect_dtype(const OpCall& call, const TensorArg& t, const char* role, DType want) {
  if (t && t.dtype() != want)
    fail("layer '{}': {} '{}' is {} but the other linear tensors are {}; use one precision",
         layer_name(call), role, t.spec->name, dtype_name(t.dtype()), dtype_name(want));
}

// x must be (N, F) with F matching the weight's (O, F).
cpu::LinearDims dims(const OpCall& call, const TensorArg& x, const TensorArg& w) {
  if (x.shape().size() != 2)
    fail("layer '{}': input '{}' has shape {} but a linear layer takes (N, F); add a flatten "
         "layer before it",
         layer_name(call), x.spec->name, shape_str(x.shape()));
  if (w.shape().size() != 2 || w.shape()[1] != x.shape()[1])
    fail("layer '{}': weight '{}' has shape {} but the input {} needs (out_features, {})",
         layer_name(call), w.spec->name, shape_str(w.shape()), shape_str(x.shape()),
         x.shape()[1]);
  return {x.shape()[0], x.shape()[1], w.shape()[0]};
}

void linear_fwd(const OpCall& call, const LinearForward<TensorArg>& a) {
  const cpu::LinearDims d = dims(call, a.x, a.w);
  expect_shape(call, a.y, "output", {d.n, d.out});
  expect_shape(call, a.bias, "bias", {d.out});
  for (auto [t, role] : {std::pair{&a.w, "weight"}, {&a.bias, "bias"}, {&a.y, "output"}})
    expect_dtype(call, *t, role, a.x.dtype());
  dispatch_float(a.x.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::linear_fwd<T>(d, a.x.as<const T>(), a.w.as<const T>(), a.bias.as<const T>(), a.y.as<T>());
  });
}

void linear_bwd(const OpCall& call, const LinearBackward<TensorArg>& a) {
  const cpu::LinearDims d = dims(call, a.x, a.w);
  expect_shape(call, a.dy, "output gradient", {d.n, d.out});
  expect_shape(call, a.dx, "input gradient", {d.n, d.in});
  expect_shape(call, a.dw, "weight gradient", {d.out, d.in});
  expect_shape(call, a.dbias, "bias gradient", {d.out});
  for (auto [t, role] : {std::pair{&a.x, "input"}, {&a.w, "weight"}, {&a.dx, "input gradient"},
                         {&a.dw, "weight gradient"}, {&a.dbias, "bias gradient"}})
    expect_dtype(call, *t, role, a.dy.dtype());
  dispatch_float(a.dy.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::linear_bwd<T>(d, a.dy.as<const T>(), a.x.as<const T>(), a.w.as<const T>(), a.dx.as<T>(),
                       a.dw.as<T>(), a.dbias.as<T>());
  });
}

}  // namespace
}  // namespace kiln

namespace kiln::ops {
extern const OpTable linear_cpu_ops{Device::CPU,
                                    {kernel<LinearForward, linear_fwd>(), kernel<LinearBackward, linear_bwd>()}};
}  // namespace kiln::ops
