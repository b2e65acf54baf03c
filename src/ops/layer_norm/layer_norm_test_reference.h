#pragma once
// The tests' float64 reference of the layer norm (layer_norm_test.cpp, layer_norm_gpu_test.cpp),
// written from the definitions with explicit (row, channel) loops in long double, independent of
// the kernels' pieces and teams. With each result it keeps the scale of the rounding errors a kernel
// computing it with unit roundoff u may make (first order, from the operations the definition
// takes: a sum of n terms at most (n - 1) u times their magnitudes in any order, each product and
// quotient u of its own): a result is right within
//   store_unit * |want| + 2 * u * scale (+ a floor for results stored as subnormals),
// twice the first-order bound, for the terms of second order.
#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::layer_norm_test {

struct Extents {
  int64_t rows = 0, c = 0;
  int64_t elements() const { return rows * c; }
};

struct Forward {
  std::vector<double> y, mean, rstd;
  std::vector<double> y_scale, mean_scale, rstd_scale;
};

// mean, var = sum((x - mean)^2) / divisor (c unless given: c - 1 is the unbiased variance, a
// deliberate mistake), rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * w + b.
// Scales, with A the row's mean |x|: the mean's c A (its sum); rstd's (c/2 + 4) rstd (the centered
// squares' sum, the quotient, sqrt and reciprocal; the mean's error cancels to first order); y's
// |w| (c A rstd + (c/2 + 6) |xhat|) + |w xhat| + |y| (xhat's errors from the mean and rstd, then
// the product and sum).
inline Forward forward(const Extents& e, const std::vector<double>& x, const std::vector<double>& w,
                       const std::vector<double>& b, double eps, double divisor = 0) {
  const size_t n = size_t(e.elements()), rows = size_t(e.rows);
  Forward f{std::vector<double>(n), std::vector<double>(rows), std::vector<double>(rows), std::vector<double>(n),
            std::vector<double>(rows), std::vector<double>(rows)};
  const long double c = static_cast<long double>(e.c);
  for (int64_t r = 0; r < e.rows; ++r) {
    auto at = [&](int64_t k) { return size_t(r * e.c + k); };
    long double sum = 0, magnitude = 0;
    for (int64_t k = 0; k < e.c; ++k) sum += x[at(k)], magnitude += std::fabs(x[at(k)]);
    const long double mean = sum / c, a = magnitude / c;
    long double squares = 0;
    for (int64_t k = 0; k < e.c; ++k) squares += (x[at(k)] - mean) * (x[at(k)] - mean);
    const long double rstd = 1 / std::sqrt(squares / (divisor > 0 ? divisor : c) + eps);
    f.mean[size_t(r)] = double(mean), f.rstd[size_t(r)] = double(rstd);
    f.mean_scale[size_t(r)] = double(c * a);
    f.rstd_scale[size_t(r)] = double((c / 2 + 4) * rstd);
    for (int64_t k = 0; k < e.c; ++k) {
      const long double xhat = (x[at(k)] - mean) * rstd, y = xhat * w[size_t(k)] + b[size_t(k)];
      f.y[at(k)] = double(y);
      f.y_scale[at(k)] = double(std::fabs(w[size_t(k)]) * (c * a * rstd + (c / 2 + 6) * std::fabs(xhat)) +
                                std::fabs(xhat * w[size_t(k)]) + std::fabs(y));
    }
  }
  return f;
}

struct Backward {
  std::vector<double> dx, dweight, dbias;
  std::vector<double> dx_scale, dweight_scale, dbias_scale;
};

// From the statistics a forward saved (as stored): g = dy * w, xhat = (x - mean) * rstd, per row
// a = mean(g), p = mean(g * xhat), dx = rstd * (g - a - xhat * p) (`projection` false leaves the
// xhat * p term out, a deliberate mistake); dweight = sum over rows of dy * xhat, dbias = sum of dy.
// Scales, with G and H the row's mean |g| and |g xhat|: dx's rstd (2 |g| + c G + 2 |a| + |xhat|
// (4 |p| + (c + 3) H)) + 2 |dx|; dweight's (rows + 4) sum |dy xhat|; dbias's rows sum |dy|.
inline Backward backward(const Extents& e, const std::vector<double>& dy, const std::vector<double>& x,
                         const std::vector<double>& w, const std::vector<double>& mean,
                         const std::vector<double>& rstd, bool projection = true) {
  const size_t n = size_t(e.elements()), c = size_t(e.c);
  Backward r{std::vector<double>(n), std::vector<double>(c), std::vector<double>(c), std::vector<double>(n),
             std::vector<double>(c), std::vector<double>(c)};
  std::vector<long double> dw(c, 0), db(c, 0), dw_terms(c, 0), db_terms(c, 0);
  const long double count = static_cast<long double>(e.c);
  for (int64_t row = 0; row < e.rows; ++row) {
    auto at = [&](int64_t k) { return size_t(row * e.c + k); };
    const long double m = mean[size_t(row)], s = rstd[size_t(row)];
    auto xhat = [&](int64_t k) { return (x[at(k)] - m) * s; };
    auto g = [&](int64_t k) { return static_cast<long double>(dy[at(k)]) * w[size_t(k)]; };
    long double sum_g = 0, sum_gx = 0, abs_g = 0, abs_gx = 0;
    for (int64_t k = 0; k < e.c; ++k) {
      sum_g += g(k), sum_gx += g(k) * xhat(k);
      abs_g += std::fabs(g(k)), abs_gx += std::fabs(g(k) * xhat(k));
      dw[size_t(k)] += dy[at(k)] * xhat(k), dw_terms[size_t(k)] += std::fabs(dy[at(k)] * xhat(k));
      db[size_t(k)] += dy[at(k)], db_terms[size_t(k)] += std::fabs(dy[at(k)]);
    }
    const long double a = sum_g / count, p = sum_gx / count;
    for (int64_t k = 0; k < e.c; ++k) {
      const long double dx = s * (g(k) - a - (projection ? xhat(k) * p : 0));
      r.dx[at(k)] = double(dx);
      r.dx_scale[at(k)] = double(s * (2 * std::fabs(g(k)) + abs_g + 2 * std::fabs(a) +
                                      std::fabs(xhat(k)) * (4 * std::fabs(p) + (count + 3) / count * abs_gx)) +
                                 2 * std::fabs(dx));
    }
  }
  for (size_t k = 0; k < c; ++k) {
    r.dweight[k] = double(dw[k]), r.dbias[k] = double(db[k]);
    r.dweight_scale[k] = double((e.rows + 4) * dw_terms[k]);
    r.dbias_scale[k] = double(e.rows * db_terms[k]);
  }
  return r;
}

// The elements of `got` farther from `want` than store_unit * |want| + 2 * unit * scale + floor:
// how many, and the first one's index (-1 when none).
struct Misses {
  int64_t count = 0, first = -1;
};
template <class G>
Misses outside_bound(const G& got, const std::vector<double>& want, const std::vector<double>& scale,
                     double store_unit, double unit, double floor = 0) {
  Misses m;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = floor + store_unit * std::fabs(want[i]) + 2 * unit * scale[i];
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= bound) && m.count++ == 0) m.first = int64_t(i);
  }
  return m;
}

}  // namespace kiln::layer_norm_test
