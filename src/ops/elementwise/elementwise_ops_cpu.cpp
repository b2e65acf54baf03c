// Op wrappers binding RELU_*, DROPOUT_*, STOCHASTIC_DEPTH_*, ADD_FWD and GRAD_SUM to the CPU
// elementwise kernels (elementwise_cpu.h, stochastic_depth_cpu.h): they validate the tensors an op
// was compiled with, then dispatch on dtype.
#include <vector>

#include "ops/elementwise/elementwise_contract.h"
#include "ops/elementwise/elementwise_cpu.h"
#include "ops/elementwise/stochastic_depth_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

// `t` must hold as many elements as `like` and have `dtype`.
void check_like(const OpCall& call, const TensorArg& t, const char* role, const TensorArg& like,
                DType dtype) {
  if (t.numel() != like.numel())
    fail("layer '{}': tensor {} has shape {} but {} elements are needed ({}); recompile the "
         "program",
         call.layer().name, role, shape_str(t.shape()), like.numel(), shape_str(like.shape()));
  if (t.dtype() != dtype)
    fail("layer '{}': tensor {} is {} but {} is expected", call.layer().name, role,
         dtype_name(t.dtype()), dtype_name(dtype));
}

double dropout_p(const OpCall& call, double p) {
  if (!(p >= 0 && p <= 1))
    fail("dropout '{}': probability p = {} is outside [0, 1]; use a drop probability such as 0.5",
         call.layer().name, p);
  return p;
}

void relu_fwd(const OpCall& call, const ReluForward<TensorArg>& a) {
  check_like(call, a.y, "y", a.x, a.x.dtype());
  check_like(call, a.mask, "mask", a.x, DType::U8);
  dispatch_float(a.x.dtype(), "RELU_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::relu_forward<T>(a.x.as<T>(), a.x.numel(), a.y.as<T>(), a.mask.as<uint8_t>());
  });
}

void relu_inf(const OpCall& call, const ReluInference<TensorArg>& a) {
  check_like(call, a.y, "y", a.x, a.x.dtype());
  dispatch_float(a.x.dtype(), "RELU_INF", [&](auto t) {
    using T = decltype(t);
    cpu::relu_forward<T>(a.x.as<T>(), a.x.numel(), a.y.as<T>(), nullptr);
  });
}

// Shared by RELU_BWD and DROPOUT_BWD: dx = f(dy, mask).
template <class Kernel>
void masked_backward(const OpCall& call, const char* what, const TensorArg& dy, const TensorArg& mask,
                     const TensorArg& dx, Kernel kernel) {
  check_like(call, mask, "mask", dy, DType::U8);
  check_like(call, dx, "dx", dy, dy.dtype());
  dispatch_float(dy.dtype(), what, [&](auto t) {
    using T = decltype(t);
    kernel(dy.as<T>(), mask.as<uint8_t>(), dy.numel(), dx.as<T>());
  });
}

void relu_bwd(const OpCall& call, const ReluBackward<TensorArg>& a) {
  masked_backward(call, "RELU_BWD", a.dy, a.mask, a.dx, [](auto* dy, const uint8_t* mask, int64_t n, auto* dx) {
    cpu::relu_backward(dy, mask, n, dx);
  });
}

void dropout_fwd(const OpCall& call, const DropoutForward<TensorArg>& a) {
  const double p = dropout_p(call, a.p);
  check_like(call, a.y, "y", a.x, a.x.dtype());
  check_like(call, a.mask, "mask", a.x, DType::U8);
  const uint64_t stream = cpu::dropout_stream(a.layer_key, call.scalars.step);
  dispatch_float(a.x.dtype(), "DROPOUT_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::dropout_forward<T>(a.x.as<T>(), a.x.numel(), p, call.scalars.seed, stream, a.y.as<T>(),
                            a.mask.as<uint8_t>());
  });
}

void dropout_bwd(const OpCall& call, const DropoutBackward<TensorArg>& a) {
  const double p = dropout_p(call, a.p);
  masked_backward(call, "DROPOUT_BWD", a.dy, a.mask, a.dx,
                  [p](auto* dy, const uint8_t* mask, int64_t n, auto* dx) { cpu::dropout_backward(dy, mask, n, p, dx); });
}

// Stochastic depth's samples: the first dimension of x (or dy); the mask holds one byte each.
int64_t samples(const TensorArg& x) { return x.shape().empty() ? 1 : x.shape()[0]; }

void check_sample_mask(const OpCall& call, const TensorArg& mask, const TensorArg& like) {
  if (mask.numel() != samples(like) || mask.dtype() != DType::U8)
    fail("stochastic depth '{}': its mask is {} {} but must hold one U8 per sample of {} ({}); recompile the "
         "program",
         call.layer().name, dtype_name(mask.dtype()), shape_str(mask.shape()), shape_str(like.shape()),
         samples(like));
}

double stochastic_depth_p(const OpCall& call, double p) {
  if (!(p >= 0 && p <= 1))
    fail("stochastic depth '{}': probability p = {} is outside [0, 1]; use a drop probability such as 0.2",
         call.layer().name, p);
  return p;
}

void stochastic_depth_fwd(const OpCall& call, const StochasticDepthForward<TensorArg>& a) {
  const double p = stochastic_depth_p(call, a.p);
  check_like(call, a.y, "y", a.x, a.x.dtype());
  check_sample_mask(call, a.mask, a.x);
  const int64_t rows = samples(a.x);
  const uint64_t stream = cpu::dropout_stream(a.layer_key, call.scalars.step);
  dispatch_float(a.x.dtype(), "STOCHASTIC_DEPTH_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::stochastic_depth_forward<T>(a.x.as<T>(), rows, rows ? a.x.numel() / rows : 0, p, call.scalars.seed, stream,
                                     a.y.as<T>(), a.mask.as<uint8_t>());
  });
}

void stochastic_depth_bwd(const OpCall& call, const StochasticDepthBackward<TensorArg>& a) {
  const double p = stochastic_depth_p(call, a.p);
  check_like(call, a.dx, "dx", a.dy, a.dy.dtype());
  check_sample_mask(call, a.mask, a.dy);
  const int64_t rows = samples(a.dy);
  dispatch_float(a.dy.dtype(), "STOCHASTIC_DEPTH_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::stochastic_depth_backward<T>(a.dy.as<T>(), a.mask.as<uint8_t>(), rows, rows ? a.dy.numel() / rows : 0, p,
                                      a.dx.as<T>());
  });
}

void add_fwd(const OpCall& call, const Add<TensorArg>& a) {
  if (a.a.shape() != a.b.shape())
    fail("add '{}': input shapes {} and {} differ; a residual add needs equal shapes, so give the "
         "shortcut a projection (1x1 conv with the body's stride and channels)",
         call.layer().name, shape_str(a.a.shape()), shape_str(a.b.shape()));
  check_like(call, a.b, "b", a.a, a.a.dtype());
  check_like(call, a.y, "y", a.a, a.a.dtype());
  dispatch_float(a.a.dtype(), "ADD_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::add_forward<T>(a.a.as<T>(), a.b.as<T>(), a.a.numel(), a.y.as<T>());
  });
}

void grad_sum(const OpCall& call, const GradSum<TensorArg>& a) {
  for (const TensorArg& term : a.terms) check_like(call, term, "gradient", a.sum, a.sum.dtype());
  dispatch_float(a.sum.dtype(), "GRAD_SUM", [&](auto t) {
    using T = decltype(t);
    std::vector<const T*> g;
    for (const TensorArg& term : a.terms) g.push_back(term.as<T>());
    cpu::grad_sum<T>(g.data(), static_cast<int>(g.size()), a.sum.numel(), a.sum.as<T>());
  });
}

}  // namespace

namespace ops {
extern const OpTable elementwise_cpu_ops{
    Device::CPU,
    {kernel<ReluForward, relu_fwd>(), kernel<ReluBackward, relu_bwd>(), kernel<ReluInference, relu_inf>(),
     kernel<Add, add_fwd>(), kernel<GradSum, grad_sum>(), kernel<DropoutForward, dropout_fwd>(),
     kernel<DropoutBackward, dropout_bwd>(), kernel<StochasticDepthForward, stochastic_depth_fwd>(),
     kernel<StochasticDepthBackward, stochastic_depth_bwd>()}};
}  // namespace ops

}  // namespace kiln
