#include "ops/group_norm/group_norm_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Memory-bound work: a piece gets about this many elements (fewer cost more in waking a thread
// than they save).
constexpr int64_t kPieceElems = 1 << 15;

// The reductions' pieces: each sample's positions in runs of `rows` (the last one shorter), by the
// extents alone. A sample's groups share its rows, so a piece sums every group of its rows.
struct RowRuns {
  int64_t rows = 1, count = 1;
  explicit RowRuns(const GroupNormGeom& g)
      : rows(std::clamp<int64_t>(kPieceElems / std::max<int64_t>(g.c, 1), 1, std::max<int64_t>(g.hw, 1))),
        count((g.hw + rows - 1) / rows) {}
};

// Per statistic s = sample * groups + group: the sum of term(value, s) over the group's elements.
// A piece adds its rows in order (each row's channels of the group first, then that subtotal);
// then each sample's runs are added in order.
template <class T, class Term>
std::vector<double> group_sums(const GroupNormGeom& g, const T* x, Term term) {
  const RowRuns runs(g);
  const int64_t cg = g.group_channels();
  std::vector<double> partial(size_t(g.n * runs.count * g.groups), 0.0);
  parallel_for(g.n * runs.count, [&](int64_t piece) {
    const int64_t img = piece / runs.count, r0 = (piece % runs.count) * runs.rows;
    const int64_t r1 = std::min(g.hw, r0 + runs.rows);
    double* acc = partial.data() + piece * g.groups;
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + (img * g.hw + r) * g.c;
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const int64_t s = img * g.groups + grp;
        double sub = 0;
        for (int64_t j = 0; j < cg; ++j) sub += term(static_cast<double>(row[grp * cg + j]), s);
        acc[grp] += sub;
      }
    }
  });
  std::vector<double> out(size_t(g.statistics()), 0.0);
  for (int64_t img = 0; img < g.n; ++img)
    for (int64_t k = 0; k < runs.count; ++k)
      for (int64_t grp = 0; grp < g.groups; ++grp)
        out[size_t(img * g.groups + grp)] += partial[size_t((img * runs.count + k) * g.groups + grp)];
  return out;
}

// body(row, sample) for every position of the batch, in pieces of about kPieceElems elements.
template <class F>
void for_each_row(const GroupNormGeom& g, F&& body) {
  const int64_t block = std::max<int64_t>(1, kPieceElems / std::max<int64_t>(g.c, 1));
  parallel_blocks(g.n * g.hw, block, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) body(r, r / g.hw);
  });
}

}  // namespace

template <class T>
void group_norm_forward(const GroupNormGeom& g, const T* x, const T* weight, const T* bias, double eps, T* y, T* mean,
                        T* rstd) {
  const double count = static_cast<double>(g.group_elements());
  std::vector<double> mu = group_sums(g, x, [](double v, int64_t) { return v; });
  for (double& v : mu) v /= count;
  const std::vector<double> squares = group_sums(g, x, [&](double v, int64_t s) {
    const double d = v - mu[size_t(s)];
    return d * d;
  });
  std::vector<double> inv(squares.size());
  for (size_t s = 0; s < inv.size(); ++s) inv[s] = 1.0 / std::sqrt(squares[s] / count + eps);
  for (size_t s = 0; s < inv.size(); ++s) {
    if (mean) mean[s] = static_cast<T>(mu[s]);
    if (rstd) rstd[s] = static_cast<T>(inv[s]);
  }
  const int64_t cg = g.group_channels();
  for_each_row(g, [&](int64_t row, int64_t img) {
    const T* xr = x + row * g.c;
    T* yr = y + row * g.c;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const double m = mu[size_t(img * g.groups + grp)], r = inv[size_t(img * g.groups + grp)];
      for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c)
        yr[c] = static_cast<T>((static_cast<double>(xr[c]) - m) * r * static_cast<double>(weight[c]) +
                               static_cast<double>(bias[c]));
    }
  });
}

template <class T>
void group_norm_backward(const GroupNormGeom& g, const T* dy, const T* x, const T* weight, const T* mean, const T* rstd,
                         T* dx, T* dweight, T* dbias) {
  const RowRuns runs(g);
  const int64_t cg = g.group_channels(), C = g.c;
  // Per (sample, run of rows): each channel's sums of dy and of dy * xhat over the run's rows.
  std::vector<double> partial(size_t(g.n * runs.count * 2 * C), 0.0);
  parallel_for(g.n * runs.count, [&](int64_t piece) {
    const int64_t img = piece / runs.count, r0 = (piece % runs.count) * runs.rows;
    const int64_t r1 = std::min(g.hw, r0 + runs.rows);
    double* sum_dy = partial.data() + piece * 2 * C;
    double* sum_dy_xhat = sum_dy + C;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t at = (img * g.hw + r) * C;
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const double m = static_cast<double>(mean[img * g.groups + grp]);
        const double inv = static_cast<double>(rstd[img * g.groups + grp]);
        for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
          const double d = static_cast<double>(dy[at + c]);
          sum_dy[c] += d;
          sum_dy_xhat[c] += d * ((static_cast<double>(x[at + c]) - m) * inv);
        }
      }
    }
  });
  // Per (sample, channel): the runs added in order.
  std::vector<double> sample_dy(size_t(g.n * C), 0.0), sample_dy_xhat(size_t(g.n * C), 0.0);
  for (int64_t img = 0; img < g.n; ++img)
    for (int64_t k = 0; k < runs.count; ++k) {
      const double* p = partial.data() + (img * runs.count + k) * 2 * C;
      for (int64_t c = 0; c < C; ++c) {
        sample_dy[size_t(img * C + c)] += p[c];
        sample_dy_xhat[size_t(img * C + c)] += p[C + c];
      }
    }
  // The parameters' gradients: the samples added in order.
  for (int64_t c = 0; c < C; ++c) {
    double db = 0, dw = 0;
    for (int64_t img = 0; img < g.n; ++img) db += sample_dy[size_t(img * C + c)], dw += sample_dy_xhat[size_t(img * C + c)];
    dbias[c] = static_cast<T>(db);
    dweight[c] = static_cast<T>(dw);
  }
  if (!dx) return;
  // Per (sample, group): mean(g) and mean(g * xhat) with g = dy * weight (weight is constant over
  // a channel's positions, so it multiplies the channel's sums).
  const double count = static_cast<double>(g.group_elements());
  std::vector<double> mean_g(size_t(g.statistics())), mean_g_xhat(size_t(g.statistics()));
  for (int64_t img = 0; img < g.n; ++img)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      double a = 0, b = 0;
      for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
        a += static_cast<double>(weight[c]) * sample_dy[size_t(img * C + c)];
        b += static_cast<double>(weight[c]) * sample_dy_xhat[size_t(img * C + c)];
      }
      mean_g[size_t(img * g.groups + grp)] = a / count;
      mean_g_xhat[size_t(img * g.groups + grp)] = b / count;
    }
  for_each_row(g, [&](int64_t row, int64_t img) {
    const int64_t at = row * C;
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const size_t s = size_t(img * g.groups + grp);
      const double m = static_cast<double>(mean[s]), inv = static_cast<double>(rstd[s]);
      for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
        const double xhat = (static_cast<double>(x[at + c]) - m) * inv;
        const double gc = static_cast<double>(dy[at + c]) * static_cast<double>(weight[c]);
        dx[at + c] = static_cast<T>(inv * (gc - mean_g[s] - xhat * mean_g_xhat[s]));
      }
    }
  });
}

template void group_norm_forward<float>(const GroupNormGeom&, const float*, const float*, const float*, double, float*,
                                        float*, float*);
template void group_norm_forward<double>(const GroupNormGeom&, const double*, const double*, const double*, double,
                                         double*, double*, double*);
template void group_norm_backward<float>(const GroupNormGeom&, const float*, const float*, const float*, const float*,
                                         const float*, float*, float*, float*);
template void group_norm_backward<double>(const GroupNormGeom&, const double*, const double*, const double*,
                                          const double*, const double*, double*, double*, double*);

}  // namespace kiln::cpu
