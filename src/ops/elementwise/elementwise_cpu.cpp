#include "ops/elementwise/elementwise_cpu.h"

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
