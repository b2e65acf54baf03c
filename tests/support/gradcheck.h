#pragma once
// The tests' one finite-difference gradient checker: central differences of a scalar function
// (in float64), and the comparison of an analytic gradient with them.
//
//   numeric_gradient(f, x, h)    d f / d x for f: const Vec& -> double, every element of x
//   central_difference(f, v, h)  d f() / d v for one value f() reads (e.g. a parameter inside
//                                a compiled program), restored afterwards
//   weighted_sum(y, r)           sum(y * r): the scalar loss whose gradient with respect to y is
//                                r, turning a kernel's vector output into a checkable function
//   expect_gradient_matches(analytic, numeric, tol, GradError::..., what)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

// (f() with value = v + h  -  f() with value = v - h) / 2h; `value` is restored to v exactly.
template <class F>
double central_difference(F&& f, double& value, double h) {
  const double keep = value;
  value = keep + h;
  const double up = f();
  value = keep - h;
  const double down = f();
  value = keep;
  return (up - down) / (2 * h);
}

// The gradient of f(x) (a scalar) with respect to every element of x, by central differences
// with step h: f sees x with one element moved by +-h at a time.
template <class F>
std::vector<double> numeric_gradient(F&& f, std::vector<double> x, double h) {
  std::vector<double> g(x.size());
  const std::vector<double>& at = x;
  for (size_t i = 0; i < x.size(); ++i) g[i] = central_difference([&] { return f(at); }, x[i], h);
  return g;
}

// sum(y[i] * r[i]) in index order.
template <class Y>
double weighted_sum(const Y& y, const std::vector<double>& r) {
  double sum = 0;
  for (size_t i = 0; i < r.size(); ++i) sum += static_cast<double>(y[i]) * r[i];
  return sum;
}

// How an analytic gradient's distance from the numeric one is measured.
enum class GradError {
  Relative,    // max |a - n| / max |n|: relative to the gradient's scale (rel_err)
  PerElement,  // max |a - n| / max(1, |n|): each element relative when large, absolute near zero
  Absolute,    // max |a - n|
};

struct GradErrorAt {
  double error = 0;  // the measure, over all elements
  size_t worst = 0;  // the element that sets it (Relative: the largest |a - n|)
};

// NaN when any element is NaN, so that the check fails.
inline GradErrorAt gradient_error(const std::vector<double>& analytic, const std::vector<double>& numeric,
                                  GradError kind) {
  GradErrorAt r;
  double worst = 0, scale = kind == GradError::Relative ? 1e-300 : 1.0;
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double diff = std::abs(analytic[i] - numeric[i]);
    const double e = kind == GradError::PerElement ? diff / std::max(1.0, std::abs(numeric[i])) : diff;
    if (std::isnan(e)) {
      r.error = e, r.worst = i;
      return r;
    }
    if (e > worst) worst = e, r.worst = i;
    if (kind == GradError::Relative) scale = std::max(scale, std::abs(numeric[i]));
  }
  r.error = worst / scale;
  return r;
}

// Fails unless gradient_error(analytic, numeric, kind) < tol; the message names the worst
// element (`index_stride` apart in the checked tensor when only every so many were checked).
inline void expect_gradient_matches(const std::vector<double>& analytic, const std::vector<double>& numeric,
                                    double tol, GradError kind, const std::string& what, size_t index_stride = 1) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  const GradErrorAt e = gradient_error(analytic, numeric, kind);
  EXPECT_LT(e.error, tol) << what << ": analytic vs central differences, worst at [" << e.worst * index_stride
                          << "]: analytic " << (analytic.empty() ? 0.0 : analytic[e.worst]) << ", numeric "
                          << (numeric.empty() ? 0.0 : numeric[e.worst]);
}

}  // namespace kiln::testing
