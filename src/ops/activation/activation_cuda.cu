#include "ops/activation/activation_cuda.h"
#include "ops/activation/activation_functions.h"
#include "ops/common/flat_cuda.cuh"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// One kernel per (function, dtype): the function is chosen on the host, not per element.
template <class F, class T>
struct Forward {
  const T* x;
  T* y;
  float alpha;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
    load8(x, i0, n, vec, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = F::value(v[j], alpha);
    store8(y, i0, n, vec, v);
  }
};

template <class F, class T>
struct Backward {
  const T* dy;
  const T* x;
  T* dx;
  float alpha;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float g[8], v[8];
    load8(dy, i0, n, vec, g);
    load8(x, i0, n, vec, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= F::derivative(v[j], alpha);
    store8(dx, i0, n, vec, g);
  }
};

void check(const char* fn, int64_t n, std::initializer_list<const void*> pointers, const std::string& where) {
  if (n < 0) fail("{}: {} got a negative element count {}", where, fn, n);
  for (const void* p : pointers)
    if (n > 0 && !p) fail("{}: {} got a null tensor", where, fn);
}

}  // namespace

void activation_forward(Activation f, float alpha, DType dtype, const void* x, int64_t n, void* y,
                        cudaStream_t stream, const std::string& where) {
  check("activation_forward", n, {x, y}, where);
  if (n == 0) return;
  activation::visit(f, [&](auto fn) {
    using F = decltype(fn);
    dispatch_activation(dtype, "activation_forward", [&](auto zero) {
      using T = decltype(zero);
      Forward<F, T> op{static_cast<const T*>(x), static_cast<T*>(y), alpha};
      launch_flat(op, n, flat_vectorizable({x, y}), stream, where);
    });
  });
}

void activation_backward(Activation f, float alpha, DType dtype, const void* dy, const void* x, int64_t n,
                         void* dx, cudaStream_t stream, const std::string& where) {
  check("activation_backward", n, {dy, x, dx}, where);
  if (n == 0) return;
  activation::visit(f, [&](auto fn) {
    using F = decltype(fn);
    dispatch_activation(dtype, "activation_backward", [&](auto zero) {
      using T = decltype(zero);
      Backward<F, T> op{static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), alpha};
      launch_flat(op, n, flat_vectorizable({dy, x, dx}), stream, where);
    });
  });
}

}  // namespace kiln::cuda
