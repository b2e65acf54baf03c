// GROUP_NORM_FWD and GROUP_NORM_BWD on the GPU: the checks the CPU makes (group_norm_op_checks.h)
// and the workspace the lowering declared for the partial sums, then the kernels of
// group_norm_cuda.h on the main stream.
#include "ops/group_norm/group_norm_contract.h"
#include "ops/group_norm/group_norm_cuda.h"
#include "ops/group_norm/group_norm_op_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void group_norm_fwd(const OpCall& call, const GroupNormForward<TensorArg>& a) {
  const GroupNormGeom g = group_norm_checks::check_forward(call, a);
  group_norm_checks::check_workspace(call, a.workspace, g, {&a.x, &a.weight, &a.bias, &a.y, &a.mean, &a.rstd});
  group_norm_forward(a.x.dtype(), g, a.x.data, a.weight.as<float>(), a.bias.as<float>(), float(a.eps), a.y.data,
                     a.mean.as<float>(), a.rstd.as<float>(), a.workspace.as<float>(), main_stream(call), call.where());
}

void group_norm_bwd(const OpCall& call, const GroupNormBackward<TensorArg>& a) {
  const GroupNormGeom g = group_norm_checks::check_backward(call, a);
  group_norm_checks::check_workspace(call, a.workspace, g,
                                     {&a.dy, &a.x, &a.weight, &a.mean, &a.rstd, &a.dx, &a.dweight, &a.dbias});
  group_norm_backward(a.x.dtype(), g, a.dy.data, a.x.data, a.weight.as<float>(), a.mean.as<float>(),
                      a.rstd.as<float>(), a.dx.data, a.dweight.as<float>(), a.dbias.as<float>(),
                      a.workspace.as<float>(), main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable group_norm_cuda_ops{
    Device::CUDA,
    {kernel<GroupNormForward, cuda::group_norm_fwd>(), kernel<GroupNormBackward, cuda::group_norm_bwd>()}};
}  // namespace kiln::ops
