// Op wrappers binding CONV_FWD / CONV_DGRAD / CONV_WGRAD to the CPU conv kernels: they
// validate the tensors an op was compiled with, then dispatch on dtype.
#include <string>

#include "ops/conv/conv_cpu.h"
#include "ops/common/op_args.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

// The geometry comes from the input and filter shapes plus the layer's stride and padding.
cpu::ConvGeom geometry(const OpCall& call, const Shape& x, const Shape& w) {
  cpu::ConvGeom g;
  try {
    g = cpu::ConvGeom::make(x, w, call.op.attrs.stride, call.op.attrs.padding);
  } catch (const Error& e) {
    fail("layer '{}': {}", layer_name(call), e.what());
  }
  const int kernel = call.op.attrs.kernel;
  if (kernel > 0 && (g.r != kernel || g.s != kernel))
    fail("layer '{}': filter {} does not match the layer's kernel size {}", layer_name(call),
         shape_str(w), kernel);
  return g;
}

void expect_shape(const OpCall& call, const TensorArg& t, const char* role, const Shape& want) {
  if (t.shape() != want)
    fail("layer '{}': {} '{}' has shape {} but the conv geometry needs {}", layer_name(call), role,
         t.spec->name, shape_str(t.shape()), shape_str(want));
}

void expect_dtype(const OpCall& call, const TensorArg& t, const char* role, DType want) {
  if (t && t.dtype() != want)
    fail("layer '{}': {} '{}' is {} but the other conv tensors are {}; use one precision",
         layer_name(call), role, t.spec->name, dtype_name(t.dtype()), dtype_name(want));
}

void conv_fwd_op(const OpCall& call) {
  const TensorArg& x = required(call, call.in, 0, "x");
  const TensorArg& w = required(call, call.in, 1, "w");
  const TensorArg bias = optional_arg(call.in, 2);
  const TensorArg& y = required(call, call.out, 0, "y");
  const cpu::ConvGeom g = geometry(call, x.shape(), w.shape());
  expect_shape(call, y, "output", {g.n, g.ho, g.wo, g.k});
  if (bias) expect_shape(call, bias, "bias", {g.k});
  for (auto [t, role] : {std::pair{&w, "filter"}, {&bias, "bias"}, {&y, "output"}})
    expect_dtype(call, *t, role, x.dtype());
  dispatch_float(x.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_fwd<T>(g, x.as<const T>(), w.as<const T>(), bias.as<const T>(), y.as<T>());
  });
}

void conv_dgrad_op(const OpCall& call) {
  const TensorArg& dy = required(call, call.in, 0, "dy");
  const TensorArg& w = required(call, call.in, 1, "w");
  const TensorArg& dx = required(call, call.out, 0, "dx");
  const cpu::ConvGeom g = geometry(call, dx.shape(), w.shape());
  expect_shape(call, dy, "output gradient", {g.n, g.ho, g.wo, g.k});
  for (auto [t, role] : {std::pair{&w, "filter"}, {&dx, "input gradient"}})
    expect_dtype(call, *t, role, dy.dtype());
  dispatch_float(dy.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_dgrad<T>(g, dy.as<const T>(), w.as<const T>(), dx.as<T>());
  });
}

void conv_wgrad_op(const OpCall& call) {
  const TensorArg& dy = required(call, call.in, 0, "dy");
  const TensorArg& x = required(call, call.in, 1, "x");
  const TensorArg& dw = required(call, call.out, 0, "dw");
  const TensorArg db = optional_arg(call.out, 1);
  const cpu::ConvGeom g = geometry(call, x.shape(), dw.shape());
  expect_shape(call, dy, "output gradient", {g.n, g.ho, g.wo, g.k});
  if (db) expect_shape(call, db, "bias gradient", {g.k});
  for (auto [t, role] : {std::pair{&x, "input"}, {&dw, "filter gradient"}, {&db, "bias gradient"}})
    expect_dtype(call, *t, role, dy.dtype());
  dispatch_float(dy.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_wgrad<T>(g, dy.as<const T>(), x.as<const T>(), dw.as<T>(), db.as<T>());
  });
}

}  // namespace

void register_conv_cpu() {
  register_op(Device::CPU, OpKind::CONV_FWD, conv_fwd_op);
  register_op(Device::CPU, OpKind::CONV_DGRAD, conv_dgrad_op);
  register_op(Device::CPU, OpKind::CONV_WGRAD, conv_wgrad_op);
}

}  // namespace kiln
