#include "ops/layer_norm/layer_norm_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Memory-bound work: a task gets at least this many elements (fewer cost more in waking a thread
// than they save).
constexpr int64_t kParallelElems = 1 << 15;
// The backward's parameter sums keep one partial row per chunk: at most this many chunks.
constexpr int64_t kMaxChunks = 64;

int64_t rows_per_task(int64_t c) { return std::max<int64_t>(1, kParallelElems / std::max<int64_t>(c, 1)); }

struct RowStats {
  double mean, rstd;
};

// Two passes over the row: the mean, then the centered squares (no cancellation of E[x^2] - mean^2).
template <class T>
RowStats row_stats(const T* x, int64_t c, double eps) {
  double sum = 0;
  for (int64_t k = 0; k < c; ++k) sum += x[k];
  const double mean = sum / double(c);
  double squares = 0;
  for (int64_t k = 0; k < c; ++k) {
    const double d = x[k] - mean;
    squares += d * d;
  }
  return {mean, 1.0 / std::sqrt(squares / double(c) + eps)};
}

// The row's dx, and its terms of dweight (dy * xhat) and dbias (dy) added into the chunk's
// partial rows where they are wanted.
template <class T>
void backward_row(int64_t c, const T* dy, const T* x, const T* weight, double mean, double rstd, T* dx,
                  double* dweight, double* dbias) {
  if (dx) {
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t k = 0; k < c; ++k) {
      const double g = double(dy[k]) * double(weight[k]);
      sum_g += g;
      sum_g_xhat += g * ((x[k] - mean) * rstd);
    }
    const double mean_g = sum_g / double(c), mean_g_xhat = sum_g_xhat / double(c);
    for (int64_t k = 0; k < c; ++k) {
      const double xhat = (x[k] - mean) * rstd;
      dx[k] = static_cast<T>(rstd * (double(dy[k]) * double(weight[k]) - mean_g - xhat * mean_g_xhat));
    }
  }
  if (dweight)
    for (int64_t k = 0; k < c; ++k) dweight[k] += double(dy[k]) * ((x[k] - mean) * rstd);
  if (dbias)
    for (int64_t k = 0; k < c; ++k) dbias[k] += dy[k];
}

}  // namespace

template <class T>
void layer_norm_forward(const LayerNormGeom& g, const T* x, const T* weight, const T* bias, double eps, T* y, T* mean,
                        T* rstd) {
  if (g.c <= 0) return;
  parallel_blocks(g.rows, rows_per_task(g.c), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * g.c;
      T* yr = y + r * g.c;
      const RowStats s = row_stats(xr, g.c, eps);
      for (int64_t k = 0; k < g.c; ++k) yr[k] = static_cast<T>((xr[k] - s.mean) * s.rstd * weight[k] + bias[k]);
      if (mean) mean[r] = static_cast<T>(s.mean), rstd[r] = static_cast<T>(s.rstd);
    }
  });
}

template <class T>
void layer_norm_backward(const LayerNormGeom& g, const T* dy, const T* x, const T* weight, const T* mean,
                         const T* rstd, T* dx, T* dweight, T* dbias) {
  if (g.c <= 0) return;
  // Chunks of consecutive rows, as many as the work is worth (never more than kMaxChunks): each
  // sums its rows' parameter terms into a partial row of its own.
  const int64_t want = std::clamp<int64_t>(g.elements() / kParallelElems, 1, kMaxChunks);
  const int64_t chunk_rows = std::max<int64_t>(1, (g.rows + want - 1) / want);
  const int64_t chunks = std::max<int64_t>(1, (g.rows + chunk_rows - 1) / chunk_rows);
  const bool params = dweight || dbias;
  std::vector<double> partial(params ? size_t(chunks * 2 * g.c) : 0, 0.0);
  parallel_for(chunks, [&](int64_t chunk) {
    double* pw = dweight ? partial.data() + chunk * 2 * g.c : nullptr;
    double* pb = dbias ? partial.data() + chunk * 2 * g.c + g.c : nullptr;
    for (int64_t r = chunk * chunk_rows; r < std::min(g.rows, (chunk + 1) * chunk_rows); ++r) {
      const int64_t at = r * g.c;
      backward_row(g.c, dy + at, x + at, weight, double(mean[r]), double(rstd[r]), dx ? dx + at : nullptr, pw, pb);
    }
  });
  if (!params) return;
  for (int64_t k = 0; k < g.c; ++k) {
    double sw = 0, sb = 0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      sw += partial[size_t(chunk * 2 * g.c + k)];
      sb += partial[size_t(chunk * 2 * g.c + g.c + k)];
    }
    if (dweight) dweight[k] = static_cast<T>(sw);
    if (dbias) dbias[k] = static_cast<T>(sb);
  }
}

template void layer_norm_forward<float>(const LayerNormGeom&, const float*, const float*, const float*, double, float*,
                                        float*, float*);
template void layer_norm_forward<double>(const LayerNormGeom&, const double*, const double*, const double*, double,
                                         double*, double*, double*);
template void layer_norm_backward<float>(const LayerNormGeom&, const float*, const float*, const float*, const float*,
                                         const float*, float*, float*, float*);
template void layer_norm_backward<double>(const LayerNormGeom&, const double*, const double*, const double*,
                                          const double*, const double*, double*, double*, double*);

}  // namespace kiln::cpu
