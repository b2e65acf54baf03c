// MAXPOOL_*, AVGPOOL_*, GAP_* and ADAPTIVE_AVGPOOL_* on the GPU, on the backend's main stream. The window's geometry
// is the CPU's (cpu::PoolGeom::make, with its errors), so both backends accept the same programs;
// then the tensors are checked against it and the kernels (pool_cuda.h) launched.
#include "ops/common/op_args.h"
#include "ops/pool/pool_checks.h"
#include "ops/pool/pool_contract.h"
#include "ops/pool/pool_cpu.h"
#include "ops/pool/pool_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

// Errors read "MAXPOOL_FWD 'stem.pool': ...", as call.where() names ops.
cpu::PoolGeom geometry(const OpCall& call, const Shape& x, const PoolWindow& w) {
  return cpu::PoolGeom::make(x, w.kernel, w.stride, w.padding, op_kind_name(call.op.kind), layer_name(call),
                             w.ceil_mode);
}

// As on the CPU, a tensor must hold `shape`'s element count (the layout is implied) and have `dtype`.
void expect_tensor(const OpCall& call, const TensorArg& t, const char* role, const Shape& shape, DType dtype) {
  if (t.numel() != numel(shape))
    fail("{}: {} '{}' has shape {} but {} is expected; recompile the program", call.where(), role, t.spec->name,
         shape_str(t.shape()), shape_str(shape));
  if (t.dtype() != dtype)
    fail("{}: {} '{}' is {} but {} is expected; recompile the program", call.where(), role, t.spec->name,
         dtype_name(t.dtype()), dtype_name(dtype));
}

// MAXPOOL_FWD (argmax given) and MAXPOOL_INF (argmax absent).
void maxpool(const OpCall& call, const TensorArg& x, const TensorArg& y, const TensorArg* argmax,
             const PoolWindow& window) {
  const cpu::PoolGeom g = geometry(call, x.shape(), window);
  expect_tensor(call, y, "y", g.out_shape(), x.dtype());
  maxpool_forward(x.dtype(), g, x.data, y.data, argmax ? pool::maxpool_argmax(call, *argmax, g) : nullptr,
                  main_stream(call), call.where());
}

void maxpool_fwd(const OpCall& call, const MaxPoolForward<TensorArg>& a) {
  maxpool(call, a.x, a.y, &a.argmax, a.window);
}
void maxpool_inf(const OpCall& call, const MaxPoolInference<TensorArg>& a) {
  maxpool(call, a.x, a.y, nullptr, a.window);
}

void maxpool_bwd(const OpCall& call, const MaxPoolBackward<TensorArg>& a) {
  const cpu::PoolGeom g = geometry(call, a.dx.shape(), a.window);
  expect_tensor(call, a.dy, "dy", g.out_shape(), a.dx.dtype());
  maxpool_backward(a.dx.dtype(), g, a.dy.data, pool::maxpool_argmax(call, a.argmax, g), a.dx.data, main_stream(call),
                   call.where());
}

void avgpool_fwd(const OpCall& call, const AvgPoolForward<TensorArg>& a) {
  const cpu::PoolGeom g = geometry(call, a.x.shape(), a.window);
  expect_tensor(call, a.y, "y", g.out_shape(), a.x.dtype());
  avgpool_forward(a.x.dtype(), g, a.count_include_pad, a.x.data, a.y.data, main_stream(call), call.where());
}

void avgpool_bwd(const OpCall& call, const AvgPoolBackward<TensorArg>& a) {
  const cpu::PoolGeom g = geometry(call, a.dx.shape(), a.window);
  expect_tensor(call, a.dy, "dy", g.out_shape(), a.dx.dtype());
  avgpool_backward(a.dx.dtype(), g, a.count_include_pad, a.dy.data, a.dx.data, main_stream(call), call.where());
}

// Global average pooling: the feature map (N, H, W, C) and its pooled side (N, C); the map's
// shape sets both.
const Shape& feature_map(const OpCall& call, const TensorArg& map, const TensorArg& pooled, const char* pooled_role) {
  const Shape& s = map.shape();
  if (s.size() != 4)
    fail("{}: feature map shape {} is not 4-d NHWC; pool before flattening", call.where(), shape_str(s));
  expect_tensor(call, pooled, pooled_role, {s[0], s[3]}, map.dtype());
  return s;
}

void gap_fwd(const OpCall& call, const GlobalAvgPoolForward<TensorArg>& a) {
  const Shape& s = feature_map(call, a.x, a.y, "y");
  gap_forward(a.x.dtype(), a.x.data, s[0], s[1] * s[2], s[3], a.y.data, main_stream(call), call.where());
}

void gap_bwd(const OpCall& call, const GlobalAvgPoolBackward<TensorArg>& a) {
  const Shape& s = feature_map(call, a.dx, a.dy, "dy");
  gap_backward(a.dx.dtype(), a.dy.data, s[0], s[1] * s[2], s[3], a.dx.data, main_stream(call), call.where());
}

// Adaptive average pooling: the map (N, H, W, C) and the pooled one (N, out_h, out_w, C), whose shapes
// set the geometry (the CPU's checks, cpu::AdaptivePoolGeom::make).
cpu::AdaptivePoolGeom adaptive_geometry(const OpCall& call, const TensorArg& map, const TensorArg& pooled,
                                        const char* pooled_role) {
  const cpu::AdaptivePoolGeom g = cpu::AdaptivePoolGeom::make(map.shape(), pooled.shape(), call.where());
  expect_tensor(call, pooled, pooled_role, g.out_shape(), map.dtype());
  return g;
}

void adaptive_fwd(const OpCall& call, const AdaptiveAvgPoolForward<TensorArg>& a) {
  const cpu::AdaptivePoolGeom g = adaptive_geometry(call, a.x, a.y, "y");
  adaptive_avgpool_forward(a.x.dtype(), g, a.x.data, a.y.data, main_stream(call), call.where());
}

void adaptive_bwd(const OpCall& call, const AdaptiveAvgPoolBackward<TensorArg>& a) {
  const cpu::AdaptivePoolGeom g = adaptive_geometry(call, a.dx, a.dy, "dy");
  adaptive_avgpool_backward(a.dx.dtype(), g, a.dy.data, a.dx.data, main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable pool_cuda_ops{
    Device::CUDA,
    {kernel<MaxPoolForward, cuda::maxpool_fwd>(), kernel<MaxPoolBackward, cuda::maxpool_bwd>(),
     kernel<MaxPoolInference, cuda::maxpool_inf>(), kernel<AvgPoolForward, cuda::avgpool_fwd>(),
     kernel<AvgPoolBackward, cuda::avgpool_bwd>(), kernel<GlobalAvgPoolForward, cuda::gap_fwd>(),
     kernel<GlobalAvgPoolBackward, cuda::gap_bwd>(), kernel<AdaptiveAvgPoolForward, cuda::adaptive_fwd>(),
     kernel<AdaptiveAvgPoolBackward, cuda::adaptive_bwd>()}};
}  // namespace kiln::ops
