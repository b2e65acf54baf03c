// LINEAR_FWD / LINEAR_BWD on the GPU through cuBLASLt (linear_cuda.cpp): each op's algorithms
// are chosen when the executable is prepared, within the backend's CudaOptions::linear_* limits,
// which also requests their workspace; the GEMMs run on the backend's main stream with its
// workspace.
#include "ops/common/op_args.h"
#include "ops/linear/linear_contract.h"
#include "ops/linear/linear_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

// An optional tensor that is present must have `shape` and the input's dtype.
void expect(const OpCall& call, const TensorArg& t, const char* role, const Shape& shape, DType dtype) {
  if (!t) return;
  if (t.shape() != shape)
    fail("{}: {} '{}' has shape {} but the linear layer needs {}", call.where(), role, t.spec->name,
         shape_str(t.shape()), shape_str(shape));
  if (t.dtype() != dtype)
    fail("{}: {} '{}' is {} but the input is {}; in mixed precision the layer reads {} copies of its weight and "
         "bias (recompile the program)",
         call.where(), role, t.spec->name, dtype_name(t.dtype()), dtype_name(dtype), dtype_name(dtype));
}

// x (N, F) and w (O, F), of a dtype the GPU layer runs: the shape the other tensors must follow.
LinearShape shape_of(const OpCall& call, const TensorArg& x, const TensorArg& w) {
  if (x.shape().size() != 2)
    fail("{}: input '{}' has shape {} but a linear layer takes (N, F); add a flatten layer before it", call.where(),
         x.spec->name, shape_str(x.shape()));
  if (w.shape().size() != 2 || w.shape()[1] != x.shape()[1])
    fail("{}: weight '{}' has shape {} but the input {} needs (out_features, {})", call.where(), w.spec->name,
         shape_str(w.shape()), shape_str(x.shape()), x.shape()[1]);
  const DType dtype = x.dtype();
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    fail("{}: dtype {} is not supported by the GPU linear layer (use fp32, fp16 or bf16)", call.where(),
         dtype_name(dtype));
  expect(call, w, "weight", w.shape(), dtype);
  return {x.shape()[0], x.shape()[1], w.shape()[0]};
}

LinearShape checked(const OpCall& call, const LinearForward<TensorArg>& a) {
  const LinearShape s = shape_of(call, a.x, a.w);
  expect(call, a.bias, "bias", {s.out}, a.x.dtype());
  expect(call, a.y, "output", {s.n, s.out}, a.x.dtype());
  return s;
}

LinearShape checked(const OpCall& call, const LinearBackward<TensorArg>& a) {
  const LinearShape s = shape_of(call, a.x, a.w);
  expect(call, a.dy, "output gradient", {s.n, s.out}, a.x.dtype());
  expect(call, a.dx, "input gradient", {s.n, s.in}, a.x.dtype());
  expect(call, a.dw, "weight gradient", {s.out, s.in}, a.x.dtype());
  expect(call, a.dbias, "bias gradient", {s.out}, a.x.dtype());
  return s;
}

LinearTensors tensors(const LinearForward<TensorArg>& a) {
  LinearTensors t;
  t.x = a.x.data, t.w = a.w.data, t.bias = a.bias.data, t.y = a.y.data;
  return t;
}

LinearTensors tensors(const LinearBackward<TensorArg>& a) {
  LinearTensors t;
  t.dy = a.dy.data, t.x = a.x.data, t.w = a.w.data, t.dx = a.dx.data, t.dw = a.dw.data, t.dbias = a.dbias.data;
  return t;
}

// The algorithm search's limits, from the options the backend holds (KILN_* overrides applied;
// the ranges were checked when it started).
LinearLimits limits_of(const CudaBackend& be) {
  const CudaOptions& o = be.options();
  return {uint64_t(o.linear_workspace_mib) << 20, o.linear_candidates};
}

void prepare_fwd(const OpCall& call, const LinearForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const LinearShape s = checked(call, a);
  be.request_workspace(linear_forward_prepare(be.device_ordinal(), s, a.x.dtype(), tensors(a), limits_of(be),
                                            call.where()));
}

void prepare_bwd(const OpCall& call, const LinearBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const LinearShape s = checked(call, a);
  be.request_workspace(linear_backward_prepare(be.device_ordinal(), s, a.x.dtype(), tensors(a), limits_of(be),
                                             call.where()));
}

void linear_fwd(const OpCall& call, const LinearForward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const LinearShape s = checked(call, a);
  linear_forward(be.device_ordinal(), s, a.x.dtype(), tensors(a), limits_of(be), be.workspace(0), be.stream(0),
                 call.where());
}

// Both GEMMs (and the bias reduction, where cuBLASLt's epilogue cannot do it) on the main stream:
// the layer's backward is small beside the convolutions', not worth a side stream and its joins.
void linear_bwd(const OpCall& call, const LinearBackward<TensorArg>& a) {
  CudaBackend& be = cuda_backend(call.backend, call.where());
  const LinearShape s = checked(call, a);
  linear_backward(be.device_ordinal(), s, a.x.dtype(), tensors(a), limits_of(be), be.workspace(0), be.stream(0),
                  call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable linear_cuda_ops{Device::CUDA,
                                     {kernel<LinearForward, cuda::linear_fwd, cuda::prepare_fwd>(),
                                      kernel<LinearBackward, cuda::linear_bwd, cuda::prepare_bwd>()}};
}  // namespace kiln::ops
