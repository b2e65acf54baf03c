// MUL_FWD and MUL_BWD on the GPU: the checks the CPU makes (mul_op_checks.h), then the kernels of
// mul_cuda.h on the main stream.
#include "ops/mul/mul_contract.h"
#include "ops/mul/mul_cuda.h"
#include "ops/mul/mul_op_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void mul_fwd(const OpCall& call, const MulForward<TensorArg>& a) {
  const cpu::MulGeom g = mul_checks::check_forward(call, a);
  mul_forward(a.a.dtype(), g, a.a.data, a.b.data, a.y.data, main_stream(call), call.where());
}

void mul_bwd(const OpCall& call, const MulBackward<TensorArg>& a) {
  const cpu::MulGeom g = mul_checks::check_backward(call, a);
  mul_backward(a.a.dtype(), g, a.dy.data, a.a.data, a.b.data, a.da.data, a.db.data, main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable mul_cuda_ops{Device::CUDA,
                                  {kernel<MulForward, cuda::mul_fwd>(), kernel<MulBackward, cuda::mul_bwd>()}};
}  // namespace kiln::ops
