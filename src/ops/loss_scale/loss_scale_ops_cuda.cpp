// FIND_NONFINITE and UPDATE_LOSS_SCALE on the GPU, on the main stream; the
// device state is never read back (loss_scale_cuda.h).
#include "ops/loss_scale/loss_scale_checks.h"
#include "ops/loss_scale/loss_scale_contract.h"
#include "ops/loss_scale/loss_scale_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

// The fp32 gradient region and, in mixed precision, the compute-dtype one before it in the
// parameters' layout (optimizer_contract.h): one pass over both.
void find_nonfinite_op(const OpCall& call, const FindNonFinite<TensorArg>& a) {
  loss_scale::expect_scalar(call, a.found, "flag", DType::I32);
  if (!a.grads && !a.compute_grads)
    fail("{}: neither grads nor compute_grads is bound; the program's FIND_NONFINITE must name a gradient region",
         call.where());
  if (a.grads && a.grads.dtype() != DType::F32)
    fail("{}: gradient region '{}' is {}; the GPU checks the fp32 gradients", call.where(), a.grads.spec->name,
         dtype_name(a.grads.dtype()));
  ComputeGrads compute;
  if (a.compute_grads) {
    compute = ComputeGrads{a.compute_grads.data, a.compute_grads.numel(), a.compute_grads.dtype()};
    if (compute.dtype != DType::F16 && compute.dtype != DType::BF16)
      fail("{}: compute gradient region '{}' is {}; it must be F16 or BF16", call.where(), a.compute_grads.spec->name,
           dtype_name(compute.dtype));
  }
  find_nonfinite(a.grads ? a.grads.as<float>() : nullptr, a.grads ? a.grads.numel() : 0, a.found.as<int32_t>(),
                 main_stream(call), call.where(), compute);
}

void update_loss_scale_op(const OpCall& call, const UpdateLossScale<TensorArg>& a) {
  const loss_scale::Rule rule = loss_scale::checked_rule(call, a);
  update_loss_scale(a.found.as<int32_t>(), a.scale.as<float>(), a.clean_steps.as<int32_t>(), rule, main_stream(call),
                    call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable loss_scale_cuda_ops{
    Device::CUDA,
    {kernel<FindNonFinite, cuda::find_nonfinite_op>(),
     kernel<UpdateLossScale, cuda::update_loss_scale_op>()}};
}  // namespace kiln::ops
