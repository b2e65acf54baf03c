// CONCAT_FWD and CONCAT_BWD on the GPU: the checks the CPU makes (concat_op_checks.h), then one
// channel copy per input (concat_cuda.h) on the main stream.
#include "ops/concat/concat_contract.h"
#include "ops/concat/concat_cuda.h"
#include "ops/concat/concat_op_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

using concat_checks::channels;
using concat_checks::rows;

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void concat_fwd(const OpCall& call, const ConcatForward<TensorArg>& a) {
  concat_checks::check_forward(call, a);
  int64_t offset = 0;
  for (const TensorArg& x : a.xs) {
    copy_channels(a.y.dtype(), x.data, channels(x), 0, a.y.data, channels(a.y), offset, rows(a.y), channels(x),
                  main_stream(call), call.where());
    offset += channels(x);
  }
}

void concat_bwd(const OpCall& call, const ConcatBackward<TensorArg>& a) {
  concat_checks::check_backward(call, a);
  copy_channels(a.dy.dtype(), a.dy.data, channels(a.dy), a.channel_offset, a.dx.data, channels(a.dx), 0, rows(a.dx),
                channels(a.dx), main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable concat_cuda_ops{
    Device::CUDA, {kernel<ConcatForward, cuda::concat_fwd>(), kernel<ConcatBackward, cuda::concat_bwd>()}};
}  // namespace kiln::ops
