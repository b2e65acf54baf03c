// Op wrappers binding GROUP_NORM_FWD and GROUP_NORM_BWD to the CPU kernels (group_norm_cpu.h):
// they check the tensors an op was compiled with (group_norm_op_checks.h), then dispatch on dtype.
// CPU programs declare no workspace (the kernels sum in double on their own).
#include "ops/group_norm/group_norm_contract.h"
#include "ops/group_norm/group_norm_cpu.h"
#include "ops/group_norm/group_norm_op_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void group_norm_fwd(const OpCall& call, const GroupNormForward<TensorArg>& a) {
  const GroupNormGeom g = group_norm_checks::check_forward(call, a);
  dispatch_float(a.x.dtype(), "GROUP_NORM_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::group_norm_forward<T>(g, a.x.as<T>(), a.weight.as<T>(), a.bias.as<T>(), a.eps, a.y.as<T>(), a.mean.as<T>(),
                               a.rstd.as<T>());
  });
}

void group_norm_bwd(const OpCall& call, const GroupNormBackward<TensorArg>& a) {
  const GroupNormGeom g = group_norm_checks::check_backward(call, a);
  dispatch_float(a.x.dtype(), "GROUP_NORM_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::group_norm_backward<T>(g, a.dy.as<T>(), a.x.as<T>(), a.weight.as<T>(), a.mean.as<T>(), a.rstd.as<T>(),
                                a.dx.as<T>(), a.dweight.as<T>(), a.dbias.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable group_norm_cpu_ops{
    Device::CPU, {kernel<GroupNormForward, group_norm_fwd>(), kernel<GroupNormBackward, group_norm_bwd>()}};
}  // namespace ops

}  // namespace kiln
