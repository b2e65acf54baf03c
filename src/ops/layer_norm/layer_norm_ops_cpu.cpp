// Op wrappers binding LAYER_NORM_FWD and LAYER_NORM_BWD to the CPU kernels (layer_norm_cpu.h): they
// check the tensors an op was compiled with (layer_norm_op_checks.h), then dispatch on dtype. The
// CPU's parameters and statistics share the activations' dtype (fp32 or fp64).
#include "ops/layer_norm/layer_norm_contract.h"
#include "ops/layer_norm/layer_norm_cpu.h"
#include "ops/layer_norm/layer_norm_op_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void layer_norm_fwd(const OpCall& call, const LayerNormForward<TensorArg>& a) {
  const cpu::LayerNormGeom g = layer_norm_checks::check_forward(call, a);
  dispatch_float(a.x.dtype(), "LAYER_NORM_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::layer_norm_forward<T>(g, a.x.as<T>(), a.weight.as<T>(), a.bias.as<T>(), a.eps, a.y.as<T>(), a.mean.as<T>(),
                               a.rstd.as<T>());
  });
}

void layer_norm_bwd(const OpCall& call, const LayerNormBackward<TensorArg>& a) {
  const cpu::LayerNormGeom g = layer_norm_checks::check_backward(call, a);
  dispatch_float(a.x.dtype(), "LAYER_NORM_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::layer_norm_backward<T>(g, a.dy.as<T>(), a.x.as<T>(), a.weight.as<T>(), a.mean.as<T>(), a.rstd.as<T>(),
                                a.dx.as<T>(), a.dweight.as<T>(), a.dbias.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable layer_norm_cpu_ops{
    Device::CPU, {kernel<LayerNormForward, layer_norm_fwd>(), kernel<LayerNormBackward, layer_norm_bwd>()}};
}  // namespace ops

}  // namespace kiln
