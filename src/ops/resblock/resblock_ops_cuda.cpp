// ResNet's fused block ends on the GPU (resblock_contract.h says what each op computes):
//   CONV_BN_FWD      conv + statistics (conv_stats_cuda.h, as CBR) -> finalize straight into the
//                    op's saved and running statistics and its scale / shift outputs; no apply pass (the tail's
//                    BN_ADD_RELU_FWD applies scale / shift);
//   CONV_BN_INF      scale / shift of the running statistics, and the conv graph;
//   CONV_BN_BWD      wgrad on the side stream beside dgrad on the main stream (CBR's plain order);
//   BN_ADD_RELU_FWD  one pass: y = relu(a * scale_a + shift_a + b') and the 1-bit mask
//                    (BN_ADD_RELU_INF: the same pass without the mask);
//   BN_ADD_RELU_BWD  the masked BN backward of each branch: a reduce per normalized branch, then
//                    one apply pass writing da and db (db = masked dy for an identity shortcut);
//                    dy * mask is never stored.
// A seam's consumer (CONV_BN_FWD / CONV_BN_BWD given in_scale / in_shift) convolves its input's
// BatchNorm + ReLU as the CBR's consumers do (ops/cbr/cbr_seam_cuda.h).
// Everything runs on the main stream except wgrad, which may still run beside the next op when
// CONV_BN_BWD returns (CudaBackend::end_side_work); every other op ends with both streams joined.
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/common/op_args.h"
#include "ops/cbr/cbr_seam_cuda.h"
#include "ops/common/workspace_cuda.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "ops/conv/conv_stats_cuda.h"
#include "ops/resblock/resblock_contract.h"
#include "ops/resblock/resblock_cuda.h"
#include "runtime/cuda/cuda_backend.h"

namespace kiln::cuda {
namespace {

// --- Checks of the bound tensors (kernels take raw pointers and cannot check sizes) ---

int64_t rows(const TensorArg& t) { return t.numel() / t.shape().back(); }

// BN parameters, statistics, scale / shift and their gradients are fp32 on the GPU, whatever
// the activations' dtype.
void expect_per_channel(const OpCall& call, const TensorArg& t, int64_t c, const char* role) {
  if (t.dtype() != DType::F32 || t.shape() != Shape{c})
    fail("{}: {} '{}' is {} {} but must be F32 [{}] (per-channel tensors stay fp32 on the GPU); recompile "
         "the program",
         call.where(), role, t.spec->name, dtype_name(t.dtype()), shape_str(t.shape()), c);
}

using Role = std::pair<const TensorArg*, const char*>;  // a tensor and its contract name

void expect_per_channel(const OpCall& call, std::initializer_list<Role> tensors, int64_t c) {
  for (const auto& [t, role] : tensors) expect_per_channel(call, *t, c, role);
}

// The convolution's output side (conv_out, dconv) in the input's dtype (conv_problem checks
// its shape).
void expect_conv_dtype(const OpCall& call, const TensorArg& t, const TensorArg& x) {
  if (t.dtype() != x.dtype())
    fail("{}: '{}' is {} but the convolution's input '{}' is {}; they share the activation dtype, recompile the "
         "program",
         call.where(), t.spec->name, dtype_name(t.dtype()), x.spec->name, dtype_name(x.dtype()));
}

void expect_bitmask(const OpCall& call, const TensorArg& t, int64_t elements) {
  const Shape want{bitmask_bytes(elements)};
  if (t.dtype() != DType::U8 || t.shape() != want)
    fail("{}: bitmask '{}' is {} {} but must be U8 {} (one bit per element of the block's output); recompile "
         "the program",
         call.where(), t.spec->name, dtype_name(t.dtype()), shape_str(t.shape()), shape_str(want));
}

// The (m rows, c channels) view of a block end's activation `t`.
struct Rows {
  int64_t m, c;
};
Rows rows_of(const OpCall& call, const TensorArg& t) {
  if (t.shape().empty() || t.shape().back() < 1)
    fail("{}: '{}' has shape {}, but a block end works on (N, H, W, C) feature maps; recompile the program",
         call.where(), t.spec->name, shape_str(t.shape()));
  return {rows(t), t.shape().back()};
}

// --- CONV_BN_FWD ---

// The forward's scratch: the per-channel sums, the sum kernel's partials (used only by the conv
// graph then sums way) and the convolution's workspace, carved the same way when prepared and
// when run.
struct FwdScratch {
  float *sum, *sqsum;
  void* reduce;
  size_t reduce_bytes;
  void* conv;
  size_t used;
};

FwdScratch fwd_scratch(void* base, int64_t m, int64_t c, size_t conv_bytes) {
  WorkspaceLayout layout(base);
  FwdScratch s;
  s.sum = layout.floats(c), s.sqsum = layout.floats(c);
  s.reduce_bytes = channel_sums_workspace_bytes(m, c);
  s.reduce = layout.take(s.reduce_bytes);
  s.conv = layout.take(conv_bytes);
  s.used = layout.used();
  return s;
}

// The forward's tensors against its convolution problem; returns the rows of conv_out.
int64_t check_fwd(const OpCall& call, const ConvBnForward<TensorArg>& a, const ConvProblem& p) {
  expect_conv_dtype(call, a.conv_out, a.x);
  expect_per_channel(call,
                     {{&a.gamma, "gamma"},
                      {&a.beta, "beta"},
                      {&a.saved_mean, "saved_mean"},
                      {&a.saved_inv_std, "saved_inv_std"},
                      {&a.scale, "scale"},
                      {&a.shift, "shift"},
                      {&a.running_mean, "running_mean"},
                      {&a.running_var, "running_var"}},
                     p.k);
  const int64_t m = rows(a.conv_out);
  // The running variance's unbiased update divides by m - 1.
  if (m < 2)
    fail("{}: batch statistics need more than one value per channel, got {} (N * H_out * W_out); use a batch "
         "larger than 1 or a larger input",
         call.where(), m);
  return m;
}

void prepare_conv_bn_fwd(const OpCall& call, const ConvBnForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = conv_problem(call, a.x, a.w, a.conv_out, a.stride, a.padding);
  const int64_t m = check_fwd(call, a, p);
  const size_t conv = a.in_scale ? prepare_seam_conv_stats(be, p, seam_input_of(a), a.w.data, a.conv_out.data,
                                                           call.where())
                                 : prepare_conv_stats(be, p, a.x.data, a.w.data, a.conv_out.data, call.where());
  be.request_workspace(fwd_scratch(nullptr, m, p.k, conv).used);
}

void conv_bn_fwd(const OpCall& call, const ConvBnForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const TensorArg& conv_out = a.conv_out;
  const ConvProblem p = conv_problem(call, a.x, a.w, conv_out, a.stride, a.padding);
  const int64_t m = check_fwd(call, a, p);
  const FwdScratch s = fwd_scratch(be.workspace(0), m, p.k, 0);
  // The convolution and the per-channel sums of its output (in the same pass where the chosen
  // engine can); a seam's consumer convolves its input's BatchNorm + ReLU.
  if (a.in_scale)
    run_seam_conv_stats(be, p, seam_input_of(a), a.w.data, conv_out.data, s.sum, s.sqsum, s.reduce, s.reduce_bytes,
                        s.conv, be.stream(0), where);
  else
    run_conv_stats(be, p, a.x.data, a.w.data, conv_out.data, s.sum, s.sqsum, s.reduce, s.reduce_bytes, s.conv,
                   be.stream(0), where);
  // Finalize: saved and running statistics, and scale / shift for the block end's apply.
  bn_finalize(s.sum, s.sqsum, m, a.gamma.as<float>(), a.beta.as<float>(), a.eps, a.momentum,
              a.running_mean.as<float>(), a.running_var.as<float>(), a.saved_mean.as<float>(),
              a.saved_inv_std.as<float>(), a.scale.as<float>(), a.shift.as<float>(), p.k, be.stream(0), where);
}

// --- CONV_BN_INF ---

void check_inf(const OpCall& call, const ConvBnInference<TensorArg>& a, int64_t k) {
  expect_conv_dtype(call, a.conv_out, a.x);
  expect_per_channel(call,
                     {{&a.gamma, "gamma"},
                      {&a.beta, "beta"},
                      {&a.running_mean, "running_mean"},
                      {&a.running_var, "running_var"},
                      {&a.scale, "scale"},
                      {&a.shift, "shift"}},
                     k);
}

void prepare_conv_bn_inf(const OpCall& call, const ConvBnInference<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = conv_problem(call, a.x, a.w, a.conv_out, a.stride, a.padding);
  check_inf(call, a, p.k);
  be.request_workspace(be.graphs().prepare(kConvFpropGraph, p));
}

void conv_bn_inf(const OpCall& call, const ConvBnInference<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const ConvProblem p = conv_problem(call, a.x, a.w, a.conv_out, a.stride, a.padding);
  check_inf(call, a, p.k);
  bn_inference_scale_shift(a.gamma.as<float>(), a.beta.as<float>(), a.running_mean.as<float>(),
                           a.running_var.as<float>(), a.eps, p.k, a.scale.as<float>(), a.shift.as<float>(),
                           be.stream(0), where);
  Pointers ptr;
  ptr.x = a.x.data, ptr.w = a.w.data, ptr.y = a.conv_out.data;
  be.graphs().run(kConvFpropGraph, p, ptr, be.workspace(0), be.stream(0), where);
}

// --- CONV_BN_BWD ---

void check_bwd(const OpCall& call, const ConvBnBackward<TensorArg>& a) {
  expect_conv_dtype(call, a.dconv, a.x);
  expect_like(call, a.dw, "weight gradient", a.w);
  if (a.in_scale && (!a.in_shift || !a.x_applied))
    fail("{}: a seam consumer's backward needs in_scale, in_shift and its x_applied scratch; recompile the program",
         call.where());
  if (a.in_scale) expect_like(call, a.x_applied, "applied input", a.x);
  if (!a.dx) return;
  expect_like(call, a.dx, "input gradient", a.x);
  // dgrad reads dconv and w while it writes dx: no stream order can make an overlap correct.
  if (overlaps(a.dx, a.dconv) || overlaps(a.dx, a.w))
    fail("{}: dx '{}' shares memory with dconv or w, which the data-gradient convolution reads while writing "
         "dx; recompile the program (the memory plan keeps them apart)",
         call.where(), a.dx.spec->name);
}

void prepare_conv_bn_bwd(const OpCall& call, const ConvBnBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = conv_problem(call, a.x, a.w, a.dconv, a.stride, a.padding);
  check_bwd(call, a);
  // wgrad uses the side stream's workspace, dgrad the main one's.
  be.request_workspace(a.in_scale ? prepare_seam_wgrad(be, p, seam_input_of(a), a.dconv.data, a.dw.data, call.where())
                                  : be.graphs().prepare(kConvWgradGraph, p),
                       1);
  if (a.dx) be.request_workspace(be.graphs().prepare(kConvDgradGraph, p), 0);
}

void conv_bn_bwd(const OpCall& call, const ConvBnBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const ConvProblem p = conv_problem(call, a.x, a.w, a.dconv, a.stride, a.padding);
  check_bwd(call, a);
  be.order(0, 1);  // dconv was written on the main stream
  if (a.in_scale) {  // a seam's consumer: wgrad of the input its forward convolved
    run_seam_wgrad(be, p, seam_input_of(a), a.dconv.data, a.dw.data, be.workspace(1), be.stream(1), where);
  } else {
    Pointers wg;
    wg.dy = a.dconv.data, wg.x = a.x.data, wg.dw = a.dw.data;
    be.graphs().run(kConvWgradGraph, p, wg, be.workspace(1), be.stream(1), where);
  }
  if (a.dx) {  // absent when the convolution reads the data batch
    // Write after read: if dx is placed over what wgrad reads, dgrad may only start once wgrad has read it.
    if (overlaps(a.dx, a.x) || overlaps(a.dx, a.x_applied)) be.order(1, 0);
    Pointers dg;
    dg.dy = a.dconv.data, dg.w = a.w.data, dg.dx = a.dx.data;
    be.graphs().run(kConvDgradGraph, p, dg, be.workspace(0), be.stream(0), where);
  }
  be.end_side_work();  // wgrad may run on beside the next op
}

// --- BN_ADD_RELU_FWD / BN_ADD_RELU_INF ---

Rows check_tail(const OpCall& call, const BnAddRelu<TensorArg>& a) {
  const Rows r = rows_of(call, a.a);
  expect_like(call, a.b, "shortcut", a.a);
  expect_like(call, a.y, "output", a.a);
  expect_per_channel(call, {{&a.scale_a, "scale_a"}, {&a.shift_a, "shift_a"}}, r.c);
  if (bool(a.scale_b) != bool(a.shift_b))
    fail("{}: scale_b and shift_b come together (a shortcut to normalize) or not at all (an identity shortcut), "
         "got only {}; recompile the program",
         call.where(), a.scale_b ? "scale_b" : "shift_b");
  if (a.scale_b) expect_per_channel(call, {{&a.scale_b, "scale_b"}, {&a.shift_b, "shift_b"}}, r.c);
  if (call.op.kind == OpKind::BN_ADD_RELU_FWD && !a.bitmask)
    fail("{}: the training forward needs its 'bitmask' output (the backward reads the ReLU's bits); recompile "
         "the program",
         call.where());
  if (a.bitmask) expect_bitmask(call, a.bitmask, r.m * r.c);
  return r;
}

// BN_ADD_RELU_FWD, and BN_ADD_RELU_INF (no mask: bitmask is absent, a nullptr).
void bn_add_relu(const OpCall& call, const BnAddRelu<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const Rows r = check_tail(call, a);
  bn_add_relu_apply(a.a.dtype(), a.a.data, a.scale_a.as<float>(), a.shift_a.as<float>(), a.b.data,
                    a.scale_b.as<float>(), a.shift_b.as<float>(), r.m, r.c, a.y.data, a.bitmask.as<uint8_t>(),
                    be.stream(0), call.where());
}

// --- BN_ADD_RELU_BWD ---

// Whether the shortcut is a normalized conv output (its BN backward runs) or the identity.
bool normalized_shortcut(const OpCall& call, const BnAddReluBackward<TensorArg>& a) {
  const TensorArg* branch_b[] = {&a.b, &a.gamma_b, &a.saved_mean_b, &a.saved_inv_std_b, &a.dgamma_b, &a.dbeta_b};
  int present = 0;
  for (const TensorArg* t : branch_b) present += bool(*t);
  if (present != 0 && present != 6)
    fail("{}: the normalized shortcut's tensors (b, gamma_b, saved_mean_b, saved_inv_std_b, dgamma_b, dbeta_b) "
         "come together or not at all, got {} of 6; recompile the program",
         call.where(), present);
  if (present && !a.db)
    fail("{}: a normalized shortcut needs its gradient 'db' (its convolution's backward reads it); recompile the "
         "program",
         call.where());
  return present == 6;
}

Rows check_tail_bwd(const OpCall& call, const BnAddReluBackward<TensorArg>& a, bool normalized) {
  const Rows r = rows_of(call, a.a);
  expect_like(call, a.dy, "output gradient", a.a);
  if (a.dy2) {
    expect_like(call, a.dy2, "output gradient's second term", a.a);
    if (!a.db)
      fail("{}: the gradient's second term 'dy2' comes only with the shortcut's gradient 'db'; recompile the program",
           call.where());
  }
  expect_like(call, a.da, "gradient of a", a.a);
  expect_bitmask(call, a.bitmask, r.m * r.c);
  expect_per_channel(call,
                     {{&a.gamma_a, "gamma_a"},
                      {&a.saved_mean_a, "saved_mean_a"},
                      {&a.saved_inv_std_a, "saved_inv_std_a"},
                      {&a.dgamma_a, "dgamma_a"},
                      {&a.dbeta_a, "dbeta_a"}},
                     r.c);
  if (normalized) {
    expect_like(call, a.b, "shortcut", a.a);
    expect_per_channel(call,
                       {{&a.gamma_b, "gamma_b"},
                        {&a.saved_mean_b, "saved_mean_b"},
                        {&a.saved_inv_std_b, "saved_inv_std_b"},
                        {&a.dgamma_b, "dgamma_b"},
                        {&a.dbeta_b, "dbeta_b"}},
                       r.c);
  }
  if (a.db) {
    expect_like(call, a.db, "gradient of the shortcut", a.a);
    // One pass writes da and db while other threads still read dy, the mask, a and b.
    for (const TensorArg* out : {&a.da, &a.db})
      if (overlaps(*out, a.dy) || overlaps(*out, a.dy2) || overlaps(*out, a.bitmask) || overlaps(*out, a.a) ||
          overlaps(*out, a.b) || (out == &a.da && overlaps(a.da, a.db)))
        fail("{}: '{}' shares memory with another tensor of the block end's backward pass; recompile the program "
             "(the memory plan keeps them apart)",
             call.where(), out->spec->name);
  }
  return r;
}

// A normalized shortcut's sums come from the same pass as the body's (bn_backward_reduce_pair).
size_t bn_add_relu_bwd_workspace_bytes(bool normalized, const Rows& r) {
  return normalized ? bn_backward_reduce_pair_workspace_bytes(r.m, r.c) : bn_backward_reduce_workspace_bytes(r.m, r.c);
}

void prepare_bn_add_relu_bwd(const OpCall& call, const BnAddReluBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const bool normalized = normalized_shortcut(call, a);
  const Rows r = check_tail_bwd(call, a, normalized);
  WorkspaceLayout layout;
  layout.take(bn_add_relu_bwd_workspace_bytes(normalized, r));
  be.request_workspace(layout.used());
}

void bn_add_relu_bwd(const OpCall& call, const BnAddReluBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const bool normalized = normalized_shortcut(call, a);
  const Rows r = check_tail_bwd(call, a, normalized);
  const DType dt = a.a.dtype();
  const auto* bits = a.bitmask.as<uint8_t>();
  void* ws = be.workspace(0);
  const size_t ws_bytes = bn_add_relu_bwd_workspace_bytes(normalized, r);
  cudaStream_t stream = be.stream(0);
  // Pass 1, every branch's sums (dbeta = sum of g, dgamma = sum of g * xhat), before any output
  // is written: with a normalized shortcut both branches in one pass over dy and the mask (one
  // pass per branch measured 2% slower on ResNet-50, docs/results.md).
  const BnReduceBranch sums_a{a.a.data, a.saved_mean_a.as<float>(), a.saved_inv_std_a.as<float>(),
                              a.dbeta_a.as<float>(), a.dgamma_a.as<float>()},
      sums_b{a.b.data, a.saved_mean_b.as<float>(), a.saved_inv_std_b.as<float>(), a.dbeta_b.as<float>(),
             a.dgamma_b.as<float>()};
  if (normalized)
    bn_backward_reduce_pair(dt, a.dy.data, a.dy2.data, bits, sums_a, sums_b, r.m, r.c, ws, ws_bytes, stream, where);
  else
    bn_backward_reduce(dt, a.dy.data, a.dy2.data, bits, sums_a.x, sums_a.saved_mean, sums_a.saved_inv_std, r.m, r.c,
                       sums_a.sum_dy, sums_a.sum_dy_xhat, ws, ws_bytes, stream, where);
  // Pass 2: da and the shortcut's gradient in one pass over dy and the mask; without a shortcut
  // gradient (the shortcut is the data batch), BN's backward apply alone.
  const BnBranch branch_a{a.gamma_a.as<float>(), a.saved_mean_a.as<float>(), a.saved_inv_std_a.as<float>(),
                          a.dbeta_a.as<float>(), a.dgamma_a.as<float>()};
  if (!a.db) {
    bn_backward_apply(dt, a.dy.data, bits, a.a.data, branch_a.gamma, branch_a.saved_mean, branch_a.saved_inv_std,
                      branch_a.sum_dy, branch_a.sum_dy_xhat, r.m, r.c, r.m, a.da.data, stream, where);
    return;
  }
  const BnBranch branch_b{a.gamma_b.as<float>(), a.saved_mean_b.as<float>(), a.saved_inv_std_b.as<float>(),
                          a.dbeta_b.as<float>(), a.dgamma_b.as<float>()};
  bn_add_relu_backward_apply(dt, a.dy.data, a.dy2.data, bits, a.a.data, branch_a, a.b.data,
                             normalized ? &branch_b : nullptr, r.m, r.c, a.da.data, a.db.data, stream, where);
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable resblock_cuda_ops{
    Device::CUDA,
    {kernel<ConvBnForward, cuda::conv_bn_fwd, cuda::prepare_conv_bn_fwd>(),
     kernel<ConvBnInference, cuda::conv_bn_inf, cuda::prepare_conv_bn_inf>(),
     kernel<ConvBnBackward, cuda::conv_bn_bwd, cuda::prepare_conv_bn_bwd>(),
     kernel<BnAddRelu, cuda::bn_add_relu>(),
     kernel<BnAddRelu, cuda::bn_add_relu>(OpKind::BN_ADD_RELU_INF),
     kernel<BnAddReluBackward, cuda::bn_add_relu_bwd, cuda::prepare_bn_add_relu_bwd>()}};
}  // namespace kiln::ops
