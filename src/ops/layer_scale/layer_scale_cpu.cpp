#include "ops/layer_scale/layer_scale_cpu.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Memory-bound work: a task gets at least this many elements (fewer cost more in waking a thread
// than they save).
constexpr int64_t kParallelElems = 1 << 15;
// dgamma's sums run over (chunk of rows, run of channels) pieces: runs this wide keep a piece's
// accumulators in registers and cache, and chunks of about kParallelElems elements give a
// channel-poor map (ConvNeXt's first stage: 96 channels) pieces enough for the pool.
constexpr int64_t kRunChannels = 64;

int64_t rows_per_task(const LayerScaleGeom& g) { return std::max<int64_t>(1, kParallelElems / std::max<int64_t>(g.c, 1)); }

// out[r, k] = in[r, k] * gamma[k]: the forward (in = x) and dx (in = dy).
template <class T>
void scale_rows(const LayerScaleGeom& g, const T* in, const T* gamma, T* out) {
  parallel_blocks(g.rows, rows_per_task(g), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* a = in + r * g.c;
      T* o = out + r * g.c;
      for (int64_t k = 0; k < g.c; ++k) o[k] = a[k] * gamma[k];
    }
  });
}

}  // namespace

template <class T>
void layer_scale_forward(const LayerScaleGeom& g, const T* x, const T* gamma, T* y) {
  scale_rows(g, x, gamma, y);
}

template <class T>
void layer_scale_backward(const LayerScaleGeom& g, const T* dy, const T* x, const T* gamma, T* dx, T* dgamma) {
  const int64_t chunk_rows = rows_per_task(g);
  const int64_t chunks = block_count(g.rows, chunk_rows);
  const int64_t runs = (g.c + kRunChannels - 1) / kRunChannels;
  // Each piece sums its chunk's rows in order into its own partials (and writes dx on the way, dy
  // read once); the partials are then added in chunk order.
  std::vector<double> partial(size_t(chunks * g.c), 0.0);
  parallel_for(chunks * runs, [&](int64_t piece) {
    const int64_t chunk = piece / runs, k0 = (piece % runs) * kRunChannels, k1 = std::min(g.c, k0 + kRunChannels);
    const int64_t r0 = chunk * chunk_rows, r1 = std::min(g.rows, r0 + chunk_rows);
    double acc[kRunChannels] = {};
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = r * g.c;
      for (int64_t k = k0; k < k1; ++k) {
        acc[k - k0] += static_cast<double>(dy[row + k]) * static_cast<double>(x[row + k]);
        if (dx) dx[row + k] = dy[row + k] * gamma[k];
      }
    }
    std::copy(acc, acc + (k1 - k0), partial.begin() + chunk * g.c + k0);
  });
  for (int64_t k = 0; k < g.c; ++k) {
    double sum = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partial[size_t(chunk * g.c + k)];
    dgamma[k] = static_cast<T>(sum);
  }
}

template void layer_scale_forward<float>(const LayerScaleGeom&, const float*, const float*, float*);
template void layer_scale_forward<double>(const LayerScaleGeom&, const double*, const double*, double*);
template void layer_scale_backward<float>(const LayerScaleGeom&, const float*, const float*, const float*, float*,
                                          float*);
template void layer_scale_backward<double>(const LayerScaleGeom&, const double*, const double*, const double*,
                                           double*, double*);

}  // namespace kiln::cpu
