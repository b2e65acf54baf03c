// ACTIVATION_FWD / _BWD / _INF on the GPU, on the backend's main stream.
#include "ops/activation/activation_contract.h"
#include "ops/activation/activation_cuda.h"
#include "ops/common/op_args.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void activation_fwd(const OpCall& call, const ActivationForward<TensorArg>& a) {
  expect_like(call, a.y, "output", a.x);
  activation_forward(a.function, a.alpha, a.x.dtype(), a.x.data, a.x.numel(), a.y.data, main_stream(call), call.where());
}

void activation_inf(const OpCall& call, const ActivationInference<TensorArg>& a) {
  expect_like(call, a.y, "output", a.x);
  activation_forward(a.function, a.alpha, a.x.dtype(), a.x.data, a.x.numel(), a.y.data, main_stream(call), call.where());
}

void activation_bwd(const OpCall& call, const ActivationBackward<TensorArg>& a) {
  expect_like(call, a.x, "input", a.dy);
  expect_like(call, a.dx, "input gradient", a.dy);
  activation_backward(a.function, a.alpha, a.dy.dtype(), a.dy.data, a.x.data, a.dy.numel(), a.dx.data,
                      main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable activation_cuda_ops{Device::CUDA,
                                         {kernel<ActivationForward, cuda::activation_fwd>(),
                                          kernel<ActivationBackward, cuda::activation_bwd>(),
                                          kernel<ActivationInference, cuda::activation_inf>()}};
}  // namespace kiln::ops
