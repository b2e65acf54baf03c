// SGD_UPDATE / ADAMW_UPDATE on the GPU: one launch over the whole contiguous parameter region.
#include "ops/optimizer/optimizer_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

void check_regions(const OpCall& call) {
  for (const TensorArg& t : call.out)
    if (t.dtype() != DType::F32 || t.numel() != call.in[0].numel())
      fail("{}: optimizer regions must be fp32 and of equal size", call.where());
  if (!(call.scalars.lr >= 0)) fail("{}: learning rate must be >= 0, got {}", call.where(), call.scalars.lr);
}

void sgd(const OpCall& call) {
  check_regions(call);
  const OptimizerConfig& o = call.program.options.optimizer;
  CudaBackend& be = cuda_backend(call.backend, call.where());
  sgd_update(call.in[0].numel(), call.in[0].as<float>(), call.out[0].as<float>(),
             o.momentum != 0 ? call.out[1].as<float>() : nullptr,
             sgd_scalars(call.scalars.lr, o.momentum, o.weight_decay, o.nesterov), be.stream(0), call.where());
}

void adamw(const OpCall& call) {
  check_regions(call);
  const OptimizerConfig& o = call.program.options.optimizer;
  CudaBackend& be = cuda_backend(call.backend, call.where());
  adamw_update(call.in[0].numel(), call.in[0].as<float>(), call.out[0].as<float>(), call.out[1].as<float>(),
               call.out[2].as<float>(),
               adamw_scalars(call.scalars.lr, o.beta1, o.beta2, o.eps, o.weight_decay, call.scalars.step + 1),
               be.stream(0), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln {
void register_optimizer_cuda() {
  register_op(Device::CUDA, OpKind::SGD_UPDATE, kiln::cuda::sgd);
  register_op(Device::CUDA, OpKind::ADAMW_UPDATE, kiln::cuda::adamw);
}
}  // namespace kiln
