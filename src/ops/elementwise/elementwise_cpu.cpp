#include "ops/elementwise/elementwise_cpu.h"

#include <vector>

#include "ops/common/op_args.h"
#include "runtime/op_call.h"

namespace kiln::cpu {
namespace {
// Elementwise work is memory bound; below this many elements a thread team costs more than
// it saves.
constexpr int64_t kParallelElems = 1 << 16;

template <class T>
T dropout_scale(float p) {
  return p < 1.f ? static_cast<T>(1.0 / (1.0 - static_cast<double>(p))) : T(0);
}
}  // namespace

template <class T>
void relu_forward(const T* x, int64_t n, T* y, uint8_t* mask) {
#pragma omp parallel for if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    T v = x[i];
    if (mask) mask[i] = v > T(0);
    y[i] = v < T(0) ? T(0) : v;
  }
}

template <class T>
void relu_backward(const T* dy, const uint8_t* mask, int64_t n, T* dx) {
#pragma omp parallel for if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] : T(0);
}

template <class T>
void add_forward(const T* a, const T* b, int64_t n, T* y) {
#pragma omp parallel for if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <class T>
void grad_sum(const T* const* g, int k, int64_t n, T* sum) {
#pragma omp parallel for if (n * k > kParallelElems)
  for (int64_t i = 0; i < n; ++i) {
    T s = k > 0 ? g[0][i] : T(0);
    for (int j = 1; j < k; ++j) s += g[j][i];
    sum[i] = s;
  }
}

template <class T>
void dropout_forward(const T* x, int64_t n, float p, uint64_t seed, uint64_t stream, T* y,
                     uint8_t* mask) {
  const T scale = dropout_scale<T>(p);
#pragma omp parallel for if (n > kParallelElems / 4)
  for (int64_t i = 0; i < n; ++i) {
    bool keep = random_uniform(seed, stream, static_cast<uint64_t>(i)) >= p;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : T(0);
  }
}

template <class T>
void dropout_backward(const T* dy, const uint8_t* mask, int64_t n, float p, T* dx) {
  const T scale = dropout_scale<T>(p);
#pragma omp parallel for if (n > kParallelElems)
  for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? dy[i] * scale : T(0);
}

#define KILN_INSTANTIATE_ELEMENTWISE(T)                                                      \
  template void relu_forward<T>(const T*, int64_t, T*, uint8_t*);                            \
  template void relu_backward<T>(const T*, const uint8_t*, int64_t, T*);                     \
  template void add_forward<T>(const T*, const T*, int64_t, T*);                             \
  template void grad_sum<T>(const T* const*, int, int64_t, T*);                              \
  template void dropout_forward<T>(const T*, int64_t, float, uint64_t, uint64_t, T*,         \
                                   uint8_t*);                                                \
  template void dropout_backward<T>(const T*, const uint8_t*, int64_t, float, T*);
KILN_INSTANTIATE_ELEMENTWISE(float)
KILN_INSTANTIATE_ELEMENTWISE(double)
#undef KILN_INSTANTIATE_ELEMENTWISE

}  // namespace kiln::cpu

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

float dropout_p(const OpCall& call) {
  float p = call.op.attrs.p;
  if (!(p >= 0.f && p <= 1.f))
    fail("dropout '{}': probability p = {} is outside [0, 1]; use a drop probability such as 0.5",
         call.layer().name, p);
  return p;
}

void relu_fwd_op(const OpCall& call) {
  const TensorArg& x = required(call, call.in, 0, "x");
  const TensorArg& y = required(call, call.out, 0, "y");
  const TensorArg& mask = required(call, call.out, 1, "mask");
  check_like(call, y, "y", x, x.dtype());
  check_like(call, mask, "mask", x, DType::U8);
  dispatch_float(x.dtype(), "RELU_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::relu_forward<T>(x.as<T>(), x.numel(), y.as<T>(), mask.as<uint8_t>());
  });
}

void relu_inf_op(const OpCall& call) {
  const TensorArg& x = required(call, call.in, 0, "x");
  const TensorArg& y = required(call, call.out, 0, "y");
  check_like(call, y, "y", x, x.dtype());
  dispatch_float(x.dtype(), "RELU_INF", [&](auto t) {
    using T = decltype(t);
    cpu::relu_forward<T>(x.as<T>(), x.numel(), y.as<T>(), nullptr);
  });
}

// Shared by RELU_BWD and DROPOUT_BWD: in dy, mask; out dx.
template <class Kernel>
void masked_backward(const OpCall& call, const char* what, Kernel kernel) {
  const TensorArg& dy = required(call, call.in, 0, "dy");
  const TensorArg& mask = required(call, call.in, 1, "mask");
  const TensorArg& dx = required(call, call.out, 0, "dx");
  check_like(call, mask, "mask", dy, DType::U8);
  check_like(call, dx, "dx", dy, dy.dtype());
  dispatch_float(dy.dtype(), what, [&](auto t) {
    using T = decltype(t);
    kernel(dy.as<T>(), mask.as<uint8_t>(), dy.numel(), dx.as<T>());
  });
}

void relu_bwd_op(const OpCall& call) {
  masked_backward(call, "RELU_BWD", [](auto* dy, const uint8_t* mask, int64_t n, auto* dx) {
    cpu::relu_backward(dy, mask, n, dx);
  });
}

void dropout_fwd_op(const OpCall& call) {
  float p = dropout_p(call);
  const TensorArg& x = required(call, call.in, 0, "x");
  const TensorArg& y = required(call, call.out, 0, "y");
  const TensorArg& mask = required(call, call.out, 1, "mask");
  check_like(call, y, "y", x, x.dtype());
  check_like(call, mask, "mask", x, DType::U8);
  uint64_t stream = cpu::dropout_stream(call.op.layer, call.scalars.step);
  dispatch_float(x.dtype(), "DROPOUT_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::dropout_forward<T>(x.as<T>(), x.numel(), p, call.scalars.seed, stream, y.as<T>(),
                            mask.as<uint8_t>());
  });
}

void dropout_bwd_op(const OpCall& call) {
  float p = dropout_p(call);
  masked_backward(call, "DROPOUT_BWD", [p](auto* dy, const uint8_t* mask, int64_t n, auto* dx) {
    cpu::dropout_backward(dy, mask, n, p, dx);
  });
}

void add_fwd_op(const OpCall& call) {
  const TensorArg& a = required(call, call.in, 0, "a");
  const TensorArg& b = required(call, call.in, 1, "b");
  const TensorArg& y = required(call, call.out, 0, "y");
  if (a.shape() != b.shape())
    fail("add '{}': input shapes {} and {} differ; a residual add needs equal shapes, so give the "
         "shortcut a projection (1x1 conv with the body's stride and channels)",
         call.layer().name, shape_str(a.shape()), shape_str(b.shape()));
  check_like(call, b, "b", a, a.dtype());
  check_like(call, y, "y", a, a.dtype());
  dispatch_float(a.dtype(), "ADD_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::add_forward<T>(a.as<T>(), b.as<T>(), a.numel(), y.as<T>());
  });
}

void grad_sum_op(const OpCall& call) {
  const TensorArg& sum = required(call, call.out, 0, "sum");
  if (call.in.empty()) fail("layer '{}': GRAD_SUM has no inputs; recompile", call.layer().name);
  for (size_t j = 0; j < call.in.size(); ++j) {
    required(call, call.in, j, "gradient");
    check_like(call, call.in[j], "gradient", sum, sum.dtype());
  }
  dispatch_float(sum.dtype(), "GRAD_SUM", [&](auto t) {
    using T = decltype(t);
    std::vector<const T*> g;
    for (const TensorArg& a : call.in) g.push_back(a.as<T>());
    cpu::grad_sum<T>(g.data(), static_cast<int>(g.size()), sum.numel(), sum.as<T>());
  });
}

}  // namespace

void register_elementwise_cpu() {
  register_op(Device::CPU, OpKind::RELU_FWD, relu_fwd_op);
  register_op(Device::CPU, OpKind::RELU_BWD, relu_bwd_op);
  register_op(Device::CPU, OpKind::RELU_INF, relu_inf_op);
  register_op(Device::CPU, OpKind::ADD_FWD, add_fwd_op);
  register_op(Device::CPU, OpKind::GRAD_SUM, grad_sum_op);
  register_op(Device::CPU, OpKind::DROPOUT_FWD, dropout_fwd_op);
  register_op(Device::CPU, OpKind::DROPOUT_BWD, dropout_bwd_op);
}

}  // namespace kiln
