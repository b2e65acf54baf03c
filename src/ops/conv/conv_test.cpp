// Conv kernels against a direct-convolution reference in double, gradients against finite
// differences, and geometry validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/error.h"
#include "ops/conv/conv_cpu.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"

namespace kiln::cpu {
namespace {

using kiln::testing::cast;
using kiln::testing::expect_gradient_matches;
using kiln::testing::expect_near_all;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::uniform_vec;
using kiln::testing::weighted_sum;

struct Case {
  int64_t n, h, w, c, k, r, s, stride, pad;
  bool bias;
};

std::string describe(const Case& t) {
  return fmt::format("n{} {}x{}x{} -> k{} {}x{} stride {} pad {}{}", t.n, t.h, t.w, t.c, t.k, t.r, t.s, t.stride,
                     t.pad, t.bias ? " bias" : "");
}

// Kernel sizes 1/3/5 and rectangular, strides 1-3, padding 0-3 (including output pixels whose
// whole window lies in the padding), odd sizes, C != K, C == 1 as in a first layer.
const std::vector<Case> kCases = {
    {2, 5, 5, 3, 4, 1, 1, 1, 0, false},  // pointwise: no im2col
    {2, 5, 4, 3, 5, 1, 1, 1, 0, true},
    {2, 6, 5, 3, 5, 1, 1, 2, 0, true},  // 1x1 but strided: needs im2col
    {2, 7, 6, 3, 4, 3, 3, 1, 1, true},
    {3, 7, 9, 2, 5, 3, 3, 2, 1, false},
    {2, 5, 6, 1, 3, 3, 3, 1, 0, true},
    {1, 9, 8, 4, 3, 5, 5, 1, 2, true},
    {2, 11, 7, 3, 2, 5, 5, 2, 2, false},
    {1, 4, 4, 2, 3, 5, 5, 1, 1, false},  // kernel larger than the unpadded input
    {2, 6, 7, 3, 4, 3, 3, 3, 2, true},
    {1, 3, 4, 2, 3, 3, 3, 1, 3, true},  // border outputs see only padding
    {2, 7, 5, 3, 2, 3, 1, 1, 1, true},  // R != S
    {2, 5, 7, 2, 3, 1, 3, 2, 1, false},
};

ConvGeom geom(const Case& t) {
  return ConvGeom::make({t.n, t.h, t.w, t.c}, {t.k, t.r, t.s, t.c}, static_cast<int>(t.stride),
                        static_cast<int>(t.pad));
}

// Calls f(n, oh, ow, k, r, s, c, x_index) for every multiply of a direct convolution whose
// input tap lies inside the image.
template <class F>
void for_each_tap(const ConvGeom& g, F&& f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.ho; ++oh)
      for (int64_t ow = 0; ow < g.wo; ++ow)
        for (int64_t k = 0; k < g.k; ++k)
          for (int64_t r = 0; r < g.r; ++r)
            for (int64_t s = 0; s < g.s; ++s) {
              // Square windows here (conv_window_test.cpp covers the others).
              const int64_t ih = oh * g.win.stride_h - g.win.pad_top + r, iw = ow * g.win.stride_w - g.win.pad_left + s;
              if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
              for (int64_t c = 0; c < g.c; ++c)
                f(((n * g.ho + oh) * g.wo + ow) * g.k + k, ((k * g.r + r) * g.s + s) * g.c + c,
                  ((n * g.h + ih) * g.w + iw) * g.c + c);
            }
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// y = conv(x, w) + b; dx, dw, db are the gradients of sum(y * dy).
Reference naive(const ConvGeom& g, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>* b, const std::vector<double>& dy) {
  Reference ref;
  ref.y.assign(g.n * g.ho * g.wo * g.k, 0.0);
  ref.dx.assign(x.size(), 0.0);
  ref.dw.assign(w.size(), 0.0);
  ref.db.assign(g.k, 0.0);
  for (size_t i = 0; i < ref.y.size(); ++i) {
    if (b) ref.y[i] = (*b)[i % g.k];
    ref.db[i % g.k] += dy[i];
  }
  for_each_tap(g, [&](int64_t yi, int64_t wi, int64_t xi) {
    ref.y[yi] += x[xi] * w[wi];
    ref.dx[xi] += dy[yi] * w[wi];
    ref.dw[wi] += dy[yi] * x[xi];
  });
  return ref;
}

// Runs all three kernels in precision T on inputs already rounded to T and compares them
// with the double reference.
template <class T>
void check_case(const Case& t, double tol, unsigned seed) {
  const ConvGeom g = geom(t);
  std::mt19937 rng(seed);
  const auto x = cast<double>(cast<T>(uniform_vec(rng, g.n * g.h * g.w * g.c)));
  const auto w = cast<double>(cast<T>(uniform_vec(rng, g.k * g.r * g.s * g.c)));
  const auto b = cast<double>(cast<T>(uniform_vec(rng, g.k)));
  const auto dy = cast<double>(cast<T>(uniform_vec(rng, g.n * g.ho * g.wo * g.k)));
  const Reference ref = naive(g, x, w, t.bias ? &b : nullptr, dy);

  const auto xt = cast<T>(x), wt = cast<T>(w), bt = cast<T>(b), dyt = cast<T>(dy);
  // Outputs start as NaN: every kernel must overwrite them completely.
  std::vector<T> y(ref.y.size(), NAN), dx(x.size(), NAN), dw(w.size(), NAN), db(g.k, NAN);
  conv_fwd<T>(g, xt.data(), wt.data(), t.bias ? bt.data() : nullptr, y.data());
  conv_dgrad<T>(g, dyt.data(), wt.data(), dx.data());
  conv_wgrad<T>(g, dyt.data(), xt.data(), dw.data(), t.bias ? db.data() : nullptr);
  const std::string what = describe(t);
  expect_near_all(y, ref.y, tol, "y " + what);
  expect_near_all(dx, ref.dx, tol, "dx " + what);
  expect_near_all(dw, ref.dw, tol, "dw " + what);
  if (t.bias) expect_near_all(db, ref.db, tol, "db " + what);
}

// Restores the default workspace limit after a test shrinks it.
struct WorkspaceLimit {
  size_t saved = conv_workspace_limit();
  explicit WorkspaceLimit(size_t bytes) { set_conv_workspace_limit(bytes); }
  ~WorkspaceLimit() { set_conv_workspace_limit(saved); }
};

TEST(ConvCpu, DoubleMatchesDirectConvolution) {
  unsigned seed = 1;
  for (const Case& t : kCases) check_case<double>(t, 1e-10, seed++);
}

TEST(ConvCpu, FloatMatchesDirectConvolution) {
  unsigned seed = 100;
  for (const Case& t : kCases) check_case<float>(t, 1e-4, seed++);
}

// A one-byte budget forces one image per chunk: offsets and wgrad's accumulation across
// chunks must still give the same answers.
TEST(ConvCpu, ChunkedBatchMatchesDirectConvolution) {
  WorkspaceLimit limit(1);
  unsigned seed = 200;
  for (const Case& t : kCases) {
    check_case<double>(t, 1e-10, seed++);
    check_case<float>(t, 1e-4, seed++);
  }
}

// Loss = sum(conv(x, w, b) * R); the backward kernels fed with dy = R must give its gradient.
TEST(ConvCpu, GradientsMatchFiniteDifferences) {
  const std::vector<Case> cases = {
      {2, 6, 5, 3, 4, 3, 3, 2, 1, true},
      {1, 7, 6, 2, 3, 5, 5, 1, 2, true},
      {2, 4, 5, 3, 2, 1, 1, 1, 0, true},
  };
  unsigned seed = 300;
  for (const Case& t : cases) {
    const ConvGeom g = geom(t);
    std::mt19937 rng(seed++);
    const auto x = uniform_vec(rng, g.n * g.h * g.w * g.c);
    const auto w = uniform_vec(rng, g.k * g.r * g.s * g.c);
    const auto b = uniform_vec(rng, g.k);
    const auto R = uniform_vec(rng, g.n * g.ho * g.wo * g.k);
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
      std::vector<double> y(R.size());
      conv_fwd<double>(g, xv.data(), wv.data(), bv.data(), y.data());
      return weighted_sum(y, R);
    };
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    conv_dgrad<double>(g, R.data(), w.data(), dx.data());
    conv_wgrad<double>(g, R.data(), x.data(), dw.data(), db.data());

    const double h = 1e-6, tol = 1e-6;
    const std::string what = describe(t);
    expect_gradient_matches(dx, numeric_gradient([&](const auto& v) { return loss(v, w, b); }, x, h), tol,
                            GradError::PerElement, "dx " + what);
    expect_gradient_matches(dw, numeric_gradient([&](const auto& v) { return loss(x, v, b); }, w, h), tol,
                            GradError::PerElement, "dw " + what);
    expect_gradient_matches(db, numeric_gradient([&](const auto& v) { return loss(x, w, v); }, b, h), tol,
                            GradError::PerElement, "db " + what);
  }
}

// Large enough that im2col and the GEMM run on several threads.
TEST(ConvCpu, RepeatedRunsAreBitwiseIdentical) {
  const Case t{8, 20, 20, 32, 64, 3, 3, 1, 1, true};
  const ConvGeom g = geom(t);
  std::mt19937 rng(7);
  const auto x = cast<float>(uniform_vec(rng, g.n * g.h * g.w * g.c));
  const auto w = cast<float>(uniform_vec(rng, g.k * g.r * g.s * g.c));
  const auto b = cast<float>(uniform_vec(rng, g.k));
  const auto dy = cast<float>(uniform_vec(rng, g.n * g.ho * g.wo * g.k));
  auto run = [&] {
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size()), all;
    conv_fwd<float>(g, x.data(), w.data(), b.data(), y.data());
    conv_dgrad<float>(g, dy.data(), w.data(), dx.data());
    conv_wgrad<float>(g, dy.data(), x.data(), dw.data(), db.data());
    for (const auto* v : {&y, &dx, &dw, &db}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto first = run(), second = run();
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)), 0);
}

void expect_geometry_error(const Shape& x, const Shape& w, int stride, int pad,
                           const std::string& needle) {
  SCOPED_TRACE("x " + shape_str(x) + " w " + shape_str(w));
  kiln::testing::expect_error([&] { ConvGeom::make(x, w, stride, pad); }, {needle});
}

TEST(ConvCpu, GeometryIsComputedFromShapes) {
  const ConvGeom g = ConvGeom::make({2, 11, 7, 3}, {5, 3, 5, 3}, 2, 1);
  EXPECT_EQ(g.ho, 6);  // (11 + 2 - 3) / 2 + 1
  EXPECT_EQ(g.wo, 3);  // (7 + 2 - 5) / 2 + 1
  EXPECT_EQ(g.k, 5);
  EXPECT_EQ(g.c, 3);
}

TEST(ConvCpu, BadGeometryThrows) {
  expect_geometry_error({2, 8, 8, 3}, {4, 3, 3, 2}, 1, 1, "channels");
  expect_geometry_error({2, 4, 4, 3}, {4, 7, 7, 3}, 1, 1, "larger than the padded input");
  expect_geometry_error({2, 4, 9, 3}, {4, 5, 3, 3}, 1, 0, "larger than the padded input");
  expect_geometry_error({8, 8, 3}, {4, 3, 3, 3}, 1, 1, "NHWC");
  expect_geometry_error({2, 8, 8, 3}, {4, 3, 3}, 1, 1, "KRSC");
  expect_geometry_error({2, 8, 8, 3}, {4, 3, 3, 3}, 0, 1, "stride");
  expect_geometry_error({2, 8, 8, 3}, {4, 3, 3, 3}, 1, -1, "padding");
  expect_geometry_error({0, 8, 8, 3}, {4, 3, 3, 3}, 1, 1, "empty");
}

}  // namespace
}  // namespace kiln::cpu
