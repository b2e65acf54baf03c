// CONV_FWD / CONV_DGRAD / CONV_WGRAD on the GPU: cuDNN graphs, built and tuned when the
// executable is prepared, run on the main stream with the backend's workspace.
#include "ops/conv/conv_cuda.h"

#include "runtime/cuda/cuda_backend.h"

namespace kiln::cuda {

ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  if (xs.size() != 4 || ws.size() != 4 || xs[3] != ws[3])
    fail("{}: input {} and filter {} do not form an NHWC/KRSC convolution", call.where(), shape_str(xs),
         shape_str(ws));
  if (x.dtype() != w.dtype())
    fail("{}: input is {} but the filter is {}; mixed precision convolutions read the filter's {} copy",
         call.where(), dtype_name(x.dtype()), dtype_name(w.dtype()), dtype_name(x.dtype()));
  return make_conv_problem(xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], call.op.attrs.stride,
                           call.op.attrs.padding, x.dtype());
}

namespace {

void reject_bias(const OpCall& call, const TensorArg& bias) {
  if (bias) fail("{}: conv bias is not supported on the GPU yet; use conv(..., bias=false) (BN follows anyway)", call.where());
}

template <GraphKind Kind>
void prepare(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const TensorArg& x = Kind == GraphKind::CONV_FPROP ? call.in[0] : Kind == GraphKind::CONV_DGRAD ? call.out[0] : call.in[1];
  const TensorArg& w = Kind == GraphKind::CONV_FPROP ? call.in[1] : Kind == GraphKind::CONV_DGRAD ? call.in[1] : call.out[0];
  if (Kind == GraphKind::CONV_FPROP && call.in.size() > 2) reject_bias(call, call.in[2]);
  if (Kind == GraphKind::CONV_WGRAD && call.out.size() > 1) reject_bias(call, call.out[1]);
  be.request_workspace(be.graphs().prepare(Kind, conv_problem(call, x, w)));
}

void conv_fwd(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers p;
  p.x = call.in[0].data, p.w = call.in[1].data, p.y = call.out[0].data;
  be.graphs().run(GraphKind::CONV_FPROP, conv_problem(call, call.in[0], call.in[1]), p, be.workspace(0),
                  be.stream(0), call.where());
}

void conv_dgrad(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers p;
  p.dy = call.in[0].data, p.w = call.in[1].data, p.dx = call.out[0].data;
  be.graphs().run(GraphKind::CONV_DGRAD, conv_problem(call, call.out[0], call.in[1]), p, be.workspace(0),
                  be.stream(0), call.where());
}

void conv_wgrad(const OpCall& call) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  Pointers p;
  p.dy = call.in[0].data, p.x = call.in[1].data, p.dw = call.out[0].data;
  be.graphs().run(GraphKind::CONV_WGRAD, conv_problem(call, call.in[1], call.out[0]), p, be.workspace(0),
                  be.stream(0), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln {
void register_conv_cuda() {
  using namespace kiln::cuda;
  register_op(Device::CUDA, OpKind::CONV_FWD, conv_fwd, prepare<GraphKind::CONV_FPROP>);
  register_op(Device::CUDA, OpKind::CONV_DGRAD, conv_dgrad, prepare<GraphKind::CONV_DGRAD>);
  register_op(Device::CUDA, OpKind::CONV_WGRAD, conv_wgrad, prepare<GraphKind::CONV_WGRAD>);
}
}  // namespace kiln
