// Op wrappers binding CONV_FWD / CONV_DGRAD / CONV_WGRAD to the CPU conv kernels: they
// validate the tensors an op was compiled with, then dispatch on dtype.
#include <string>

#include "ops/common/op_args.h"
#include "ops/conv/conv_contract.h"
#include "ops/conv/conv_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

// The geometry comes from the input and filter shapes plus the contract's window (strides,
// padding of each side, dilation, groups); the filter must also have the layer's kernel size.
cpu::ConvGeom geometry(const OpCall& call, const Shape& x, const Shape& w, const ConvWindow& window) {
  cpu::ConvGeom g;
  try {
    g = cpu::ConvGeom::make(x, w, window);
  } catch (const Error& e) {
    fail("layer '{}': {}", layer_name(call), e.what());
  }
  // A Conv, CBR or conv_bn layer holds its ConvAttrs (a fused one among its parts); a hand-built
  // op may have no layer, or one without.
  const ConvAttrs* conv = call.op.layer >= 0 ? call.layer().attrs.find<ConvAttrs>() : nullptr;
  if (conv && (g.r != conv->kernel_h || g.s != conv->kernel_w))
    fail("layer '{}': filter {} does not match the layer's kernel size {}x{}", layer_name(call), shape_str(w),
         conv->kernel_h, conv->kernel_w);
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

void conv_fwd(const OpCall& call, const ConvForward<TensorArg>& a) {
  const cpu::ConvGeom g = geometry(call, a.x.shape(), a.w.shape(), a.window);
  expect_shape(call, a.y, "output", {g.n, g.ho, g.wo, g.k});
  if (a.bias) expect_shape(call, a.bias, "bias", {g.k});
  for (auto [t, role] : {std::pair{&a.w, "filter"}, {&a.bias, "bias"}, {&a.y, "output"}})
    expect_dtype(call, *t, role, a.x.dtype());
  dispatch_float(a.x.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_fwd<T>(g, a.x.as<const T>(), a.w.as<const T>(), a.bias.as<const T>(), a.y.as<T>());
  });
}

void conv_dgrad(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  const cpu::ConvGeom g = geometry(call, a.dx.shape(), a.w.shape(), a.window);
  expect_shape(call, a.dy, "output gradient", {g.n, g.ho, g.wo, g.k});
  for (auto [t, role] : {std::pair{&a.w, "filter"}, {&a.dx, "input gradient"}})
    expect_dtype(call, *t, role, a.dy.dtype());
  dispatch_float(a.dy.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_dgrad<T>(g, a.dy.as<const T>(), a.w.as<const T>(), a.dx.as<T>());
  });
}

void conv_wgrad(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  const cpu::ConvGeom g = geometry(call, a.x.shape(), a.dw.shape(), a.window);
  expect_shape(call, a.dy, "output gradient", {g.n, g.ho, g.wo, g.k});
  if (a.dbias) expect_shape(call, a.dbias, "bias gradient", {g.k});
  for (auto [t, role] : {std::pair{&a.x, "input"}, {&a.dw, "filter gradient"}, {&a.dbias, "bias gradient"}})
    expect_dtype(call, *t, role, a.dy.dtype());
  dispatch_float(a.dy.dtype(), layer_label(call).c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::conv_wgrad<T>(g, a.dy.as<const T>(), a.x.as<const T>(), a.dw.as<T>(), a.dbias.as<T>());
  });
}

// When the program is prepared: the pass each op runs, made ready (conv_cpu.h).
void conv_fwd_prepare(const OpCall& call, const ConvForward<TensorArg>& a) {
  call.backend->request_workspace(cpu::conv_prepare(geometry(call, a.x.shape(), a.w.shape(), a.window),
                                                    a.x.dtype(), bool(a.bias), {.forward = true}));
}
void conv_dgrad_prepare(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  call.backend->request_workspace(cpu::conv_prepare(geometry(call, a.dx.shape(), a.w.shape(), a.window),
                                                    a.dy.dtype(), false, {.dgrad = true}));
}
void conv_wgrad_prepare(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  call.backend->request_workspace(cpu::conv_prepare(geometry(call, a.x.shape(), a.dw.shape(), a.window),
                                                    a.dy.dtype(), bool(a.dbias), {.wgrad = true}));
}

}  // namespace
}  // namespace kiln

namespace kiln::ops {
extern const OpTable conv_cpu_ops{Device::CPU,
                                  {kernel<ConvForward, conv_fwd, conv_fwd_prepare>(),
                                   kernel<ConvDgrad, conv_dgrad, conv_dgrad_prepare>(),
                                   kernel<ConvWgrad, conv_wgrad, conv_wgrad_prepare>()}};
}  // namespace kiln::ops
