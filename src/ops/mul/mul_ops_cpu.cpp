// Op wrappers binding MUL_FWD and MUL_BWD to the CPU kernels (mul_cpu.h): they check the tensors
// an op was compiled with (mul_op_checks.h), then dispatch on dtype.
#include "ops/mul/mul_contract.h"
#include "ops/mul/mul_cpu.h"
#include "ops/mul/mul_op_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void mul_fwd(const OpCall& call, const MulForward<TensorArg>& a) {
  const cpu::MulGeom g = mul_checks::check_forward(call, a);
  dispatch_float(a.a.dtype(), "MUL_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::mul_forward<T>(g, a.a.as<T>(), a.b.as<T>(), a.y.as<T>());
  });
}

void mul_bwd(const OpCall& call, const MulBackward<TensorArg>& a) {
  const cpu::MulGeom g = mul_checks::check_backward(call, a);
  dispatch_float(a.a.dtype(), "MUL_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::mul_backward<T>(g, a.dy.as<T>(), a.a.as<T>(), a.b.as<T>(), a.da.as<T>(), a.db.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable mul_cpu_ops{Device::CPU, {kernel<MulForward, mul_fwd>(), kernel<MulBackward, mul_bwd>()}};
}  // namespace ops

}  // namespace kiln
