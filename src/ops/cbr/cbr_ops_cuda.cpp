// The fused CBR operator on the GPU (docs/cbr.md):
//   forward    conv + statistics (conv_stats_cuda.h) -> finalize (fp32, length C) -> apply + ReLU +
//              bit mask (one pass);
//   backward   dY*mask reduce -> dconv (two passes, the masked dY never stored) -> wgrad on the
//              side stream beside dgrad on the main stream, and on beside the next op;
//   inference  conv -> *scale -> +shift -> ReLU as one cuDNN graph when supported, otherwise conv
//              then one scale/shift/ReLU pass (the choice is logged once per shape).
// In a seam (fusion across layers, cbr_seam_cuda.h): a producer stops after finalize, with its scale
// and shift as outputs, and its backward recomputes the ReLU mask from them; a consumer's stage 1
// writes its input's BatchNorm + ReLU applied and convolves that, and its backward writes the
// applied input again for wgrad.
#include <cstdio>
#include <mutex>
#include <set>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/cbr/cbr_contract.h"
#include "ops/cbr/cbr_cudnn_graphs_cuda.h"
#include "ops/cbr/cbr_cuda_kernels.h"
#include "ops/cbr/cbr_seam_cuda.h"
#include "ops/common/op_args.h"
#include "ops/common/workspace_cuda.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "ops/conv/conv_stats_cuda.h"
#include "ops/conv/conv_wgrad_cuda.h"
#include "runtime/cuda/cuda_backend.h"

namespace kiln::cuda {
namespace {

// The ops' tensors and attributes: CbrForward, CbrBackward (also CBR_BWD_FIRST, without dx) and
// CbrInference in ops/cbr/cbr_contract.h.
struct Scratch {
  float *sum, *sqsum, *scale, *shift;
  void* reduce;
  size_t reduce_bytes;
  void* conv;  // cuDNN workspace
  size_t used;
};

Scratch scratch(void* base, int64_t m, int64_t c, size_t conv_bytes) {
  WorkspaceLayout layout(base);
  Scratch s;
  s.sum = layout.floats(c), s.sqsum = layout.floats(c), s.scale = layout.floats(c), s.shift = layout.floats(c);
  s.reduce_bytes = std::max(channel_sums_workspace_bytes(m, c), cbr_backward_workspace_bytes(m, c));
  s.reduce = layout.take(s.reduce_bytes);
  s.conv = layout.take(conv_bytes);
  s.used = layout.used();
  return s;
}

int64_t rows(const TensorArg& y) { return y.numel() / y.shape().back(); }

// The forward writes y and its bit mask, or (a seam's producer) neither but its scale and shift.
void check_outputs(const OpCall& call, const CbrForward<TensorArg>& a) {
  if (bool(a.y) != bool(a.bitmask) || (!a.y && (!a.scale || !a.shift)))
    fail("{}: the CBR forward writes y and its bit mask, or (a seam's producer) scale and shift instead; got "
         "y {}, bitmask {}, scale {}, shift {}; recompile the program",
         call.where(), bool(a.y), bool(a.bitmask), bool(a.scale), bool(a.shift));
}

// The backward's ReLU mask: the forward's bits, or recomputed from a seam producer's scale / shift.
ReluMask relu_mask(const OpCall& call, const CbrBackward<TensorArg>& a) {
  if (a.bitmask) return a.bitmask.as<uint8_t>();
  if (!a.scale || !a.shift)
    fail("{}: the CBR backward needs the forward's bit mask, or (a seam's producer) its scale and shift; recompile "
         "the program",
         call.where());
  return ReluMask(a.scale.as<float>(), a.shift.as<float>());
}

// wgrad of x, or of a seam consumer's applied input (cbr_seam_cuda.h), on `stream`.
void wgrad(CudaBackend& be, const CbrBackward<TensorArg>& a, const ConvProblem& p, void* workspace,
           cudaStream_t stream, const std::string& where) {
  if (a.in_scale)
    run_seam_wgrad(be, p, seam_input_of(a), a.dconv.data, a.dw.data, workspace, stream, where);
  else
    run_wgrad(be, p, a.x.data, a.dconv.data, a.dw.data, workspace, stream, where);
}

void prepare_fwd(const OpCall& call, const CbrForward<TensorArg>& a) {
  check_outputs(call, a);
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = conv_problem(call, a.x, a.w, a.conv_out, a.stride, a.padding);
  const size_t conv =
      a.in_scale
          ? prepare_seam_conv_stats(be, p, seam_input_of(a), a.w.data, a.conv_out.data, call.where())
          : prepare_conv_stats(be, p, a.x.data, a.w.data, a.conv_out.data, call.where());
  be.request_workspace(scratch(nullptr, rows(a.conv_out), p.k, conv).used);
}

void cbr_fwd(const OpCall& call, const CbrForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const TensorArg &x = a.x, &conv_out = a.conv_out;
  const ConvProblem p = conv_problem(call, x, a.w, conv_out, a.stride, a.padding);
  const int64_t m = rows(conv_out);
  if (m < 2) fail("{}: batch statistics need more than one value per channel, got {}", where, m);
  const Scratch s = scratch(be.workspace(0), m, p.k, 0);
  // Stage 1: the convolution and the per-channel sums of its output (in the same pass where the
  // chosen engine can); a seam's consumer convolves its input's BatchNorm + ReLU.
  if (a.in_scale)
    run_seam_conv_stats(be, p, seam_input_of(a), a.w.data, conv_out.data, s.sum, s.sqsum, s.reduce, s.reduce_bytes,
                        s.conv, be.stream(0), where);
  else
    run_conv_stats(be, p, x.data, a.w.data, conv_out.data, s.sum, s.sqsum, s.reduce, s.reduce_bytes, s.conv,
                   be.stream(0), where);
  // Stage 2: finalize (saved statistics, scale/shift, running statistics as PyTorch). A seam's
  // producer keeps scale and shift as its outputs, for its consumers, and stops there.
  float* scale = a.y ? s.scale : a.scale.as<float>();
  float* shift = a.y ? s.shift : a.shift.as<float>();
  bn_finalize(s.sum, s.sqsum, m, a.gamma.as<float>(), a.beta.as<float>(), a.eps, a.momentum,
              a.running_mean.as<float>(), a.running_var.as<float>(), a.saved_mean.as<float>(),
              a.saved_inv_std.as<float>(), scale, shift, p.k, be.stream(0), where);
  if (!a.y) return;
  // Stage 3: y = relu(conv_out * scale + shift) and the 1-bit mask in one pass.
  cbr_apply_relu_bitmask(conv_out.dtype(), conv_out.data, scale, shift, m, p.k, a.y.data,
                         a.bitmask.as<uint8_t>(), be.stream(0), where);
}

void prepare_bwd(const OpCall& call, const CbrBackward<TensorArg>& a) {
  relu_mask(call, a);
  if (a.in_scale && (!a.in_shift || !a.x_applied))
    fail("{}: a seam consumer's backward needs in_scale, in_shift and its x_applied scratch; recompile the program",
         call.where());
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = conv_problem(call, a.x, a.w, a.conv_out, a.stride, a.padding);
  const size_t wgrad = a.in_scale ? prepare_seam_wgrad(be, p, seam_input_of(a), a.dconv.data, a.dw.data, call.where())
                                  : prepare_wgrad(be, p, a.x.data, a.dconv.data, a.dw.data, call.where());
  const int64_t m = rows(a.conv_out);
  if (!a.dx) {  // a first layer: wgrad alone, on the main stream
    be.request_workspace(scratch(nullptr, m, p.k, wgrad).used, 0);
    return;
  }
  // wgrad on the side stream, dgrad on the main one
  const size_t dgrad = be.graphs().prepare(kConvDgradGraph, p);
  be.request_workspace(scratch(nullptr, m, p.k, dgrad).used, 0);
  be.request_workspace(wgrad, 1);
}

// wgrad on the side stream beside dgrad on the main one. A first layer has no dgrad: its wgrad runs
// on the main stream (nothing to overlap, and the side stream's workspace then needs no room for
// the largest wgrad of the network, the first layer's).
void wgrad_beside_dgrad(CudaBackend& be, const CbrBackward<TensorArg>& a, const ConvProblem& p, const Scratch& s,
                        const std::string& where) {
  const TensorArg &x = a.x, &dx = a.dx, &dconv = a.dconv;
  if (!dx) {
    wgrad(be, a, p, s.conv, be.stream(0), where);
    return;
  }
  be.order(0, 1);
  wgrad(be, a, p, be.workspace(1), be.stream(1), where);
  // Write after read: if dX is placed over what wgrad reads, dgrad may only start once wgrad has read it.
  if (overlaps(dx, x) || overlaps(dx, a.x_applied)) be.order(1, 0);
  Pointers dg;
  dg.dy = dconv.data, dg.w = a.w.data, dg.dx = dx.data;
  be.graphs().run(kConvDgradGraph, p, dg, s.conv, be.stream(0), where);
}

void cbr_bwd(const OpCall& call, const CbrBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const TensorArg &dy = a.dy, &conv_out = a.conv_out;
  const ConvProblem p = conv_problem(call, a.x, a.w, conv_out, a.stride, a.padding);
  const int64_t m = rows(conv_out);
  const Scratch s = scratch(be.workspace(0), m, p.k, 0);
  const ReluMask bits = relu_mask(call, a);
  const float *gamma = a.gamma.as<float>(), *mean = a.saved_mean.as<float>(), *inv_std = a.saved_inv_std.as<float>();
  float *dgamma = a.dgamma.as<float>(), *dbeta = a.dbeta.as<float>();
  // ReLU mask and BN backward: pass 1, dbeta and dgamma; pass 2, dconv.
  cbr_backward_reduce(dy.dtype(), dy.data, bits, conv_out.data, mean, inv_std, m, p.k, dgamma, dbeta, s.reduce,
                      s.reduce_bytes, be.stream(0), where);
  cbr_backward_apply(dy.dtype(), dy.data, bits, conv_out.data, gamma, mean, inv_std, dgamma, dbeta, m, p.k, 0, m,
                     a.dconv.data, be.stream(0), where);
  wgrad_beside_dgrad(be, a, p, s, where);
  be.end_side_work();  // wgrad may run on beside the next op
}

// Inference runs the convolution, scale, shift and ReLU as one cuDNN graph when cuDNN has a plan
// for it that is not slower than the plain convolution followed by our scale/shift/ReLU pass.
// cuDNN's fused fp32 plans can be far slower than its plain ones (digits CNN on an H200: 0.34-0.68
// ms against 0.03-0.04 ms). That pass reads and writes y once, traffic a convolution that writes y
// never takes much less than, so the two together are bounded by about twice the convolution's
// time. Decided from the tuned (or plan-cache) times; untimed plans keep the fused graph. The
// comparison is made only where the training forward has no conv + genstats graph (fp32, bf16,
// fp16 with few input channels) and so tunes the plain graph anyway: elsewhere it would tune a
// graph for the comparison alone, at the first step. The same answer at prepare and at run: both
// read the times prepare recorded.
bool fused_inference(CudaBackend& be, const ConvProblem& p) {
  if (!be.graphs().supported(kConvScaleShiftReluGraph, p)) return false;
  if (be.graphs().supported(kConvFpropGenstatsGraph, p)) return true;
  const double fused = be.graphs().plan_ms(kConvScaleShiftReluGraph, p);
  if (fused <= 0) return true;
  const double conv = be.graphs().plan_ms(kConvFpropGraph, p);
  return conv <= 0 || fused <= 2 * conv;
}

void log_inference_choice(const ConvProblem& p, bool fused) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  const std::string shape = conv_problem_str(p);
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(shape).second)
    std::fprintf(stderr, "kiln: CBR inference %s: %s\n", shape.c_str(),
                 fused ? "one cuDNN graph (conv, scale, shift, ReLU)" : "conv graph + scale/shift/ReLU kernel");
}

void prepare_inf(const OpCall& call, const CbrInference<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = conv_problem(call, a.x, a.w, a.y, a.stride, a.padding);
  const bool fused = fused_inference(be, p);
  log_inference_choice(p, fused);
  const size_t conv = be.graphs().prepare(fused ? kConvScaleShiftReluGraph : kConvFpropGraph, p);
  be.request_workspace(scratch(nullptr, rows(a.y), p.k, conv).used);
}

void cbr_inf(const OpCall& call, const CbrInference<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const std::string where = call.where();
  const TensorArg &x = a.x, &y = a.y;
  const ConvProblem p = conv_problem(call, x, a.w, y, a.stride, a.padding);
  const int64_t m = rows(y);
  const Scratch s = scratch(be.workspace(0), m, p.k, 0);
  bn_inference_scale_shift(a.gamma.as<float>(), a.beta.as<float>(), a.running_mean.as<float>(),
                           a.running_var.as<float>(), a.eps, p.k, s.scale, s.shift, be.stream(0), where);
  Pointers ptr;
  ptr.x = x.data, ptr.w = a.w.data, ptr.y = y.data, ptr.scale = s.scale, ptr.shift = s.shift;
  if (fused_inference(be, p)) {
    be.graphs().run(kConvScaleShiftReluGraph, p, ptr, s.conv, be.stream(0), where);
  } else {
    be.graphs().run(kConvFpropGraph, p, ptr, s.conv, be.stream(0), where);
    bn_apply(y.dtype(), y.data, s.scale, s.shift, m, p.k, true, y.data, nullptr, nullptr, be.stream(0), where);
  }
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable cbr_cuda_ops{Device::CUDA,
                                  {kernel<CbrForward, cuda::cbr_fwd, cuda::prepare_fwd>(),
                                   kernel<CbrBackward, cuda::cbr_bwd, cuda::prepare_bwd>(),
                                   kernel<CbrBackward, cuda::cbr_bwd, cuda::prepare_bwd>(OpKind::CBR_BWD_FIRST),
                                   kernel<CbrInference, cuda::cbr_inf, cuda::prepare_inf>()}};
}  // namespace kiln::ops
