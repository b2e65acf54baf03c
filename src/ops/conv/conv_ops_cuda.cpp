// CONV_FWD / CONV_DGRAD / CONV_WGRAD on the GPU, any window (strides, the padding of each side,
// dilation, groups): cuDNN graphs, built and tuned when the executable is prepared, run on the
// main stream with the backend's workspace; the bias (fp32, also in mixed precision) added after
// the forward's convolution and its gradient summed after the wgrad's (conv_bias_cuda.h).
#include <algorithm>

#include "ops/conv/conv_bias_cuda.h"
#include "ops/conv/conv_contract.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "runtime/cuda/cuda_backend.h"

namespace kiln::cuda {
namespace {

// The bias, or its gradient, is an fp32 vector of the K output channels.
void check_bias(const OpCall& call, const TensorArg& bias, const ConvProblem& p) {
  if (!bias) return;
  if (bias.dtype() != DType::F32 || bias.shape() != Shape{p.k})
    fail("{}: '{}' is {} {} but a convolution's bias is fp32 of its {} output channels (also in mixed precision)",
         call.where(), bias.spec->name, dtype_name(bias.dtype()), shape_str(bias.shape()), p.k);
}

int64_t output_rows(const ConvProblem& p) { return p.n * p.ho * p.wo; }

ConvProblem problem(const OpCall& call, const ConvForward<TensorArg>& a) {
  return conv_problem(call, a.x, a.w, a.y, a.window);
}
ConvProblem problem(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  return conv_problem(call, a.dx, a.w, a.dy, a.window);
}
ConvProblem problem(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  return conv_problem(call, a.x, a.dw, a.dy, a.window);
}

void prepare_fwd(const OpCall& call, const ConvForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = problem(call, a);
  check_bias(call, a.bias, p);
  be.request_workspace(be.graphs().prepare(kConvFpropGraph, p));
}

void prepare_dgrad(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  be.request_workspace(be.graphs().prepare(kConvDgradGraph, problem(call, a)));
}

void prepare_wgrad(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = problem(call, a);
  check_bias(call, a.dbias, p);
  size_t bytes = be.graphs().prepare(kConvWgradGraph, p);
  // The bias sums run after the wgrad on the same stream, so they share its workspace.
  if (a.dbias) bytes = std::max(bytes, conv_bias_grad_workspace_bytes(output_rows(p), p.k));
  be.request_workspace(bytes);
}

void conv_fwd(const OpCall& call, const ConvForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = problem(call, a);
  Pointers ptr;
  ptr.x = a.x.data, ptr.w = a.w.data, ptr.y = a.y.data;
  be.graphs().run(kConvFpropGraph, p, ptr, be.workspace(0), be.stream(0), call.where());
  if (a.bias) conv_add_bias(p.io, a.bias.as<const float>(), output_rows(p), p.k, a.y.data, be.stream(0), call.where());
}

void conv_dgrad(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers ptr;
  ptr.dy = a.dy.data, ptr.w = a.w.data, ptr.dx = a.dx.data;
  be.graphs().run(kConvDgradGraph, problem(call, a), ptr, be.workspace(0), be.stream(0), call.where());
}

void conv_wgrad(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const ConvProblem p = problem(call, a);
  Pointers ptr;
  ptr.dy = a.dy.data, ptr.x = a.x.data, ptr.dw = a.dw.data;
  be.graphs().run(kConvWgradGraph, p, ptr, be.workspace(0), be.stream(0), call.where());
  if (a.dbias)
    conv_bias_grad(p.io, a.dy.data, output_rows(p), p.k, a.dbias.as<float>(), be.workspace(0), be.workspace_bytes(0),
                   be.stream(0), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable conv_cuda_ops{Device::CUDA,
                                   {kernel<ConvForward, cuda::conv_fwd, cuda::prepare_fwd>(),
                                    kernel<ConvDgrad, cuda::conv_dgrad, cuda::prepare_dgrad>(),
                                    kernel<ConvWgrad, cuda::conv_wgrad, cuda::prepare_wgrad>()}};
}  // namespace kiln::ops
