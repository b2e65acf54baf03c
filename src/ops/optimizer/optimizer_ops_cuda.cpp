// SGD_UPDATE / ADAMW_UPDATE on the GPU: one launch over the whole contiguous parameter region.
// Hyper-parameters come from the op's contract, lr and step from the step scalars; with loss
// scaling the kernel reads the scale and the skip flag from device memory.
#include <vector>

#include "ops/loss_scale/loss_scale_checks.h"
#include "ops/optimizer/optimizer_contract.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

// Every bound region fp32 and as long as the gradients.
void check_regions(const OpCall& call, const TensorArg& grads, const std::vector<const TensorArg*>& regions) {
  for (const TensorArg* t : regions)
    if (*t && (t->dtype() != DType::F32 || t->numel() != grads.numel()))
      fail("{}: optimizer regions must be fp32 and of equal size", call.where());
  if (!(call.scalars.lr >= 0)) fail("{}: learning rate must be >= 0, got {}", call.where(), call.scalars.lr);
}

// The loss-scaling state the update reads on the device (absent tensors: no scaling, no skip).
LossScaleInputs scaling_of(const OpCall& call, const TensorArg& loss_scale, const TensorArg& found_nonfinite) {
  loss_scale::expect_optional_scalar(call.where(), loss_scale, "loss scale", DType::F32);
  loss_scale::expect_optional_scalar(call.where(), found_nonfinite, "non-finite flag", DType::I32);
  return LossScaleInputs{loss_scale.as<float>(), found_nonfinite.as<int32_t>()};
}

// The scalars the update reads on the device (see derive_sgd_scalars) live at the start of the
// main stream's workspace, written just before the update on the same stream.
template <class Contract>
void prepare_scalars(const OpCall& call, const Contract&) {
  cuda_backend(call.backend, call.where()).request_workspace(256);
}

void sgd(const OpCall& call, const SgdUpdate<TensorArg>& a) {
  check_regions(call, a.grads, {&a.grads, &a.params, &a.momentum_buffer});
  if (a.momentum != 0 && !a.momentum_buffer)
    fail("{}: momentum {} needs a momentum buffer region; recompile the program", call.where(), a.momentum);
  CudaBackend& be = cuda_backend(call.backend, call.where());
  SgdScalars* on_device = nullptr;
  if (call.device_scalars) {
    on_device = static_cast<SgdScalars*>(be.workspace(0));
    derive_sgd_scalars(&call.device_scalars->lr, a.momentum, a.weight_decay, a.nesterov, on_device, be.stream(0),
                       call.where());
  }
  sgd_update(a.grads.numel(), a.grads.as<float>(), a.params.as<float>(),
             a.momentum != 0 ? a.momentum_buffer.as<float>() : nullptr,
             sgd_scalars(call.scalars.lr, a.momentum, a.weight_decay, a.nesterov), be.stream(0), call.where(),
             on_device, {}, scaling_of(call, a.loss_scale, a.found_nonfinite));
}

void adamw(const OpCall& call, const AdamWUpdate<TensorArg>& a) {
  check_regions(call, a.grads, {&a.grads, &a.params, &a.exp_avg, &a.exp_avg_sq});
  CudaBackend& be = cuda_backend(call.backend, call.where());
  AdamWScalars* on_device = nullptr;
  if (call.device_scalars) {
    on_device = static_cast<AdamWScalars*>(be.workspace(0));
    derive_adamw_scalars(&call.device_scalars->lr, &call.device_scalars->step, a.beta1, a.beta2, a.eps,
                         a.weight_decay, on_device, be.stream(0), call.where());
  }
  adamw_update(a.grads.numel(), a.grads.as<float>(), a.params.as<float>(), a.exp_avg.as<float>(),
               a.exp_avg_sq.as<float>(),
               adamw_scalars(call.scalars.lr, a.beta1, a.beta2, a.eps, a.weight_decay, call.scalars.step + 1),
               be.stream(0), call.where(), on_device, {}, scaling_of(call, a.loss_scale, a.found_nonfinite));
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable optimizer_cuda_ops{Device::CUDA,
                                        {kernel<SgdUpdate, cuda::sgd, cuda::prepare_scalars<SgdUpdate<TensorArg>>>(),
                                         kernel<AdamWUpdate, cuda::adamw, cuda::prepare_scalars<AdamWUpdate<TensorArg>>>()}};
}  // namespace kiln::ops
