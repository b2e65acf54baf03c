// BN_FWD_TRAIN / BN_BWD / BN_INF on the GPU: the unfused reference path (statistics, finalize
// and apply as separate kernels; backward as reduce + apply).
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

void prepare_bn(const OpCall& call) {
  WorkspaceLayout layout;
  fwd_scratch(nullptr, rows_of(call.in[0]), &layout);
  cuda_backend(call.backend, call.where()).request_workspace(layout.used());
}

void bn_fwd_train(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg& x = call.in[0];
  const Rows r = rows_of(x);
  if (r.m < 2) fail("{}: batch statistics need more than one value per channel, got {}", call.where(), r.m);
  const FwdScratch s = fwd_scratch(be.workspace(0), r);
  const std::string where = call.where();
  channel_sums(x.dtype(), x.data, r.m, r.c, s.sum, s.sqsum, s.reduce, s.reduce_bytes, be.stream(0), where);
  bn_finalize(s.sum, s.sqsum, r.m, call.in[1].as<float>(), call.in[2].as<float>(), call.op.attrs.eps,
              call.op.attrs.momentum, call.out[3].as<float>(), call.out[4].as<float>(), call.out[1].as<float>(),
              call.out[2].as<float>(), s.scale, s.shift, r.c, be.stream(0), where);
  bn_apply(x.dtype(), x.data, s.scale, s.shift, r.m, r.c, false, call.out[0].data, nullptr, nullptr, be.stream(0), where);
}

void bn_bwd(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg &dy = call.in[0], &x = call.in[1];
  const Rows r = rows_of(x);
  const FwdScratch s = fwd_scratch(be.workspace(0), r);
  float* dgamma = call.out[1].as<float>();
  float* dbeta = call.out[2].as<float>();
  const float* mean = call.in[3].as<float>();
  const float* inv_std = call.in[4].as<float>();
  bn_backward_reduce(x.dtype(), dy.data, nullptr, x.data, mean, inv_std, r.m, r.c, dbeta, dgamma, s.reduce,
                     s.reduce_bytes, be.stream(0), call.where());
  bn_backward_apply(x.dtype(), dy.data, nullptr, x.data, call.in[2].as<float>(), mean, inv_std, dbeta, dgamma, r.m,
                    r.c, r.m, call.out[0].data, be.stream(0), call.where());
}

void bn_inf(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg& x = call.in[0];
  const Rows r = rows_of(x);
  const FwdScratch s = fwd_scratch(be.workspace(0), r);
  bn_inference_scale_shift(call.in[1].as<float>(), call.in[2].as<float>(), call.in[3].as<float>(),
                           call.in[4].as<float>(), call.op.attrs.eps, r.c, s.scale, s.shift, be.stream(0), call.where());
  bn_apply(x.dtype(), x.data, s.scale, s.shift, r.m, r.c, false, call.out[0].data, nullptr, nullptr, be.stream(0),
           call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln {
void register_batchnorm_cuda() {
  using namespace kiln::cuda;
  register_op(Device::CUDA, OpKind::BN_FWD_TRAIN, bn_fwd_train, prepare_bn);
  register_op(Device::CUDA, OpKind::BN_BWD, bn_bwd, prepare_bn);
  register_op(Device::CUDA, OpKind::BN_INF, bn_inf, prepare_bn);
}
}  // namespace kiln
