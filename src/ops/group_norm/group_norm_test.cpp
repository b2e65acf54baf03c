// Group normalization's CPU kernels against float64 loops (group_norm_test_reference.h), in double
// and float: maps with groups of several channels, one group, a group a channel, flat (N, C)
// features, enough positions for several pieces; the statistics saved or not, the input gradient
// wanted or not; the same bytes at any thread count; and bounds shown to catch plausible mistakes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/group_norm/group_norm_cpu.h"
#include "ops/group_norm/group_norm_test_reference.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using group_norm_test::Extents;
using group_norm_test::Misses;
using group_norm_test::outside_bound;

constexpr double kDoubleUnit = 0x1p-53;  // unit roundoff of double and float
constexpr double kFloatUnit = 0x1p-24;
constexpr double kEps = 1e-3;

template <class T>
constexpr double store_unit() {
  return sizeof(T) == sizeof(float) ? kFloatUnit : kDoubleUnit;
}

// Inputs as values of T (the reference sees what the kernel sees). Each (sample, group) sits at an
// offset of its own (2 + the group) with a spread of its own (0.5 to 2), so that statistics taken
// over the wrong channels or samples show, and the variance is taken of values far from zero.
struct Inputs {
  std::vector<double> x, weight, bias, dy;
};

template <class T>
Inputs inputs(const Extents& e, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> spread(0.5, 2.0);
  Inputs in{std::vector<double>(size_t(e.elements())), {}, {}, {}};
  std::vector<double> scale(size_t(e.statistics()));
  for (double& s : scale) s = spread(rng);
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t p = 0; p < e.hw; ++p)
      for (int64_t ch = 0; ch < e.c; ++ch) {
        const int64_t s = e.statistic(img, ch);
        in.x[e.at(img, p, ch)] = static_cast<T>(2.0 + double(s % e.groups) + scale[size_t(s)] * normal(rng));
      }
  auto draw = [&](size_t n, double mean) {
    std::vector<double> v(n);
    for (double& d : v) d = static_cast<T>(mean + normal(rng));
    return v;
  };
  in.weight = draw(size_t(e.c), 1.0), in.bias = draw(size_t(e.c), 0.0), in.dy = draw(size_t(e.elements()), 0.0);
  return in;
}

template <class T>
struct KernelRun {
  std::vector<T> y, mean, rstd, dx, dweight, dbias;
};

// The forward (saving the statistics), then the backward from them, dx only when `want_dx`.
template <class T>
KernelRun<T> run_kernels(const Extents& e, const Inputs& in, bool want_dx) {
  const GroupNormGeom g{e.n, e.hw, e.c, e.groups};
  const std::vector<T> x(in.x.begin(), in.x.end()), w(in.weight.begin(), in.weight.end()),
      b(in.bias.begin(), in.bias.end()), dy(in.dy.begin(), in.dy.end());
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const size_t map = size_t(e.elements()), stats = size_t(e.statistics()), c = size_t(e.c);
  KernelRun<T> r{std::vector<T>(map, nan),   std::vector<T>(stats, nan), std::vector<T>(stats, nan),
                 std::vector<T>(want_dx ? map : 0, nan), std::vector<T>(c, nan), std::vector<T>(c, nan)};
  cpu::group_norm_forward<T>(g, x.data(), w.data(), b.data(), kEps, r.y.data(), r.mean.data(), r.rstd.data());
  cpu::group_norm_backward<T>(g, dy.data(), x.data(), w.data(), r.mean.data(), r.rstd.data(),
                              want_dx ? r.dx.data() : nullptr, r.dweight.data(), r.dbias.data());
  return r;
}

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Every result within its bound: computed in double (unit 2^-53) and stored in T.
template <class T>
void expect_matches(const std::string& what, const Extents& e, const Inputs& in, const KernelRun<T>& got) {
  const group_norm_test::Forward f = group_norm_test::forward(e, in.x, in.weight, in.bias, kEps);
  const group_norm_test::Backward b =
      group_norm_test::backward(e, in.x, in.dy, in.weight, as_double(got.mean), as_double(got.rstd));
  struct Check {
    const char* name;
    const std::vector<T>& got;
    const std::vector<double>& want;
    const group_norm_test::Bound& bound;
    int ops;
  };
  const std::vector<Check> checks = {{"y", got.y, f.y, f.y_bound, 4},
                                     {"mean", got.mean, f.mean, f.mean_bound, 1},
                                     {"rstd", got.rstd, f.rstd, f.rstd_bound, 3},
                                     {"dweight", got.dweight, b.dweight, b.dweight_bound, 3},
                                     {"dbias", got.dbias, b.dbias, b.dbias_bound, 0},
                                     {"dx", got.dx, b.dx, b.dx_bound, 8}};
  for (const Check& c : checks) {
    if (c.got.empty()) continue;  // dx not wanted
    const Misses m = outside_bound(c.got, c.want, c.bound, store_unit<T>(), kDoubleUnit, c.ops);
    EXPECT_EQ(m.count, 0) << what << ": " << c.name << " off at " << m.first << ": got "
                          << (m.count ? double(c.got[size_t(m.first)]) : 0.0) << ", want "
                          << (m.count ? c.want[size_t(m.first)] : 0.0);
  }
}

// Groups of 5 channels over odd positions; enough positions for two pieces (1000 x 40 elements a
// sample); one group; a group a channel; flat (N, C) features, one position.
const std::vector<Extents> kExtents = {{3, 37, 10, 2}, {2, 1000, 40, 8}, {2, 50, 6, 1}, {2, 9, 8, 8}, {4, 1, 12, 3}};

std::string label(const char* type, const Extents& e) {
  return std::string(type) + " n=" + std::to_string(e.n) + " hw=" + std::to_string(e.hw) + " c=" +
         std::to_string(e.c) + " groups=" + std::to_string(e.groups);
}

template <class T>
void check_kernels() {
  uint32_t seed = 100;
  for (const Extents& e : kExtents) {
    const std::string what = label(sizeof(T) == 4 ? "float" : "double", e);
    const Inputs in = inputs<T>(e, seed++);
    const KernelRun<T> full = run_kernels<T>(e, in, true);
    expect_matches(what, e, in, full);
    // Without dx the parameters' gradients are the same; without saved statistics, y is.
    const KernelRun<T> no_dx = run_kernels<T>(e, in, false);
    EXPECT_EQ(no_dx.dweight, full.dweight) << what;
    EXPECT_EQ(no_dx.dbias, full.dbias) << what;
    std::vector<T> y(full.y.size());
    const std::vector<T> x(in.x.begin(), in.x.end()), w(in.weight.begin(), in.weight.end()),
        b(in.bias.begin(), in.bias.end());
    cpu::group_norm_forward<T>({e.n, e.hw, e.c, e.groups}, x.data(), w.data(), b.data(), kEps, y.data(), nullptr,
                               nullptr);
    EXPECT_EQ(y, full.y) << what << ": y without saving the statistics";
  }
}

TEST(GroupNormCpu, DoubleKernelsMatchTheReference) { check_kernels<double>(); }
TEST(GroupNormCpu, FloatKernelsMatchTheReference) { check_kernels<float>(); }

TEST(GroupNormCpu, TheSameBytesAtAnyThreadCount) {
  for (const Extents& e : {Extents{2, 1000, 40, 8}, Extents{3, 37, 10, 2}}) {
    const Inputs in = inputs<float>(e, 7);
    std::vector<KernelRun<float>> runs;
    for (int threads : {1, 3, 8}) {
      testing::ScopedThreads scoped(threads);
      runs.push_back(run_kernels<float>(e, in, true));
    }
    for (size_t k = 1; k < runs.size(); ++k) {
      EXPECT_EQ(runs[k].y, runs[0].y) << label("float", e);
      EXPECT_EQ(runs[k].mean, runs[0].mean) << label("float", e);
      EXPECT_EQ(runs[k].rstd, runs[0].rstd) << label("float", e);
      EXPECT_EQ(runs[k].dx, runs[0].dx) << label("float", e);
      EXPECT_EQ(runs[k].dweight, runs[0].dweight) << label("float", e);
      EXPECT_EQ(runs[k].dbias, runs[0].dbias) << label("float", e);
    }
  }
}

// The bounds are tight enough to catch plausible mistakes, each landing outside them for most
// elements: the float kernel's y against PyTorch's unbiased variance (M - 1; a change of 1 / 2M in
// rstd), its statistics and gradients against those of each group missing its last position, and
// the double kernel's dbias against sums accumulated in float.
TEST(GroupNormCpu, TheBoundsCatchWrongResults) {
  const Extents e{3, 37, 10, 2};
  const int64_t M = e.group_elements();
  const Inputs in = inputs<float>(e, 9);
  const KernelRun<float> got = run_kernels<float>(e, in, true);
  const group_norm_test::Forward right = group_norm_test::forward(e, in.x, in.weight, in.bias, kEps);
  ASSERT_EQ(outside_bound(got.y, right.y, right.y_bound, kFloatUnit, kDoubleUnit, 4).count, 0);

  std::vector<double> unbiased(right.y.size());
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t p = 0; p < e.hw; ++p)
      for (int64_t ch = 0; ch < e.c; ++ch) {
        const size_t i = e.at(img, p, ch), s = size_t(e.statistic(img, ch));
        const double var = 1 / (right.rstd[s] * right.rstd[s]) - kEps;
        unbiased[i] = (in.x[i] - right.mean[s]) / std::sqrt(var * M / (M - 1) + kEps) * in.weight[size_t(ch)] +
                      in.bias[size_t(ch)];
      }
  EXPECT_GT(outside_bound(got.y, unbiased, right.y_bound, kFloatUnit, kDoubleUnit, 4).count, e.elements() / 2);

  // Each group's last position left out: a sample of hw - 1 positions.
  const Extents shorter{e.n, e.hw - 1, e.c, e.groups};
  Inputs cut = in;
  cut.x.clear(), cut.dy.clear();
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t p = 0; p < shorter.hw; ++p)
      for (int64_t ch = 0; ch < e.c; ++ch) cut.x.push_back(in.x[e.at(img, p, ch)]), cut.dy.push_back(in.dy[e.at(img, p, ch)]);
  const group_norm_test::Forward short_stats = group_norm_test::forward(shorter, cut.x, in.weight, in.bias, kEps);
  EXPECT_EQ(outside_bound(got.mean, right.mean, right.mean_bound, kFloatUnit, kDoubleUnit, 1).count, 0);
  EXPECT_EQ(outside_bound(got.rstd, right.rstd, right.rstd_bound, kFloatUnit, kDoubleUnit, 3).count, 0);
  EXPECT_GT(outside_bound(got.mean, short_stats.mean, right.mean_bound, kFloatUnit, kDoubleUnit, 1).count,
            e.statistics() / 2);
  EXPECT_GT(outside_bound(got.rstd, short_stats.rstd, right.rstd_bound, kFloatUnit, kDoubleUnit, 3).count,
            e.statistics() / 2);

  // dx from the saved statistics, but with each group's means of g and g * xhat over one position
  // fewer: the positions kept compared.
  const group_norm_test::Backward grads =
      group_norm_test::backward(e, in.x, in.dy, in.weight, as_double(got.mean), as_double(got.rstd));
  const group_norm_test::Backward short_grads =
      group_norm_test::backward(shorter, cut.x, cut.dy, in.weight, as_double(got.mean), as_double(got.rstd));
  std::vector<float> kept;
  group_norm_test::Bound kept_bound{{}, {}, grads.dx_bound.addends};
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t p = 0; p < shorter.hw; ++p)
      for (int64_t ch = 0; ch < e.c; ++ch) {
        const size_t i = e.at(img, p, ch);
        kept.push_back(got.dx[i]);
        kept_bound.rounding.push_back(grads.dx_bound.rounding[i]), kept_bound.sums.push_back(grads.dx_bound.sums[i]);
      }
  EXPECT_EQ(outside_bound(got.dx, grads.dx, grads.dx_bound, kFloatUnit, kDoubleUnit, 8).count, 0);
  EXPECT_GT(outside_bound(kept, short_grads.dx, kept_bound, kFloatUnit, kDoubleUnit, 8).count, shorter.elements() / 2);
  EXPECT_EQ(outside_bound(got.dweight, grads.dweight, grads.dweight_bound, kFloatUnit, kDoubleUnit, 3).count, 0);
  EXPECT_GT(outside_bound(got.dweight, short_grads.dweight, grads.dweight_bound, kFloatUnit, kDoubleUnit, 3).count,
            e.c / 2);
  EXPECT_GT(outside_bound(got.dbias, short_grads.dbias, grads.dbias_bound, kFloatUnit, kDoubleUnit, 0).count, e.c / 2);

  // dbias of the double kernel against float sums of dy, samples and positions in order.
  const KernelRun<double> exact = run_kernels<double>(e, in, false);
  const group_norm_test::Backward exact_grads =
      group_norm_test::backward(e, in.x, in.dy, in.weight, exact.mean, exact.rstd);
  ASSERT_EQ(outside_bound(exact.dbias, exact_grads.dbias, exact_grads.dbias_bound, kDoubleUnit, kDoubleUnit, 0).count, 0);
  std::vector<double> float_sums(size_t(e.c), 0.0);
  for (int64_t ch = 0; ch < e.c; ++ch) {
    float s = 0;
    for (int64_t img = 0; img < e.n; ++img)
      for (int64_t p = 0; p < e.hw; ++p) s += float(in.dy[e.at(img, p, ch)]);
    float_sums[size_t(ch)] = s;
  }
  EXPECT_GT(outside_bound(exact.dbias, float_sums, exact_grads.dbias_bound, kDoubleUnit, kDoubleUnit, 0).count,
            e.c / 2);
}

}  // namespace
}  // namespace kiln
