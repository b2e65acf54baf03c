// CONV_FWD / CONV_DGRAD / CONV_WGRAD on the GPU: cuDNN graphs, built and tuned when the
// executable is prepared, run on the main stream with the backend's workspace.
#include "ops/conv/conv_contract.h"
#include "ops/conv/conv_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"
#include "runtime/cuda/cuda_backend.h"

namespace kiln::cuda {
namespace {

void reject_bias(const OpCall& call, const TensorArg& bias) {
  if (bias) fail("{}: conv bias is not supported on the GPU yet; use conv(..., bias=false) (BN follows anyway)", call.where());
}

ConvProblem problem(const OpCall& call, const ConvForward<TensorArg>& a) {
  return conv_problem(call, a.x, a.w, a.y, a.stride, a.padding);
}
ConvProblem problem(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  return conv_problem(call, a.dx, a.w, a.dy, a.stride, a.padding);
}
ConvProblem problem(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  return conv_problem(call, a.x, a.dw, a.dy, a.stride, a.padding);
}

void prepare_fwd(const OpCall& call, const ConvForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  reject_bias(call, a.bias);
  be.request_workspace(be.graphs().prepare(kConvFpropGraph, problem(call, a)));
}

void prepare_dgrad(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  be.request_workspace(be.graphs().prepare(kConvDgradGraph, problem(call, a)));
}

void prepare_wgrad(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  reject_bias(call, a.dbias);
  be.request_workspace(be.graphs().prepare(kConvWgradGraph, problem(call, a)));
}

void conv_fwd(const OpCall& call, const ConvForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers p;
  p.x = a.x.data, p.w = a.w.data, p.y = a.y.data;
  be.graphs().run(kConvFpropGraph, problem(call, a), p, be.workspace(0), be.stream(0), call.where());
}

void conv_dgrad(const OpCall& call, const ConvDgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers p;
  p.dy = a.dy.data, p.w = a.w.data, p.dx = a.dx.data;
  be.graphs().run(kConvDgradGraph, problem(call, a), p, be.workspace(0), be.stream(0), call.where());
}

void conv_wgrad(const OpCall& call, const ConvWgrad<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers p;
  p.dy = a.dy.data, p.x = a.x.data, p.dw = a.dw.data;
  be.graphs().run(kConvWgradGraph, problem(call, a), p, be.workspace(0), be.stream(0), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable conv_cuda_ops{Device::CUDA,
                                   {kernel<ConvForward, cuda::conv_fwd, cuda::prepare_fwd>(),
                                    kernel<ConvDgrad, cuda::conv_dgrad, cuda::prepare_dgrad>(),
                                    kernel<ConvWgrad, cuda::conv_wgrad, cuda::prepare_wgrad>()}};
}  // namespace kiln::ops
