// SOFTMAX_CE and COUNT_CORRECT on the GPU, on the backend's main stream. The loss is fp32
// whatever the logits' dtype (lowering makes it so for fp16/bf16 programs); dlogits has the
// logits' dtype.
#include "ops/common/op_args.h"
#include "ops/common/workspace_cuda.h"
#include "ops/loss/loss_checks.h"
#include "ops/loss/loss_contract.h"
#include "ops/loss/loss_cuda.h"
#include "ops/loss_scale/loss_scale_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {


// The per-row losses: the only scratch SOFTMAX_CE needs.
float* row_loss_scratch(void* workspace, int64_t n, size_t* bytes = nullptr) {
  WorkspaceLayout layout(workspace);
  float* rows = layout.floats(n);
  if (bytes) *bytes = layout.used();
  return rows;
}

void prepare_softmax_ce(const OpCall& call, const SoftmaxCrossEntropy<TensorArg>& a) {
  size_t bytes = 0;
  row_loss_scratch(nullptr, loss::logits_and_labels(call.where(), a.logits, a.labels).n, &bytes);
  cuda_backend(call.backend, call.where()).request_workspace(bytes);
}

void softmax_ce(const OpCall& call, const SoftmaxCrossEntropy<TensorArg>& a) {
  const auto [n, classes] = loss::logits_and_labels(call.where(), a.logits, a.labels);
  if (a.loss.numel() != 1 || a.loss.dtype() != DType::F32)
    fail("{}: loss tensor '{}' is {} {}, expected F32 [1]; recompile the program", call.where(), a.loss.spec->name,
         dtype_name(a.loss.dtype()), shape_str(a.loss.shape()));
  if (a.dlogits) expect_like(call, a.dlogits, "logits gradient", a.logits);
  loss_scale::expect_optional_scalar(call.where(), a.loss_scale, "loss scale", DType::F32);
  CudaBackend& be = cuda_backend(call.backend, call.where());
  size_t bytes = 0;
  float* row_loss = row_loss_scratch(be.workspace(0), n, &bytes);
  if (be.workspace_bytes() < bytes)
    fail("{}: the op workspace holds {} bytes but the row losses need {}; the op was not prepared (build the "
         "Executable from the program, or run its prepare function before it)",
         call.where(), be.workspace_bytes(), bytes);
  softmax_cross_entropy(a.logits.dtype(), a.logits.data, a.labels.as<int32_t>(), n, classes, a.label_smoothing,
                        a.loss.as<float>(), a.dlogits.data, row_loss, be.stream(0), call.where(),
                        a.loss_scale ? a.loss_scale.as<float>() : nullptr);
}

void count_correct_op(const OpCall& call, const CountCorrect<TensorArg>& a) {
  const auto [n, classes] = loss::logits_and_labels(call.where(), a.logits, a.labels);
  loss::expect_correct(call.where(), a.correct);
  count_correct(a.logits.dtype(), a.logits.data, a.labels.as<int32_t>(), n, classes, a.correct.as<int32_t>(),
                cuda_backend(call.backend, call.where()).stream(0), call.where());
}

void accumulate_totals_op(const OpCall& call, const AccumulateTotals<TensorArg>& a) {
  loss::expect_totals(call.where(), a.loss, a.correct, a.totals);
  if (a.loss && a.loss.dtype() != DType::F32)
    fail("{}: loss tensor '{}' is {}, expected F32 on the GPU; recompile the program", call.where(),
         a.loss.spec->name, dtype_name(a.loss.dtype()));
  CudaBackend& be = cuda_backend(call.backend, call.where());
  if (!call.device_scalars) fail("{}: the backend keeps no step scalars on the device", call.where());
  accumulate_totals(a.loss ? a.loss.as<float>() : nullptr, a.correct.as<int32_t>(), &call.device_scalars->step,
                    a.totals.as<double>(), be.stream(0), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable loss_cuda_ops{
    Device::CUDA,
    {kernel<SoftmaxCrossEntropy, cuda::softmax_ce, cuda::prepare_softmax_ce>(),
     kernel<CountCorrect, cuda::count_correct_op>(), kernel<AccumulateTotals, cuda::accumulate_totals_op>()}};
}  // namespace kiln::ops
