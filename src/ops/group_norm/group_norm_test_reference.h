#pragma once
// The tests' float64 reference of group normalization and its gradients (group_norm_test.cpp,
// group_norm_program_test.cpp, group_norm_gpu_test.cpp), written from PyTorch's definitions with
// explicit (sample, position, channel) loops, independent of the kernels' pieces and chunks; sums in
// long double. Beside each result it keeps the magnitudes that the tests' rounding bounds scale
// with (Bound below).
#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::group_norm_test {

struct Extents {
  int64_t n = 0, hw = 0, c = 0, groups = 1;
  int64_t group_channels() const { return c / groups; }
  int64_t group_elements() const { return hw * group_channels(); }
  int64_t elements() const { return n * hw * c; }
  int64_t statistics() const { return n * groups; }
  size_t at(int64_t img, int64_t p, int64_t ch) const { return size_t((img * hw + p) * c + ch); }
  int64_t statistic(int64_t img, int64_t ch) const { return img * groups + ch / group_channels(); }
};

// A result's rounding bound: |got - want| <= store * |want| + unit * (ops * rounding + addends *
// sums), for a result computed with unit roundoff `unit` and stored with `store`:
//  - rounding: the magnitude of the operands of the few operations after the sums (`ops` of them,
//    each off by `unit` of what it handles);
//  - sums: how far the result moves per unit of relative error in the sums it reads, a sum of
//    `addends` terms accumulated with unit roundoff `unit` being off by at most addends * unit
//    times the sum of its terms' magnitudes.
struct Bound {
  std::vector<double> rounding, sums;
  int64_t addends = 0;
};

struct Forward {
  std::vector<double> y, mean, rstd;
  Bound y_bound, mean_bound, rstd_bound;
};

// PyTorch's group_norm: per (sample, group) the mean and biased variance over the group's channels
// at every position; y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c].
//
// The statistics' errors: the mean is off by at most (M + 1) u mean|x| (a sum of M terms); the
// variance, from the squared deviations from that mean, by (M + 3) u (var + mean|x|^2), which moves
// rstd by that over var + eps, relatively. y moves by weight * rstd times the mean's error and by
// weight * xhat times rstd's relative error.
inline Forward forward(const Extents& e, const std::vector<double>& x, const std::vector<double>& weight,
                       const std::vector<double>& bias, double eps) {
  const int64_t M = e.group_elements();
  Forward f;
  f.y.resize(size_t(e.elements()));
  f.y_bound = {std::vector<double>(f.y.size()), std::vector<double>(f.y.size()), M + 3};
  f.mean_bound = {std::vector<double>(size_t(e.statistics())), std::vector<double>(size_t(e.statistics())), M + 1};
  f.rstd_bound = {std::vector<double>(size_t(e.statistics())), std::vector<double>(size_t(e.statistics())), M + 3};
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t grp = 0; grp < e.groups; ++grp) {
      const int64_t c0 = grp * e.group_channels(), c1 = c0 + e.group_channels();
      long double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < e.hw; ++p)
        for (int64_t ch = c0; ch < c1; ++ch) sum += x[e.at(img, p, ch)], magnitude += std::fabs(x[e.at(img, p, ch)]);
      const long double mean = sum / M;
      long double squares = 0;
      for (int64_t p = 0; p < e.hw; ++p)
        for (int64_t ch = c0; ch < c1; ++ch) squares += (x[e.at(img, p, ch)] - mean) * (x[e.at(img, p, ch)] - mean);
      const long double var = squares / M, rstd = 1 / std::sqrt(var + eps);
      const double mean_abs = double(magnitude / M);
      const double conditioning = (double(var) + mean_abs * mean_abs) / double(var + eps);
      const size_t s = size_t(img * e.groups + grp);
      f.mean.push_back(double(mean));
      f.rstd.push_back(double(rstd));
      f.mean_bound.rounding[s] = std::fabs(double(mean)), f.mean_bound.sums[s] = mean_abs;
      f.rstd_bound.rounding[s] = double(rstd), f.rstd_bound.sums[s] = double(rstd) * conditioning;
      for (int64_t p = 0; p < e.hw; ++p)
        for (int64_t ch = c0; ch < c1; ++ch) {
          const size_t i = e.at(img, p, ch);
          const long double xhat = (x[i] - mean) * rstd;
          f.y[i] = double(xhat * weight[size_t(ch)] + bias[size_t(ch)]);
          const double w = std::fabs(weight[size_t(ch)]);
          f.y_bound.rounding[i] = (std::fabs(x[i]) + std::fabs(double(mean))) * double(rstd) * w + std::fabs(bias[size_t(ch)]);
          f.y_bound.sums[i] = w * double(rstd) * mean_abs + w * std::fabs(double(xhat)) * conditioning;
        }
    }
  return f;
}

struct Backward {
  std::vector<double> dx, dweight, dbias;
  Bound dx_bound, dweight_bound, dbias_bound;
};

// The gradients from the statistics the forward saved (`mean`, `rstd`: as the backward reads them),
// with xhat = (x - mean) * rstd and g = dy * weight[c], per (sample, group) of M elements:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dweight[c] = sum of dy * xhat, dbias[c] = sum
// of dy over every sample and position.
inline Backward backward(const Extents& e, const std::vector<double>& x, const std::vector<double>& dy,
                         const std::vector<double>& weight, const std::vector<double>& mean,
                         const std::vector<double>& rstd) {
  const int64_t M = e.group_elements(), count = e.n * e.hw;
  Backward b;
  b.dx.resize(size_t(e.elements()));
  b.dx_bound = {std::vector<double>(b.dx.size()), std::vector<double>(b.dx.size()), M + 3};
  b.dweight_bound = {std::vector<double>(size_t(e.c)), std::vector<double>(size_t(e.c)), count + 3};
  b.dbias_bound = {std::vector<double>(size_t(e.c)), std::vector<double>(size_t(e.c)), count + 1};
  std::vector<long double> dweight(size_t(e.c), 0), dbias(size_t(e.c), 0);
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t grp = 0; grp < e.groups; ++grp) {
      const int64_t c0 = grp * e.group_channels(), c1 = c0 + e.group_channels();
      const size_t s = size_t(img * e.groups + grp);
      const long double m = mean[s], r = rstd[s];
      long double sum_g = 0, sum_gx = 0, abs_g = 0, abs_gx = 0;
      for (int64_t p = 0; p < e.hw; ++p)
        for (int64_t ch = c0; ch < c1; ++ch) {
          const size_t i = e.at(img, p, ch);
          const long double xhat = (x[i] - m) * r, g = dy[i] * static_cast<long double>(weight[size_t(ch)]);
          sum_g += g, sum_gx += g * xhat, abs_g += std::fabs(g), abs_gx += std::fabs(g * xhat);
          dweight[size_t(ch)] += dy[i] * xhat, dbias[size_t(ch)] += dy[i];
          b.dweight_bound.sums[size_t(ch)] += std::fabs(double(dy[i] * xhat));
          // xhat's subtraction is off by a unit of |x| + |mean|, which can be far more than |x - mean|.
          b.dweight_bound.rounding[size_t(ch)] += double((std::fabs(x[i]) + std::fabs(m)) * r * std::fabs(dy[i]));
          b.dbias_bound.sums[size_t(ch)] += std::fabs(dy[i]);
        }
      const long double mean_g = sum_g / M, mean_gx = sum_gx / M;
      for (int64_t p = 0; p < e.hw; ++p)
        for (int64_t ch = c0; ch < c1; ++ch) {
          const size_t i = e.at(img, p, ch);
          const long double xhat = (x[i] - m) * r, g = dy[i] * static_cast<long double>(weight[size_t(ch)]);
          b.dx[i] = double(r * (g - mean_g - xhat * mean_gx));
          b.dx_bound.rounding[i] = double(r * (std::fabs(g) + std::fabs(mean_g) + std::fabs(xhat * mean_gx) +
                                               (std::fabs(x[i]) + std::fabs(m)) * r * std::fabs(mean_gx)));
          b.dx_bound.sums[i] = double(r * (abs_g + std::fabs(xhat) * abs_gx) / M);
        }
    }
  for (int64_t ch = 0; ch < e.c; ++ch) {
    b.dweight.push_back(double(dweight[size_t(ch)]));
    b.dbias.push_back(double(dbias[size_t(ch)]));
  }
  return b;
}

// The elements of `got` outside their bound (Bound above) around `want`: how many, and the first
// one's index (-1 when none).
struct Misses {
  int64_t count = 0, first = -1;
};
template <class G>
Misses outside_bound(const G& got, const std::vector<double>& want, const Bound& b, double store, double unit,
                     int ops) {
  Misses m;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = store * std::fabs(want[i]) + unit * (ops * b.rounding[i] + double(b.addends) * b.sums[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound) && m.count++ == 0) m.first = int64_t(i);
  }
  return m;
}

}  // namespace kiln::group_norm_test
