// ACTIVATION_FWD / _BWD / _INF on the CPU: checks the tensors, dispatches on dtype.
#include "ops/activation/activation_contract.h"
#include "ops/activation/activation_cpu.h"
#include "ops/common/op_args.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

template <template <class> class C>
void forward(const OpCall& call, const C<TensorArg>& a) {
  expect_like(call, a.y, "output", a.x);
  dispatch_float(a.x.dtype(), call.where().c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::activation_forward<T>(a.function, a.alpha, a.x.template as<const T>(), a.x.numel(), a.y.template as<T>());
  });
}

void activation_fwd(const OpCall& call, const ActivationForward<TensorArg>& a) { forward(call, a); }
void activation_inf(const OpCall& call, const ActivationInference<TensorArg>& a) { forward(call, a); }

void activation_bwd(const OpCall& call, const ActivationBackward<TensorArg>& a) {
  expect_like(call, a.x, "input", a.dy);
  expect_like(call, a.dx, "input gradient", a.dy);
  dispatch_float(a.dy.dtype(), call.where().c_str(), [&](auto zero) {
    using T = decltype(zero);
    cpu::activation_backward<T>(a.function, a.alpha, a.dy.as<const T>(), a.x.as<const T>(), a.dy.numel(), a.dx.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable activation_cpu_ops{Device::CPU,
                                        {kernel<ActivationForward, activation_fwd>(),
                                         kernel<ActivationBackward, activation_bwd>(),
                                         kernel<ActivationInference, activation_inf>()}};
}  // namespace ops

}  // namespace kiln
