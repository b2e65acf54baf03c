// Op wrappers binding FIND_NONFINITE and UPDATE_LOSS_SCALE to the CPU kernels
// (loss_scale_cpu.h, loss_scale_rule.h).
#include "ops/loss_scale/loss_scale_checks.h"
#include "ops/loss_scale/loss_scale_contract.h"
#include "ops/loss_scale/loss_scale_cpu.h"
#include "ops/loss_scale/loss_scale_rule.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

void find_nonfinite(const OpCall& call, const FindNonFinite<TensorArg>& a) {
  loss_scale::expect_scalar(call, a.found, "flag", DType::I32);
  // fp32/fp64 CPU programs have no compute copies: compile() allows fp16/bf16 on CUDA only.
  if (a.compute_grads)
    fail("{}: compute_grads '{}' is bound, but mixed precision (fp16/bf16 compute copies) runs on CUDA only; "
         "compile the program for --device cuda, or in fp32 for the CPU",
         call.where(), a.compute_grads.spec->name);
  if (!a.grads) fail("{}: no gradient region is bound; the program's FIND_NONFINITE must name it", call.where());
  dispatch_float(a.grads.dtype(), "FIND_NONFINITE", [&](auto zero) {
    using T = decltype(zero);
    *a.found.as<int32_t>() = cpu::any_nonfinite<T>(a.grads.numel(), a.grads.as<T>()) ? 1 : 0;
  });
}

void update_loss_scale(const OpCall& call, const UpdateLossScale<TensorArg>& a) {
  const loss_scale::Rule rule = loss_scale::checked_rule(call, a);
  loss_scale::update(*a.found.as<int32_t>() != 0, *a.scale.as<float>(), *a.clean_steps.as<int32_t>(), rule);
}

}  // namespace

namespace ops {
extern const OpTable loss_scale_cpu_ops{
    Device::CPU,
    {kernel<FindNonFinite, find_nonfinite>(),
     kernel<UpdateLossScale, update_loss_scale>()}};
}  // namespace ops

}  // namespace kiln
