#include "ops/mul/mul_cpu.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Memory-bound work: a task gets at least this many elements (fewer cost more in waking a thread
// than they save).
constexpr int64_t kParallelElems = 1 << 16;
// A gate's gradient is summed per (image, run of channels): runs this wide keep an image's
// accumulators in cache and give a small batch pieces enough for the pool.
constexpr int64_t kGateChannels = 64;

// out[i] = x[i] * b[...] over the map: b row by row for a gate, element by element otherwise.
template <class T>
void scale_map(const MulGeom& g, const T* x, const T* b, T* out) {
  if (!g.gate) {
    parallel_blocks(g.map_elements(), kParallelElems, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) out[i] = x[i] * b[i];
    });
    return;
  }
  const int64_t rows = g.n * g.hw;
  parallel_blocks(rows, std::max<int64_t>(1, kParallelElems / std::max<int64_t>(g.c, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* s = b + (r / g.hw) * g.c;
      const T* xr = x + r * g.c;
      T* o = out + r * g.c;
      for (int64_t k = 0; k < g.c; ++k) o[k] = xr[k] * s[k];
    }
  });
}

// db[n, c] = sum_r dy[n, r, c] * a[n, r, c] in double, one piece per (image, run of channels).
template <class T>
void gate_gradient(const MulGeom& g, const T* dy, const T* a, T* db) {
  const int64_t runs = (g.c + kGateChannels - 1) / kGateChannels;
  parallel_for(g.n * runs, [&](int64_t piece) {
    const int64_t img = piece / runs, k0 = (piece % runs) * kGateChannels, k1 = std::min(g.c, k0 + kGateChannels);
    double acc[kGateChannels] = {};
    for (int64_t r = 0; r < g.hw; ++r) {
      const int64_t row = (img * g.hw + r) * g.c;
      for (int64_t k = k0; k < k1; ++k) acc[k - k0] += static_cast<double>(dy[row + k]) * static_cast<double>(a[row + k]);
    }
    for (int64_t k = k0; k < k1; ++k) db[img * g.c + k] = static_cast<T>(acc[k - k0]);
  });
}

}  // namespace

template <class T>
void mul_forward(const MulGeom& g, const T* a, const T* b, T* y) {
  scale_map(g, a, b, y);
}

template <class T>
void mul_backward(const MulGeom& g, const T* dy, const T* a, const T* b, T* da, T* db) {
  if (da) scale_map(g, dy, b, da);
  if (!db) return;
  if (g.gate)
    gate_gradient(g, dy, a, db);
  else
    scale_map(g, dy, a, db);
}

template void mul_forward<float>(const MulGeom&, const float*, const float*, float*);
template void mul_forward<double>(const MulGeom&, const double*, const double*, double*);
template void mul_backward<float>(const MulGeom&, const float*, const float*, const float*, float*, float*);
template void mul_backward<double>(const MulGeom&, const double*, const double*, const double*, double*, double*);

}  // namespace kiln::cpu
