// Op wrappers binding MAXPOOL_*, AVGPOOL_*, GAP_* and ADAPTIVE_AVGPOOL_* to the CPU pooling kernels
// (pool_cpu.h, adaptive_pool_cpu.h): they validate the tensors an op was compiled with, then
// dispatch on dtype.
#include <cstdint>

#include "ops/pool/adaptive_pool_cpu.h"
#include "ops/pool/pool_checks.h"
#include "ops/pool/pool_contract.h"
#include "ops/pool/pool_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

// Tensors must hold `shape`'s element count (the layout is implied) and have `dtype`.
void check(const OpCall& call, const char* kind, const TensorArg& t, const char* role,
           const Shape& shape, DType dtype) {
  if (t.numel() != numel(shape))
    fail("{} '{}': {} has shape {} but {} is expected; recompile the program", kind,
         call.layer().name, role, shape_str(t.shape()), shape_str(shape));
  if (t.dtype() != dtype)
    fail("{} '{}': {} is {} but {} is expected", kind, call.layer().name, role,
         dtype_name(t.dtype()), dtype_name(dtype));
}

cpu::PoolGeom geom(const OpCall& call, const char* kind, const Shape& x, const PoolWindow& w) {
  return cpu::PoolGeom::make(x, w.kernel, w.stride, w.padding, kind, call.layer().name, w.ceil_mode);
}

// MAXPOOL_FWD (argmax given) and MAXPOOL_INF (argmax absent).
void maxpool_forward(const OpCall& call, const TensorArg& x, const TensorArg& y, const TensorArg* argmax_arg,
                     const PoolWindow& window) {
  cpu::PoolGeom g = geom(call, "maxpool", x.shape(), window);
  check(call, "maxpool", y, "y", g.out_shape(), x.dtype());
  uint8_t* argmax = argmax_arg ? pool::maxpool_argmax(call, *argmax_arg, g) : nullptr;
  dispatch_float(x.dtype(), argmax_arg ? "MAXPOOL_FWD" : "MAXPOOL_INF", [&](auto t) {
    using T = decltype(t);
    cpu::maxpool_forward<T>(g, x.as<T>(), y.as<T>(), argmax);
  });
}

void maxpool_fwd(const OpCall& call, const MaxPoolForward<TensorArg>& a) {
  maxpool_forward(call, a.x, a.y, &a.argmax, a.window);
}

void maxpool_inf(const OpCall& call, const MaxPoolInference<TensorArg>& a) {
  maxpool_forward(call, a.x, a.y, nullptr, a.window);
}

void maxpool_bwd(const OpCall& call, const MaxPoolBackward<TensorArg>& a) {
  cpu::PoolGeom g = geom(call, "maxpool", a.dx.shape(), a.window);
  check(call, "maxpool", a.dy, "dy", g.out_shape(), a.dx.dtype());
  const uint8_t* argmax = pool::maxpool_argmax(call, a.argmax, g);
  dispatch_float(a.dx.dtype(), "MAXPOOL_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::maxpool_backward<T>(g, a.dy.as<T>(), argmax, a.dx.as<T>());
  });
}

void avgpool_fwd(const OpCall& call, const AvgPoolForward<TensorArg>& a) {
  cpu::PoolGeom g = geom(call, "avgpool", a.x.shape(), a.window);
  check(call, "avgpool", a.y, "y", g.out_shape(), a.x.dtype());
  dispatch_float(a.x.dtype(), "AVGPOOL_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::avgpool_forward<T>(g, a.count_include_pad, a.x.as<T>(), a.y.as<T>());
  });
}

void avgpool_bwd(const OpCall& call, const AvgPoolBackward<TensorArg>& a) {
  cpu::PoolGeom g = geom(call, "avgpool", a.dx.shape(), a.window);
  check(call, "avgpool", a.dy, "dy", g.out_shape(), a.dx.dtype());
  dispatch_float(a.dx.dtype(), "AVGPOOL_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::avgpool_backward<T>(g, a.count_include_pad, a.dy.as<T>(), a.dx.as<T>());
  });
}

// Global average pooling reads the feature map (N, H, W, C); the pooled side is (N, C).
void gap(const OpCall& call, const TensorArg& map, const TensorArg& pooled, bool forward) {
  const Shape& s = map.shape();
  if (s.size() != 4)
    fail("global_avgpool '{}': feature map shape {} is not 4-d NHWC", call.layer().name,
         shape_str(s));
  check(call, "global_avgpool", pooled, forward ? "y" : "dy", {s[0], s[3]}, map.dtype());
  dispatch_float(map.dtype(), forward ? "GAP_FWD" : "GAP_BWD", [&](auto t) {
    using T = decltype(t);
    if (forward)
      cpu::gap_forward<T>(map.as<T>(), s[0], s[1] * s[2], s[3], pooled.as<T>());
    else
      cpu::gap_backward<T>(pooled.as<T>(), s[0], s[1] * s[2], s[3], map.as<T>());
  });
}

void gap_fwd(const OpCall& call, const GlobalAvgPoolForward<TensorArg>& a) { gap(call, a.x, a.y, true); }
void gap_bwd(const OpCall& call, const GlobalAvgPoolBackward<TensorArg>& a) { gap(call, a.dx, a.dy, false); }

// Adaptive average pooling: the map (N, H, W, C) and the pooled one (N, out_h, out_w, C), whose
// shapes set the geometry.
cpu::AdaptivePoolGeom adaptive_geom(const OpCall& call, const TensorArg& map, const TensorArg& pooled) {
  cpu::AdaptivePoolGeom g = cpu::AdaptivePoolGeom::make(map.shape(), pooled.shape(), call.where());
  if (pooled.dtype() != map.dtype())
    fail("{}: the pooled map is {} but its input is {}; recompile the program", call.where(),
         dtype_name(pooled.dtype()), dtype_name(map.dtype()));
  return g;
}

void adaptive_fwd(const OpCall& call, const AdaptiveAvgPoolForward<TensorArg>& a) {
  const cpu::AdaptivePoolGeom g = adaptive_geom(call, a.x, a.y);
  dispatch_float(a.x.dtype(), "ADAPTIVE_AVGPOOL_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::adaptive_avgpool_forward<T>(g, a.x.as<T>(), a.y.as<T>());
  });
}

void adaptive_bwd(const OpCall& call, const AdaptiveAvgPoolBackward<TensorArg>& a) {
  const cpu::AdaptivePoolGeom g = adaptive_geom(call, a.dx, a.dy);
  dispatch_float(a.dx.dtype(), "ADAPTIVE_AVGPOOL_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::adaptive_avgpool_backward<T>(g, a.dy.as<T>(), a.dx.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable pool_cpu_ops{
    Device::CPU,
    {kernel<MaxPoolForward, maxpool_fwd>(), kernel<MaxPoolBackward, maxpool_bwd>(),
     kernel<MaxPoolInference, maxpool_inf>(), kernel<AvgPoolForward, avgpool_fwd>(),
     kernel<AvgPoolBackward, avgpool_bwd>(), kernel<GlobalAvgPoolForward, gap_fwd>(),
     kernel<GlobalAvgPoolBackward, gap_bwd>(), kernel<AdaptiveAvgPoolForward, adaptive_fwd>(),
     kernel<AdaptiveAvgPoolBackward, adaptive_bwd>()}};
}  // namespace ops

}  // namespace kiln
