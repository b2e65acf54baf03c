// SOFTMAX_CE and COUNT_CORRECT on the GPU, on the backend's main stream. The loss is fp32
// whatever the logits' dtype (lowering makes it so for fp16/bf16 programs); dlogits has the
// logits' dtype.
#include "ops/common/op_args.h"
#include "ops/common/workspace_cuda.h"
#include "ops/loss/loss_contract.h"
#include "ops/loss/loss_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

struct Rows {
  int64_t n, classes;
};

// Logits (N, classes) and one I32 label per row.
Rows check_logits_and_labels(const OpCall& call, const TensorArg& logits, const TensorArg& labels) {
  const Shape& s = logits.shape();
  if (s.size() != 2 || s[0] < 1 || s[1] < 1)
    fail("{}: logits have shape {}, expected (N, classes); flatten and add a Linear layer before the loss",
         call.where(), shape_str(s));
  if (labels.dtype() != DType::I32 || labels.numel() != s[0])
    fail("{}: labels are {} {} but {} I32 class indices are needed (one per logits row)", call.where(),
         dtype_name(labels.dtype()), shape_str(labels.shape()), s[0]);
  return {s[0], s[1]};
}

// The per-row losses: the only scratch SOFTMAX_CE needs.
float* row_loss_scratch(void* workspace, int64_t n, size_t* bytes = nullptr) {
  WorkspaceLayout layout(workspace);
  float* rows = layout.floats(n);
  if (bytes) *bytes = layout.used();
  return rows;
}

void prepare_softmax_ce(const OpCall& call, const SoftmaxCrossEntropy<TensorArg>& a) {
  size_t bytes = 0;
  row_loss_scratch(nullptr, check_logits_and_labels(call, a.logits, a.labels).n, &bytes);
  cuda_backend(call.backend, call.where()).request_workspace(bytes);
}

void softmax_ce(const OpCall& call, const SoftmaxCrossEntropy<TensorArg>& a) {
  const auto [n, classes] = check_logits_and_labels(call, a.logits, a.labels);
  if (a.loss.numel() != 1 || a.loss.dtype() != DType::F32)
    fail("{}: loss tensor '{}' is {} {}, expected F32 [1]; recompile the program", call.where(), a.loss.spec->name,
         dtype_name(a.loss.dtype()), shape_str(a.loss.shape()));
  if (a.dlogits) expect_like(call, a.dlogits, "logits gradient", a.logits);
  if (a.loss_scale && (a.loss_scale.numel() != 1 || a.loss_scale.dtype() != DType::F32))
    fail("{}: loss scale '{}' is {} {}, expected F32 [1]; recompile the program", call.where(),
         a.loss_scale.spec->name, dtype_name(a.loss_scale.dtype()), shape_str(a.loss_scale.shape()));
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
  const auto [n, classes] = check_logits_and_labels(call, a.logits, a.labels);
  if (a.correct.numel() != 1 || a.correct.dtype() != DType::I32)
    fail("{}: correct tensor '{}' is {} {}, expected I32 [1]; recompile the program", call.where(),
         a.correct.spec->name, dtype_name(a.correct.dtype()), shape_str(a.correct.shape()));
  count_correct(a.logits.dtype(), a.logits.data, a.labels.as<int32_t>(), n, classes, a.correct.as<int32_t>(),
                cuda_backend(call.backend, call.where()).stream(0), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable loss_cuda_ops{
    Device::CUDA,
    {kernel<SoftmaxCrossEntropy, cuda::softmax_ce, cuda::prepare_softmax_ce>(),
     kernel<CountCorrect, cuda::count_correct_op>()}};
}  // namespace kiln::ops
