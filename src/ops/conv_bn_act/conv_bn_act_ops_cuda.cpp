// BN_ACT_FWD / BN_ACT_BWD / BN_ACT_GATE_GRAD / BN_ACT_INF on the GPU. Forward: batchnorm_cuda.h's
// channel sums and finalize (which writes the op's scale and shift), then bn_act_apply. Backward:
// bn_act_backward, BatchNorm's reduce and apply with the activation's derivative folded into both;
// a squeeze-and-excitation gate's gradient: bn_act_gate_gradient.
#include <algorithm>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/common/workspace_cuda.h"
#include "ops/conv_bn_act/bn_act_cuda.h"
#include "ops/conv_bn_act/bn_act_per_sample.h"
#include "ops/conv_bn_act/conv_bn_act_contract.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

struct Rows {
  int64_t m, c;
};
Rows rows_of(const TensorArg& x) { return {x.numel() / x.shape().back(), x.shape().back()}; }

struct Scratch {
  float *sum, *sqsum, *scale, *shift;
  void* reduce;
  size_t reduce_bytes, used;
};
Scratch scratch(void* base, Rows r) {
  WorkspaceLayout layout(base);
  Scratch s;
  s.sum = layout.floats(r.c), s.sqsum = layout.floats(r.c), s.scale = layout.floats(r.c), s.shift = layout.floats(r.c);
  s.reduce_bytes = std::max(channel_sums_workspace_bytes(r.m, r.c), bn_backward_reduce_workspace_bytes(r.m, r.c));
  s.reduce = layout.take(s.reduce_bytes);
  s.used = layout.used();
  return s;
}

template <template <class> class C>
void prepare(const OpCall& call, const C<TensorArg>& a) {
  cuda_backend(call.backend, call.where()).request_workspace(scratch(nullptr, rows_of(a.x)).used);
}

void bn_act_fwd(const OpCall& call, const BnActForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const Rows r = rows_of(a.x);
  if (r.m < 2) fail("{}: batch statistics need more than one value per channel, got {}", where, r.m);
  const Scratch s = scratch(be.workspace(0), r);
  channel_sums(a.x.dtype(), a.x.data, r.m, r.c, s.sum, s.sqsum, s.reduce, s.reduce_bytes, be.stream(0), where);
  bn_finalize(s.sum, s.sqsum, r.m, a.gamma.as<float>(), a.beta.as<float>(), a.eps, a.momentum,
              a.running_mean.as<float>(), a.running_var.as<float>(), a.saved_mean.as<float>(),
              a.saved_inv_std.as<float>(), a.scale.as<float>(), a.shift.as<float>(), r.c, be.stream(0), where);
  bn_act_apply(a.x.dtype(), a.activation, float(a.alpha), a.x.data, a.scale.as<float>(), a.shift.as<float>(), r.m,
               r.c, a.y.data, be.stream(0), where);
}

void bn_act_bwd(const OpCall& call, const BnActBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const Rows r = rows_of(a.x);
  const Scratch s = scratch(be.workspace(0), r);
  const int64_t samples = per_sample_terms(call, a);
  bn_act_backward(a.x.dtype(), a.activation, float(a.alpha),
                  {a.dy.data, a.x.data, a.gate.data, a.dy_pooled.data, r.m / samples, a.scale.as<float>(), a.shift.as<float>(), a.gamma.as<float>(),
                   a.saved_mean.as<float>(), a.saved_inv_std.as<float>(), a.dgamma.as<float>(), a.dbeta.as<float>(),
                   a.dx.data},
                  r.m, r.c, s.reduce, s.reduce_bytes, be.stream(0), where);
}

void bn_act_gate_grad(const OpCall& call, const BnActGateGrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const Rows r = rows_of(a.x);
  const int64_t n = check_per_sample(call, a.db, a.x, "gate gradient");
  bn_act_gate_gradient(a.x.dtype(), a.activation, float(a.alpha), a.dy.data, a.x.data, a.scale.as<float>(),
                       a.shift.as<float>(), n, r.m / n, r.c, a.db.data, be.stream(0), call.where());
}

void bn_act_inf(const OpCall& call, const BnActInference<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const Rows r = rows_of(a.x);
  const Scratch s = scratch(be.workspace(0), r);
  bn_inference_scale_shift(a.gamma.as<float>(), a.beta.as<float>(), a.running_mean.as<float>(),
                           a.running_var.as<float>(), a.eps, r.c, s.scale, s.shift, be.stream(0), where);
  bn_act_apply(a.x.dtype(), a.activation, float(a.alpha), a.x.data, s.scale, s.shift, r.m, r.c, a.y.data,
               be.stream(0), where);
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable conv_bn_act_cuda_ops{
    Device::CUDA,
    {kernel<BnActForward, cuda::bn_act_fwd, cuda::prepare<BnActForward>>(),
     kernel<BnActBackward, cuda::bn_act_bwd, cuda::prepare<BnActBackward>>(),
     kernel<BnActGateGrad, cuda::bn_act_gate_grad>(),
     kernel<BnActInference, cuda::bn_act_inf, cuda::prepare<BnActInference>>()}};
}  // namespace kiln::ops
