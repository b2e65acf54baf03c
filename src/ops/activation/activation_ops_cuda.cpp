// ACTIVATION_FWD / _BWD / _INF on the GPU, on the backend's main stream.
#include "ops/activation/activation_contract.h"
#include "ops/activation/activation_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void expect_like(const OpCall& call, const TensorArg& t, const TensorArg& like) {
  if (t.numel() != like.numel() || t.dtype() != like.dtype())
    fail("{}: '{}' is {} {} but must match '{}' ({} {})", call.where(), t.spec->name, dtype_name(t.dtype()),
         shape_str(t.shape()), like.spec->name, dtype_name(like.dtype()), shape_str(like.shape()));
}

void activation_fwd(const OpCall& call, const ActivationForward<TensorArg>& a) {
  expect_like(call, a.y, a.x);
  activation_forward(a.function, a.alpha, a.x.dtype(), a.x.data, a.x.numel(), a.y.data, main_stream(call), call.where());
}

void activation_inf(const OpCall& call, const ActivationInference<TensorArg>& a) {
  expect_like(call, a.y, a.x);
  activation_forward(a.function, a.alpha, a.x.dtype(), a.x.data, a.x.numel(), a.y.data, main_stream(call), call.where());
}

void activation_bwd(const OpCall& call, const ActivationBackward<TensorArg>& a) {
  expect_like(call, a.x, a.dy);
  expect_like(call, a.dx, a.dy);
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
