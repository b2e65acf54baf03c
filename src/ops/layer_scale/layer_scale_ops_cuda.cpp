// LAYER_SCALE_FWD and LAYER_SCALE_BWD on the GPU: the checks the CPU makes (layer_scale_op_checks.h,
// with the backward's fp32 workspace, which CUDA programs declare), then the kernels of
// layer_scale_cuda.h on the main stream.
#include "ops/layer_scale/layer_scale_contract.h"
#include "ops/layer_scale/layer_scale_cuda.h"
#include "ops/layer_scale/layer_scale_op_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void layer_scale_fwd(const OpCall& call, const LayerScaleForward<TensorArg>& a) {
  const cpu::LayerScaleGeom g = layer_scale_checks::check_forward(call, a);
  layer_scale_forward(a.x.dtype(), g, a.x.data, a.gamma.as<float>(), a.y.data, main_stream(call), call.where());
}

void layer_scale_bwd(const OpCall& call, const LayerScaleBackward<TensorArg>& a) {
  const cpu::LayerScaleGeom g = layer_scale_checks::check_backward(call, a, /*need_partials=*/true);
  layer_scale_backward(a.x.dtype(), g, a.dy.data, a.x.data, a.gamma.as<float>(), a.dx.data, a.dgamma.as<float>(),
                       a.partials.as<float>(), main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable layer_scale_cuda_ops{
    Device::CUDA,
    {kernel<LayerScaleForward, cuda::layer_scale_fwd>(), kernel<LayerScaleBackward, cuda::layer_scale_bwd>()}};
}  // namespace kiln::ops
