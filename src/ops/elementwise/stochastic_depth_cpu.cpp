#include "ops/elementwise/stochastic_depth_cpu.h"

#include <algorithm>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// A task's elements, as the elementwise kernels cut theirs (elementwise_cpu.cpp): memory bound.
constexpr int64_t kParallelElems = 1 << 16;

// 1 / (1 - p) in the kernel's type, as dropout's scale (0 when p = 1: no inf reaches a product).
template <class T>
T keep_scale(double p) {
  return p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
}

// dst = mask[r] ? src * scale : 0 over each row r: the forward's product and the backward.
template <class T>
void scale_rows(const T* src, const uint8_t* mask, int64_t rows, int64_t row_size, T scale, T* dst) {
  const int64_t rows_per_task = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(row_size, 1));
  parallel_blocks(rows, rows_per_task, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* s = src + r * row_size;
      T* d = dst + r * row_size;
      if (mask[r])
        for (int64_t i = 0; i < row_size; ++i) d[i] = s[i] * scale;
      else
        std::fill(d, d + row_size, T(0));  // as dropout: 0 even where s holds an inf or a NaN
    }
  });
}

}  // namespace

template <class T>
void stochastic_depth_forward(const T* x, int64_t rows, int64_t row_size, double p, uint64_t seed, uint64_t stream,
                              T* y, uint8_t* mask) {
  // The float draw against float(p), as the GPU compares: the same masks on both.
  const float threshold = static_cast<float>(p);
  for (int64_t r = 0; r < rows; ++r) mask[r] = random_uniform(seed, stream, static_cast<uint64_t>(r)) >= threshold;
  scale_rows(x, mask, rows, row_size, keep_scale<T>(p), y);
}

template <class T>
void stochastic_depth_backward(const T* dy, const uint8_t* mask, int64_t rows, int64_t row_size, double p, T* dx) {
  scale_rows(dy, mask, rows, row_size, keep_scale<T>(p), dx);
}

#define KILN_INSTANTIATE_STOCHASTIC_DEPTH(T)                                                                 \
  template void stochastic_depth_forward<T>(const T*, int64_t, int64_t, double, uint64_t, uint64_t, T*,\
                                            uint8_t*);                                                   \
  template void stochastic_depth_backward<T>(const T*, const uint8_t*, int64_t, int64_t, double, T*);
KILN_INSTANTIATE_STOCHASTIC_DEPTH(float)
KILN_INSTANTIATE_STOCHASTIC_DEPTH(double)
#undef KILN_INSTANTIATE_STOCHASTIC_DEPTH

}  // namespace kiln::cpu
