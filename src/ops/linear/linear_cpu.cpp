// Linear kernels as three GEMMs, plus the LINEAR_FWD / LINEAR_BWD op wrappers.
#include "ops/linear/linear_cpu.h"

#include <string>

#include "ops/common/gemm_cpu.h"
#include "ops/common/op_args.h"
#include "runtime/op_call.h"

namespace kiln {
namespace cpu {

template <class T>
void linear_fwd(const LinearDims& d, const T* x, const T* w, const T* b, T* y) {
  if (b) fill_rows(d.n, d.out, b, y);
  gemm<T>(false, true, d.n, d.out, d.in, T(1), x, d.in, w, d.in, b ? T(1) : T(0), y, d.out);
}

template <class T>
void linear_bwd(const LinearDims& d, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db) {
  if (dx) gemm<T>(false, false, d.n, d.in, d.out, T(1), dy, d.out, w, d.in, T(0), dx, d.in);
  gemm<T>(true, false, d.out, d.in, d.n, T(1), dy, d.out, x, d.in, T(0), dw, d.in);
  if (db) sum_rows(d.n, d.out, dy, db);
}

template void linear_fwd<float>(const LinearDims&, const float*, const float*, const float*, float*);
template void linear_fwd<double>(const LinearDims&, const double*, const double*, const double*,
                                 double*);
template void linear_bwd<float>(const LinearDims&, const float*, const float*, const float*, float*,
                                float*, float*);
template void linear_bwd<double>(const LinearDims&, const double*, const double*, const double*,
                                 double*, double*, double*);

}  // namespace cpu

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

void linear_fwd_op(const OpCall& call) {
  const TensorArg& x = required(call, call.in, 0, "x");
  const TensorArg& w = required(call, call.in, 1, "w");
  const TensorArg b = optional_arg(call.in, 2);
  const TensorArg& y = required(call, call.out, 0, "y");
  const cpu::LinearDims d = dims(call, x, w);
  expect_shape(call, y, "output", {d.n, d.out});
  expect_shape(call, b, "bias", {d.out});
  for (auto [t, role] : {std::pair{&w, "weight"}, {&b, "bias"}, {&y, "output"}})
    expect_dtype(call, *t, role, x.dtype());
  dispatch_float(x.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::linear_fwd<T>(d, x.as<const T>(), w.as<const T>(), b.as<const T>(), y.as<T>());
  });
}

void linear_bwd_op(const OpCall& call) {
  const TensorArg& dy = required(call, call.in, 0, "dy");
  const TensorArg& x = required(call, call.in, 1, "x");
  const TensorArg& w = required(call, call.in, 2, "w");
  const TensorArg dx = optional_arg(call.out, 0);
  const TensorArg& dw = required(call, call.out, 1, "dw");
  const TensorArg db = optional_arg(call.out, 2);
  const cpu::LinearDims d = dims(call, x, w);
  expect_shape(call, dy, "output gradient", {d.n, d.out});
  expect_shape(call, dx, "input gradient", {d.n, d.in});
  expect_shape(call, dw, "weight gradient", {d.out, d.in});
  expect_shape(call, db, "bias gradient", {d.out});
  for (auto [t, role] : {std::pair{&x, "input"}, {&w, "weight"}, {&dx, "input gradient"},
                         {&dw, "weight gradient"}, {&db, "bias gradient"}})
    expect_dtype(call, *t, role, dy.dtype());
  dispatch_float(dy.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::linear_bwd<T>(d, dy.as<const T>(), x.as<const T>(), w.as<const T>(), dx.as<T>(),
                       dw.as<T>(), db.as<T>());
  });
}

}  // namespace

void register_linear_cpu() {
  register_op(Device::CPU, OpKind::LINEAR_FWD, linear_fwd_op);
  register_op(Device::CPU, OpKind::LINEAR_BWD, linear_bwd_op);
}

}  // namespace kiln
