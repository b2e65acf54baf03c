// Op wrappers binding LAYER_SCALE_FWD and LAYER_SCALE_BWD to the CPU kernels (layer_scale_cpu.h):
// they check the tensors an op was compiled with (layer_scale_op_checks.h), then dispatch on dtype.
// The CPU sums dgamma in its own double partials: a GPU workspace in the program goes unread.
#include "ops/layer_scale/layer_scale_contract.h"
#include "ops/layer_scale/layer_scale_cpu.h"
#include "ops/layer_scale/layer_scale_op_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void layer_scale_fwd(const OpCall& call, const LayerScaleForward<TensorArg>& a) {
  const cpu::LayerScaleGeom g = layer_scale_checks::check_forward(call, a);
  dispatch_float(a.x.dtype(), "LAYER_SCALE_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::layer_scale_forward<T>(g, a.x.as<T>(), a.gamma.as<T>(), a.y.as<T>());
  });
}

void layer_scale_bwd(const OpCall& call, const LayerScaleBackward<TensorArg>& a) {
  const cpu::LayerScaleGeom g = layer_scale_checks::check_backward(call, a, /*need_partials=*/false);
  dispatch_float(a.x.dtype(), "LAYER_SCALE_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::layer_scale_backward<T>(g, a.dy.as<T>(), a.x.as<T>(), a.gamma.as<T>(), a.dx.as<T>(), a.dgamma.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable layer_scale_cpu_ops{
    Device::CPU, {kernel<LayerScaleForward, layer_scale_fwd>(), kernel<LayerScaleBackward, layer_scale_bwd>()}};
}  // namespace ops

}  // namespace kiln
