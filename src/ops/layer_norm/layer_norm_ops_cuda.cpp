// LAYER_NORM_FWD and LAYER_NORM_BWD on the GPU: the checks the CPU makes (layer_norm_op_checks.h),
// then the kernels of layer_norm_cuda.h on the main stream. The parameter gradients need the
// workspace the lowering of CUDA programs declares.
#include "ops/layer_norm/layer_norm_contract.h"
#include "ops/layer_norm/layer_norm_cuda.h"
#include "ops/layer_norm/layer_norm_op_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void layer_norm_fwd(const OpCall& call, const LayerNormForward<TensorArg>& a) {
  const cpu::LayerNormGeom g = layer_norm_checks::check_forward(call, a);
  layer_norm_forward(a.x.dtype(), g, a.x.data, a.weight.as<float>(), a.bias.as<float>(), float(a.eps), a.y.data,
                     a.mean.as<float>(), a.rstd.as<float>(), main_stream(call), call.where());
}

void layer_norm_bwd(const OpCall& call, const LayerNormBackward<TensorArg>& a) {
  const cpu::LayerNormGeom g = layer_norm_checks::check_backward(call, a);
  if ((a.dweight || a.dbias) && !a.partials)
    fail("{}: the parameter gradients are summed through a workspace this program does not declare (a program "
         "compiled for another device?); recompile it for CUDA",
         call.where());
  layer_norm_backward(a.x.dtype(), g, a.dy.data, a.x.data, a.weight.as<float>(), a.mean.as<float>(),
                      a.rstd.as<float>(), a.dx.data, a.dweight.as<float>(), a.dbias.as<float>(), a.partials.as<float>(),
                      main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable layer_norm_cuda_ops{
    Device::CUDA,
    {kernel<LayerNormForward, cuda::layer_norm_fwd>(), kernel<LayerNormBackward, cuda::layer_norm_bwd>()}};
}  // namespace kiln::ops
