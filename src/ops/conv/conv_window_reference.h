#pragma once
// A float64 reference of a convolution over any window (core/conv_window.h: strides, the padding of
// each side, dilation, groups), written from PyTorch's definition of nn.Conv2d, one loop per index,
// nothing shared with the kernels under test (not even their output-size arithmetic): the tests of
// the CPU kernels (conv_window_test.cpp) and of oneDNN's (conv_onednn_test.cpp).
//
//   y[n, oh, ow, k] = sum over r, s, c' of x[n, oh * sh - pad_top + r * dh, ow * sw - pad_left + s * dw,
//                                            grp * C/G + c'] * w[k, r, s, c'],   grp = k / (K/G)
//
// with taps outside the input reading 0. Each result comes with its sum of |terms|, the scale its
// rounding error is bounded against. A `Flaw` computes a plausible wrong convolution instead (taps
// mirrored, groups reading their neighbour's channels, dilation ignored, the padding's sides
// swapped), which a test's bound must reject.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/conv_window.h"
#include "kiln/dtype.h"

namespace kiln::conv_test {

struct WindowProblem {
  int64_t n, h, w, c, k, r, s;
  ConvWindow win;
  // Output rows and columns: the positions where the dilated filter, stepped by the stride, lies
  // wholly inside the padded input.
  int64_t ho() const {
    int64_t count = 0;
    while (count * win.stride_h + (r - 1) * win.dilation_h < h + win.pad_top + win.pad_bottom) ++count;
    return count;
  }
  int64_t wo() const {
    int64_t count = 0;
    while (count * win.stride_w + (s - 1) * win.dilation_w < w + win.pad_left + win.pad_right) ++count;
    return count;
  }
  int64_t cg() const { return c / win.groups; }
  Shape x_shape() const { return {n, h, w, c}; }
  Shape w_shape() const { return {k, r, s, cg()}; }
  Shape y_shape() const { return {n, ho(), wo(), k}; }
  size_t x_numel() const { return size_t(n * h * w * c); }
  size_t w_numel() const { return size_t(k * r * s * cg()); }
  size_t y_numel() const { return size_t(n * ho() * wo() * k); }
};

inline std::string label(const WindowProblem& p) {
  const ConvWindow& v = p.win;
  return fmt::format("n{} {}x{}x{} -> k{} {}x{} stride {}x{} pad t{} l{} b{} r{} dilation {}x{} groups {}", p.n, p.h,
                     p.w, p.c, p.k, p.r, p.s, v.stride_h, v.stride_w, v.pad_top, v.pad_left, v.pad_bottom,
                     v.pad_right, v.dilation_h, v.dilation_w, v.groups);
}

enum class Flaw {
  None,
  MirroredTaps,     // w[k, R-1-r, S-1-s, c']: a convolution where a correlation is meant
  NeighbourGroup,   // group grp reads the input channels of group grp + 1 (mod G)
  NoDilation,       // taps side by side whatever the dilation (the output size kept)
  SwappedPadding,   // windows start pad_bottom and pad_right before the input (the output size kept)
};

// Calls f(y_index, w_index, x_index) for each product of the convolution (with `flaw`) whose input
// tap lies inside the image.
template <class F>
void for_each_product(const WindowProblem& p, Flaw flaw, F&& f) {
  const ConvWindow& v = p.win;
  const int64_t ho = p.ho(), wo = p.wo(), kg = p.k / v.groups, cg = p.cg();
  const int64_t dh = flaw == Flaw::NoDilation ? 1 : v.dilation_h, dw = flaw == Flaw::NoDilation ? 1 : v.dilation_w;
  const int64_t top = flaw == Flaw::SwappedPadding ? v.pad_bottom : v.pad_top;
  const int64_t left = flaw == Flaw::SwappedPadding ? v.pad_right : v.pad_left;
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow)
        for (int64_t k = 0; k < p.k; ++k)
          for (int64_t r = 0; r < p.r; ++r)
            for (int64_t s = 0; s < p.s; ++s)
              for (int64_t ci = 0; ci < cg; ++ci) {
                const int64_t ih = oh * v.stride_h - top + r * dh, iw = ow * v.stride_w - left + s * dw;
                if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
                int64_t grp = k / kg;
                if (flaw == Flaw::NeighbourGroup) grp = (grp + 1) % v.groups;
                const int64_t wr = flaw == Flaw::MirroredTaps ? p.r - 1 - r : r;
                const int64_t ws = flaw == Flaw::MirroredTaps ? p.s - 1 - s : s;
                f(size_t(((n * ho + oh) * wo + ow) * p.k + k), size_t(((k * p.r + wr) * p.s + ws) * cg + ci),
                  size_t(((n * p.h + ih) * p.w + iw) * p.c + grp * cg + ci));
              }
}

// The most terms (products, and the bias) any one result of the problem sums: a forward output
// R * S * C/G + 1, an input gradient at most R * S * K/G, a weight gradient N * Ho * Wo.
inline int64_t most_terms(const WindowProblem& p) {
  const int64_t fwd = p.r * p.s * p.cg() + 1, dgrad = p.r * p.s * (p.k / p.win.groups), wgrad = p.n * p.ho() * p.wo();
  return std::max({fwd, dgrad, wgrad});
}

// The classical worst case of a sum of products rounded in precision T (unit roundoff u): each
// product and each of the n additions rounds once, so a result is within (n + 1) u of its sum of
// |terms| (to first order: the whole bound, n u / (1 - n u), stays under the 1.1 margin while
// n u < 0.09, n below 1.5 million in fp32).
template <class T>
inline double rounding_bound(const WindowProblem& p) {
  const double u = std::numeric_limits<T>::epsilon() / 2;
  return 1.1 * double(most_terms(p) + 1) * u;
}

// A result and, per element, the sum of |terms| it adds.
struct Result {
  std::vector<double> value, scale;
};

// y = conv(x, w) + bias (bias may be empty).
inline Result forward(const WindowProblem& p, const std::vector<double>& x, const std::vector<double>& w,
                      const std::vector<double>& bias, Flaw flaw = Flaw::None) {
  Result y{std::vector<double>(p.y_numel(), 0.0), std::vector<double>(p.y_numel(), 0.0)};
  for (size_t i = 0; i < y.value.size() && !bias.empty(); ++i) {
    y.value[i] = bias[i % size_t(p.k)];
    y.scale[i] = std::fabs(y.value[i]);
  }
  for_each_product(p, flaw, [&](size_t yi, size_t wi, size_t xi) {
    const double term = x[xi] * w[wi];
    y.value[yi] += term, y.scale[yi] += std::fabs(term);
  });
  return y;
}

// dx, the gradient of sum(y * dy) with respect to x.
inline Result data_gradient(const WindowProblem& p, const std::vector<double>& dy, const std::vector<double>& w,
                            Flaw flaw = Flaw::None) {
  Result dx{std::vector<double>(p.x_numel(), 0.0), std::vector<double>(p.x_numel(), 0.0)};
  for_each_product(p, flaw, [&](size_t yi, size_t wi, size_t xi) {
    const double term = dy[yi] * w[wi];
    dx.value[xi] += term, dx.scale[xi] += std::fabs(term);
  });
  return dx;
}

// dw, the gradient of sum(y * dy) with respect to w.
inline Result weight_gradient(const WindowProblem& p, const std::vector<double>& dy, const std::vector<double>& x,
                              Flaw flaw = Flaw::None) {
  Result dw{std::vector<double>(p.w_numel(), 0.0), std::vector<double>(p.w_numel(), 0.0)};
  for_each_product(p, flaw, [&](size_t yi, size_t wi, size_t xi) {
    const double term = dy[yi] * x[xi];
    dw.value[wi] += term, dw.scale[wi] += std::fabs(term);
  });
  return dw;
}

// dbias, the gradient of sum(y * dy) with respect to the bias: dy summed over all but its channel.
inline Result bias_gradient(const WindowProblem& p, const std::vector<double>& dy) {
  Result db{std::vector<double>(size_t(p.k), 0.0), std::vector<double>(size_t(p.k), 0.0)};
  for (size_t i = 0; i < dy.size(); ++i) {
    const size_t k = i % size_t(p.k);
    db.value[k] += dy[i], db.scale[k] += std::fabs(dy[i]);
  }
  return db;
}

// The worst |got - want| relative to each element's scale (a NaN, an element never written, is
// infinitely far), and where.
struct Distance {
  double worst = 0;
  size_t at = 0;
};
template <class T>
Distance distance(const std::vector<T>& got, const Result& want) {
  Distance d;
  if (got.size() != want.value.size()) return {INFINITY, 0};
  for (size_t i = 0; i < got.size(); ++i) {
    double ratio = std::fabs(double(got[i]) - want.value[i]) / std::max(want.scale[i], 1e-300);
    if (std::isnan(ratio)) ratio = INFINITY;
    if (ratio > d.worst) d.worst = ratio, d.at = i;
  }
  return d;
}

// `got` within `bound` of the reference, relative to each element's sum of |terms|.
template <class T>
void expect_within(const std::string& what, const std::vector<T>& got, const Result& want, double bound) {
  ASSERT_EQ(got.size(), want.value.size()) << what;
  const Distance d = distance(got, want);
  EXPECT_LE(d.worst, bound) << what << ": worst relative miss " << d.worst << " at " << d.at << ": got "
                            << double(got[d.at]) << ", want " << want.value[d.at];
}

// The flaws a problem can tell apart from the right convolution: mirrored taps where the filter
// has more than one tap, neighbouring groups where there are several, dilation where there is
// some, swapped padding where the sides differ.
inline std::vector<Flaw> telling_flaws(const WindowProblem& p) {
  const ConvWindow& v = p.win;
  std::vector<Flaw> flaws;
  if (p.r > 1 || p.s > 1) flaws.push_back(Flaw::MirroredTaps);
  if (v.groups > 1) flaws.push_back(Flaw::NeighbourGroup);
  if (v.dilation_h > 1 || v.dilation_w > 1) flaws.push_back(Flaw::NoDilation);
  if (v.pad_top != v.pad_bottom || v.pad_left != v.pad_right) flaws.push_back(Flaw::SwappedPadding);
  return flaws;
}

}  // namespace kiln::conv_test
