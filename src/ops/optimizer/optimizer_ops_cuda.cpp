// SGD_UPDATE / ADAMW_UPDATE / RMSPROP_UPDATE on the GPU: one launch over the whole contiguous
// parameter region, reading the compute-dtype gradients of its prefix and rewriting that prefix's
// copies in mixed precision; LARS_UPDATE: two launches per batch of parameter tensors (norms, then the step), its
// block sums in the main stream's workspace. Hyper-parameters come from the op's contract, lr and
// step from the step scalars; with loss scaling the kernel reads the scale and the skip flag from
// device memory.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "ops/loss_scale/loss_scale_checks.h"
#include "ops/optimizer/lars_op_args.h"
#include "ops/optimizer/optimizer_contract.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "ops/optimizer/rmsprop_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

// The parameters and every bound state region fp32 of one length, n; the gradients split as
// optimizer_contract.h says: compute_grads (F16/BF16) and compute_params, together, over a prefix
// of whole 8-element groups, and the fp32 grads over the remaining n - prefix elements. Returns
// the prefix's tensors for the kernel.
ComputeCopies checked_regions(const OpCall& call, const TensorArg& params, const TensorArg& grads,
                              const TensorArg& compute_grads, const TensorArg& compute_params,
                              const std::vector<const TensorArg*>& state) {
  const int64_t n = params.numel();
  for (const TensorArg* t : state)
    if (*t && (t->dtype() != DType::F32 || t->numel() != n))
      fail("{}: region '{}' is {} {}; the parameters and optimizer state must be fp32 regions of {} elements "
           "(recompile the program)",
           call.where(), t->spec->name, dtype_name(t->dtype()), shape_str(t->shape()), n);
  if (bool(compute_grads) != bool(compute_params))
    fail("{}: compute_grads and compute_params must be bound together (the update rewrites the copies of the "
         "parameters whose gradients it reads in the compute dtype)",
         call.where());
  ComputeCopies c;
  if (compute_grads) {
    const DType dtype = compute_grads.dtype();
    if (dtype != DType::F16 && dtype != DType::BF16)
      fail("{}: compute gradients '{}' are {}; they must be F16 or BF16", call.where(), compute_grads.spec->name,
           dtype_name(dtype));
    if (compute_params.dtype() != dtype || compute_params.numel() != compute_grads.numel())
      fail("{}: compute parameters '{}' are {} {} but the compute gradients '{}' are {} {}; they must match",
           call.where(), compute_params.spec->name, dtype_name(compute_params.dtype()),
           shape_str(compute_params.shape()), compute_grads.spec->name, dtype_name(dtype),
           shape_str(compute_grads.shape()));
    c.prefix = compute_grads.numel(), c.dtype = dtype;
    c.grad = compute_grads.data, c.param = compute_params.data;
    if (c.prefix > n || c.prefix % 8 != 0)
      fail("{}: compute gradients '{}' cover {} elements of {}; they must be a prefix of whole 8-element groups",
           call.where(), compute_grads.spec->name, c.prefix, n);
  }
  const int64_t rest = n - c.prefix;
  if (grads ? (grads.dtype() != DType::F32 || grads.numel() != rest) : rest > 0)
    fail("{}: the fp32 gradients must cover the {} elements past the {} with compute copies; {}", call.where(), rest,
         c.prefix,
         grads ? fmt::format("'{}' is {} {}", grads.spec->name, dtype_name(grads.dtype()), shape_str(grads.shape()))
               : std::string("none are bound"));
  if (!(call.scalars.lr >= 0)) fail("{}: learning rate must be >= 0, got {}", call.where(), call.scalars.lr);
  return c;
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
  const ComputeCopies compute =
      checked_regions(call, a.params, a.grads, a.compute_grads, a.compute_params, {&a.params, &a.momentum_buffer});
  if (a.momentum != 0 && !a.momentum_buffer)
    fail("{}: momentum {} needs a momentum buffer region; recompile the program", call.where(), a.momentum);
  CudaBackend& be = cuda_backend(call.backend, call.where());
  SgdScalars* on_device = nullptr;
  if (call.device_scalars) {
    on_device = static_cast<SgdScalars*>(be.workspace(0));
    derive_sgd_scalars(&call.device_scalars->lr, a.momentum, a.weight_decay, a.nesterov, on_device, be.stream(0),
                       call.where());
  }
  sgd_update(a.params.numel(), a.grads.as<float>(), a.params.as<float>(),
             a.momentum != 0 ? a.momentum_buffer.as<float>() : nullptr,
             sgd_scalars(call.scalars.lr, a.momentum, a.weight_decay, a.nesterov), be.stream(0), call.where(),
             on_device, compute, scaling_of(call, a.loss_scale, a.found_nonfinite));
}

void adamw(const OpCall& call, const AdamWUpdate<TensorArg>& a) {
  const ComputeCopies compute = checked_regions(call, a.params, a.grads, a.compute_grads, a.compute_params,
                                                {&a.params, &a.exp_avg, &a.exp_avg_sq});
  CudaBackend& be = cuda_backend(call.backend, call.where());
  AdamWScalars* on_device = nullptr;
  if (call.device_scalars) {
    on_device = static_cast<AdamWScalars*>(be.workspace(0));
    derive_adamw_scalars(&call.device_scalars->lr, &call.device_scalars->step, a.beta1, a.beta2, a.eps,
                         a.weight_decay, on_device, be.stream(0), call.where());
  }
  adamw_update(a.params.numel(), a.grads.as<float>(), a.params.as<float>(), a.exp_avg.as<float>(),
               a.exp_avg_sq.as<float>(),
               adamw_scalars(call.scalars.lr, a.beta1, a.beta2, a.eps, a.weight_decay, call.scalars.step + 1),
               be.stream(0), call.where(), on_device, compute, scaling_of(call, a.loss_scale, a.found_nonfinite));
}

// The block sums of every parameter tensor, in the main stream's workspace.
void prepare_lars(const OpCall& call, const LarsUpdate<TensorArg>& a) {
  cuda_backend(call.backend, call.where()).request_workspace(lars_workspace_bytes(lars_segments(call, a).size()));
}

void lars(const OpCall& call, const LarsUpdate<TensorArg>& a) {
  const ComputeCopies compute =
      checked_regions(call, a.params, a.grads, a.compute_grads, a.compute_params, {&a.params, &a.momentum_buffer});
  check_lars_hyper(call.where(), a);
  const std::vector<LarsSegment> segments = lars_segments(call, a);
  CudaBackend& be = cuda_backend(call.backend, call.where());
  lars_update(segments, a.params.numel(), a.grads.as<float>(), a.params.as<float>(), a.momentum_buffer.as<float>(),
              lars_scalars(call.scalars.lr, a.momentum, a.weight_decay, a.trust_coefficient), be.workspace(0),
              be.workspace_bytes(0), be.stream(0), call.where(),
              call.device_scalars ? &call.device_scalars->lr : nullptr, compute,
              scaling_of(call, a.loss_scale, a.found_nonfinite));
}

// The learning rate is read where the step's scalars are (a replayed graph's); the other scalars
// are the op's and stay.
void rmsprop(const OpCall& call, const RmspropUpdate<TensorArg>& a) {
  const bool with_momentum = a.momentum != 0;
  const ComputeCopies compute =
      checked_regions(call, a.params, a.grads, a.compute_grads, a.compute_params,
                      {&a.params, &a.square_avg, &a.momentum_buffer, &a.grad_avg});
  if (!a.square_avg || (with_momentum && !a.momentum_buffer) || (a.centered && !a.grad_avg))
    fail("{}: RMSprop needs its square_avg region{}{}; recompile the program", call.where(),
         with_momentum ? ", a momentum buffer (momentum != 0)" : "", a.centered ? ", a grad_avg (centered)" : "");
  CudaBackend& be = cuda_backend(call.backend, call.where());
  rmsprop_update(a.params.numel(), a.grads.as<float>(), a.params.as<float>(), a.square_avg.as<float>(),
                 with_momentum ? a.momentum_buffer.as<float>() : nullptr,
                 a.centered ? a.grad_avg.as<float>() : nullptr,
                 rmsprop_scalars(call.scalars.lr, a.alpha, a.eps, a.weight_decay, a.momentum), be.stream(0),
                 call.where(), call.device_scalars ? &call.device_scalars->lr : nullptr, compute,
                 scaling_of(call, a.loss_scale, a.found_nonfinite));
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable optimizer_cuda_ops{Device::CUDA,
                                        {kernel<SgdUpdate, cuda::sgd, cuda::prepare_scalars<SgdUpdate<TensorArg>>>(),
                                         kernel<AdamWUpdate, cuda::adamw, cuda::prepare_scalars<AdamWUpdate<TensorArg>>>(),
                                         kernel<LarsUpdate, cuda::lars, cuda::prepare_lars>(),
                                         kernel<RmspropUpdate, cuda::rmsprop>()}};
}  // namespace kiln::ops
