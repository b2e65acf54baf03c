#include "ops/elementwise/elementwise_cpu.h"

#include <algorithm>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {
// Elementwise work is memory bound: each task gets this many elements (fewer cost more in
// waking a thread than they save). Every element is independent, so any cut gives the same bytes.
constexpr int64_t kParallelElems = 1 << 16;

// 1 / (1 - p) from the layer's double p, as PyTorch's (a float p would be 3.7e-9 off at p = 0.2).
template <class T>
T dropout_scale(double p) {
  return p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
}
}  // namespace

template <class T>
void relu_forward(const T* x, int64_t n, T* y, uint8_t* mask) {
  parallel_blocks(n, kParallelElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T v = x[i];
      if (mask) mask[i] = v > T(0);
      y[i] = v < T(0) ? T(0) : v;
    }
  });
}

template <class T>
void relu_backward(const T* dy, const uint8_t* mask, int64_t n, T* dx) {
  parallel_blocks(n, kParallelElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dx[i] = mask[i] ? dy[i] : T(0);
  });
}

template <class T>
void add_forward(const T* a, const T* b, int64_t n, T* y) {
  parallel_blocks(n, kParallelElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) y[i] = a[i] + b[i];
  });
}

template <class T>
void grad_sum(const T* const* g, int k, int64_t n, T* sum) {
  parallel_blocks(n, std::max<int64_t>(1, kParallelElems / std::max(k, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T s = k > 0 ? g[0][i] : T(0);
      for (int j = 1; j < k; ++j) s += g[j][i];
      sum[i] = s;
    }
  });
}

template <class T>
void dropout_forward(const T* x, int64_t n, double p, uint64_t seed, uint64_t stream, T* y,
                     uint8_t* mask) {
  const T scale = dropout_scale<T>(p);
  // The draw is a float and the GPU compares it with float(p): the masks are the same on both.
  const float threshold = static_cast<float>(p);
  // Drawing a random number costs about 4 copies.
  parallel_blocks(n, kParallelElems / 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      bool keep = random_uniform(seed, stream, static_cast<uint64_t>(i)) >= threshold;
      mask[i] = keep;
      y[i] = keep ? x[i] * scale : T(0);
    }
  });
}

template <class T>
void dropout_backward(const T* dy, const uint8_t* mask, int64_t n, double p, T* dx) {
  const T scale = dropout_scale<T>(p);
  parallel_blocks(n, kParallelElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dx[i] = mask[i] ? dy[i] * scale : T(0);
  });
}

#define KILN_INSTANTIATE_ELEMENTWISE(T)                                                      \
  template void relu_forward<T>(const T*, int64_t, T*, uint8_t*);                            \
  template void relu_backward<T>(const T*, const uint8_t*, int64_t, T*);                     \
  template void add_forward<T>(const T*, const T*, int64_t, T*);                             \
  template void grad_sum<T>(const T* const*, int, int64_t, T*);                              \
  template void dropout_forward<T>(const T*, int64_t, double, uint64_t, uint64_t, T*,        \
                                   uint8_t*);                                                \
  template void dropout_backward<T>(const T*, const uint8_t*, int64_t, double, T*);
KILN_INSTANTIATE_ELEMENTWISE(float)
KILN_INSTANTIATE_ELEMENTWISE(double)
#undef KILN_INSTANTIATE_ELEMENTWISE

}  // namespace kiln::cpu
