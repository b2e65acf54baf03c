// BN_FWD_TRAIN / BN_BWD / BN_INF on the GPU: the unfused reference path (statistics, finalize
// and apply as separate kernels; backward as reduce + apply).
#include "ops/batchnorm/batchnorm_contract.h"
#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/common/workspace_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

struct Rows {
  int64_t m, c;
};
Rows rows_of(const TensorArg& x) { return {x.numel() / x.shape().back(), x.shape().back()}; }

struct FwdScratch {
  float *sum, *sqsum, *scale, *shift;
  void* reduce;
  size_t reduce_bytes;
};
FwdScratch fwd_scratch(void* base, Rows r, WorkspaceLayout* measure = nullptr) {
  WorkspaceLayout layout(base);
  FwdScratch s;
  s.sum = layout.floats(r.c), s.sqsum = layout.floats(r.c), s.scale = layout.floats(r.c), s.shift = layout.floats(r.c);
  s.reduce_bytes = std::max(channel_sums_workspace_bytes(r.m, r.c), bn_backward_reduce_workspace_bytes(r.m, r.c));
  s.reduce = layout.take(s.reduce_bytes);
  if (measure) *measure = layout;
  return s;
}

// The scratch every BN op carves (fwd_scratch), from x's (M, C) view.
template <template <class> class C>
void prepare_bn(const OpCall& call, const C<TensorArg>& a) {
  WorkspaceLayout layout;
  fwd_scratch(nullptr, rows_of(a.x), &layout);
  cuda_backend(call.backend, call.where()).request_workspace(layout.used());
}

void bn_fwd_train(const OpCall& call, const BnForwardTrain<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg& x = a.x;
  const Rows r = rows_of(x);
  if (r.m < 2) fail("{}: batch statistics need more than one value per channel, got {}", call.where(), r.m);
  const FwdScratch s = fwd_scratch(be.workspace(0), r);
  const std::string where = call.where();
  channel_sums(x.dtype(), x.data, r.m, r.c, s.sum, s.sqsum, s.reduce, s.reduce_bytes, be.stream(0), where);
  bn_finalize(s.sum, s.sqsum, r.m, a.gamma.as<float>(), a.beta.as<float>(), a.eps, a.momentum,
              a.running_mean.as<float>(), a.running_var.as<float>(), a.saved_mean.as<float>(),
              a.saved_inv_std.as<float>(), s.scale, s.shift, r.c, be.stream(0), where);
  bn_apply(x.dtype(), x.data, s.scale, s.shift, r.m, r.c, false, a.y.data, nullptr, nullptr, be.stream(0), where);
}

void bn_bwd(const OpCall& call, const BnBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg &dy = a.dy, &x = a.x;
  const Rows r = rows_of(x);
  const FwdScratch s = fwd_scratch(be.workspace(0), r);
  float* dgamma = a.dgamma.as<float>();
  float* dbeta = a.dbeta.as<float>();
  const float* mean = a.saved_mean.as<float>();
  const float* inv_std = a.saved_inv_std.as<float>();
  bn_backward_reduce(x.dtype(), dy.data, nullptr, nullptr, x.data, mean, inv_std, r.m, r.c, dbeta, dgamma, s.reduce,
                     s.reduce_bytes, be.stream(0), call.where());
  bn_backward_apply(x.dtype(), dy.data, nullptr, x.data, a.gamma.as<float>(), mean, inv_std, dbeta, dgamma, r.m,
                    r.c, r.m, a.dx.data, be.stream(0), call.where());
}

void bn_inf(const OpCall& call, const BnInference<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg& x = a.x;
  const Rows r = rows_of(x);
  const FwdScratch s = fwd_scratch(be.workspace(0), r);
  bn_inference_scale_shift(a.gamma.as<float>(), a.beta.as<float>(), a.running_mean.as<float>(),
                           a.running_var.as<float>(), a.eps, r.c, s.scale, s.shift, be.stream(0), call.where());
  bn_apply(x.dtype(), x.data, s.scale, s.shift, r.m, r.c, false, a.y.data, nullptr, nullptr, be.stream(0),
           call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable batchnorm_cuda_ops{
    Device::CUDA,
    {kernel<BnForwardTrain, cuda::bn_fwd_train, cuda::prepare_bn<BnForwardTrain>>(),
     kernel<BnBackward, cuda::bn_bwd, cuda::prepare_bn<BnBackward>>(),
     kernel<BnInference, cuda::bn_inf, cuda::prepare_bn<BnInference>>()}};
}  // namespace kiln::ops
