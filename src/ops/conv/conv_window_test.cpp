// The CPU convolution kernels (conv_cpu.h) on any window, groups, dilation, rectangular kernels
// and strides, padding of its own on each side, against the float64 reference written from the
// definition (conv_window_reference.h); gradients against finite differences; the bytes at any
// thread count; ConvGeom's geometry and each of its refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_kernels.h"
#include "kiln/error.h"
#include "kiln/threads.h"
#include "ops/conv/conv_cpu.h"
#include "ops/conv/conv_window_reference.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"

namespace kiln::cpu {
namespace {

using conv_test::Flaw;
using conv_test::WindowProblem;
using kiln::testing::cast;
using kiln::testing::expect_gradient_matches;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::uniform_vec;
using kiln::testing::weighted_sum;

ConvWindow window(int stride_h, int stride_w, int top, int left, int bottom, int right, int dilation_h,
                  int dilation_w, int groups) {
  return {stride_h, stride_w, top, left, bottom, right, dilation_h, dilation_w, groups};
}

struct WindowCase {
  WindowProblem p;
  bool bias;
};

// Groups (2, 3, 4; pointwise and strided 1x1 among them), depthwise (C = K = G) and depthwise with
// a multiplier (K = 2C, G = C), dilation (both axes, one axis), strides (2,1) and (1,2), kernels
// 3x5, 1x7 and 7x1, padding (top 1, left 0, bottom 2, right 1) and others of their own on each
// side, everything at once, and outputs whose windows see only padding.
const std::vector<WindowCase> kWindows = {
    {{2, 7, 6, 4, 6, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 2)}, true},    // groups 2
    {{2, 5, 4, 8, 4, 1, 1, window(1, 1, 0, 0, 0, 0, 1, 1, 4)}, true},    // grouped pointwise
    {{2, 6, 5, 4, 6, 1, 1, window(2, 2, 0, 0, 0, 0, 1, 1, 2)}, false},   // grouped strided 1x1
    {{2, 5, 5, 6, 3, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 3)}, true},    // one output channel a group
    {{2, 7, 6, 5, 5, 3, 3, window(1, 1, 1, 1, 1, 1, 1, 1, 5)}, true},    // depthwise
    {{2, 7, 7, 3, 6, 3, 3, window(2, 2, 1, 1, 1, 1, 1, 1, 3)}, false},   // depthwise, multiplier 2
    {{2, 9, 9, 6, 6, 5, 5, window(2, 2, 2, 2, 2, 2, 1, 1, 6)}, true},    // depthwise 5x5 stride 2
    {{2, 9, 8, 3, 4, 3, 3, window(1, 1, 2, 2, 2, 2, 2, 2, 1)}, true},    // dilation 2
    {{2, 6, 9, 3, 4, 3, 3, window(1, 1, 1, 2, 1, 2, 1, 2, 1)}, false},   // dilation along columns
    {{2, 9, 6, 3, 4, 3, 3, window(1, 2, 2, 1, 2, 1, 2, 1, 1)}, true},    // dilation along rows, stride (1,2)
    {{2, 7, 6, 3, 4, 3, 3, window(2, 1, 1, 1, 1, 1, 1, 1, 1)}, true},    // stride (2,1)
    {{2, 6, 9, 2, 3, 3, 5, window(1, 1, 1, 2, 1, 2, 1, 1, 1)}, true},    // kernel 3x5
    {{1, 5, 11, 4, 4, 1, 7, window(1, 1, 0, 3, 0, 3, 1, 1, 1)}, false},  // kernel 1x7
    {{1, 11, 5, 4, 4, 7, 1, window(1, 1, 3, 0, 3, 0, 1, 1, 1)}, true},   // kernel 7x1
    {{2, 6, 7, 3, 2, 3, 3, window(1, 1, 1, 0, 2, 1, 1, 1, 1)}, true},    // padding (1,0,2,1)
    {{2, 9, 15, 4, 6, 3, 5, window(2, 1, 1, 0, 2, 1, 2, 3, 2)}, true},   // all at once, grouped
    {{2, 7, 8, 4, 8, 3, 3, window(1, 2, 0, 2, 1, 1, 2, 2, 4)}, true},    // all at once, depthwise x2
    {{1, 3, 4, 4, 4, 3, 3, window(1, 1, 3, 3, 3, 3, 1, 1, 2)}, true},    // border outputs see only padding
};

ConvGeom geom_of(const WindowProblem& p) { return ConvGeom::make(p.x_shape(), p.w_shape(), p.win); }

struct Inputs {
  std::vector<double> x, w, b, dy;  // already rounded to the kernels' precision
};
template <class T>
Inputs inputs(const WindowProblem& p, unsigned seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.x = cast<double>(cast<T>(uniform_vec(rng, p.x_numel())));
  in.w = cast<double>(cast<T>(uniform_vec(rng, p.w_numel())));
  in.b = cast<double>(cast<T>(uniform_vec(rng, size_t(p.k))));
  in.dy = cast<double>(cast<T>(uniform_vec(rng, p.y_numel())));
  return in;
}

// Sets the CPU kernels for a test and puts back what was there.
struct KernelsFor {
  CpuKernels saved = cpu_kernels();
  explicit KernelsFor(CpuKernels k) { set_cpu_kernels(k); }
  ~KernelsFor() { set_cpu_kernels(saved); }
};

// Restores the default workspace limit after a test shrinks it.
struct WorkspaceLimit {
  size_t saved = conv_workspace_limit();
  explicit WorkspaceLimit(size_t bytes) { set_conv_workspace_limit(bytes); }
  ~WorkspaceLimit() { set_conv_workspace_limit(saved); }
};

struct Outputs {
  std::vector<double> y, dx, dw, db;
};

// All three kernels in precision T; outputs start as NaN, so each kernel must write all of them.
template <class T>
Outputs run_kernels(const ConvGeom& g, const Inputs& in, bool bias) {
  const auto x = cast<T>(in.x), w = cast<T>(in.w), b = cast<T>(in.b), dy = cast<T>(in.dy);
  std::vector<T> y(dy.size(), T(NAN)), dx(x.size(), T(NAN)), dw(w.size(), T(NAN)), db(b.size(), T(NAN));
  conv_fwd<T>(g, x.data(), w.data(), bias ? b.data() : nullptr, y.data());
  conv_dgrad<T>(g, dy.data(), w.data(), dx.data());
  conv_wgrad<T>(g, dy.data(), x.data(), dw.data(), bias ? db.data() : nullptr);
  return {cast<double>(y), cast<double>(dx), cast<double>(dw), cast<double>(db)};
}

// Every result of the kernels in precision T within the rounding bound of the float64 reference;
// the same bound rejects each flawed convolution the problem can tell apart.
template <class T>
void check_window(const WindowCase& t, unsigned seed) {
  const WindowProblem& p = t.p;
  SCOPED_TRACE(conv_test::label(p) + (t.bias ? " bias" : ""));
  const ConvGeom g = geom_of(p);
  ASSERT_EQ(g.ho, p.ho());
  ASSERT_EQ(g.wo, p.wo());
  const Inputs in = inputs<T>(p, seed);
  const Outputs got = run_kernels<T>(g, in, t.bias);
  const double bound = conv_test::rounding_bound<T>(p);
  const std::vector<double> no_bias;
  const conv_test::Result y = conv_test::forward(p, in.x, in.w, t.bias ? in.b : no_bias);
  const conv_test::Result dx = conv_test::data_gradient(p, in.dy, in.w);
  const conv_test::Result dw = conv_test::weight_gradient(p, in.dy, in.x);
  conv_test::expect_within("y", got.y, y, bound);
  conv_test::expect_within("dx", got.dx, dx, bound);
  conv_test::expect_within("dw", got.dw, dw, bound);
  if (t.bias) conv_test::expect_within("db", got.db, conv_test::bias_gradient(p, in.dy), bound);
  for (Flaw flaw : conv_test::telling_flaws(p)) {
    SCOPED_TRACE("flaw " + std::to_string(int(flaw)));
    EXPECT_GT(conv_test::distance(conv_test::forward(p, in.x, in.w, t.bias ? in.b : no_bias, flaw).value, y).worst,
              bound);
    EXPECT_GT(conv_test::distance(conv_test::data_gradient(p, in.dy, in.w, flaw).value, dx).worst, bound);
    EXPECT_GT(conv_test::distance(conv_test::weight_gradient(p, in.dy, in.x, flaw).value, dw).worst, bound);
  }
}

TEST(ConvCpuWindow, DoubleMatchesTheDefinition) {
  unsigned seed = 1;
  for (const WindowCase& t : kWindows) check_window<double>(t, seed++);
}

// kiln's own kernels in fp32 (where oneDNN runs fp32, conv_onednn_test.cpp checks it).
TEST(ConvCpuWindow, FloatReferenceKernelsMatchTheDefinition) {
  const KernelsFor reference(CpuKernels::Reference);
  unsigned seed = 100;
  for (const WindowCase& t : kWindows) check_window<float>(t, seed++);
}

// A one-byte budget forces one image per chunk: each group's offsets and wgrad's accumulation
// across chunks must still give the same answers.
TEST(ConvCpuWindow, ChunkedBatchMatchesTheDefinition) {
  const WorkspaceLimit limit(1);
  const KernelsFor reference(CpuKernels::Reference);
  unsigned seed = 200;
  for (const WindowCase& t : kWindows) {
    check_window<double>(t, seed++);
    check_window<float>(t, seed++);
  }
}

// Loss = sum(conv(x, w, b) * R); the backward kernels fed with dy = R must give its gradient, in
// float64, for grouped and depthwise convolutions with dilation, rectangular strides and padding
// of its own on each side.
TEST(ConvCpuWindow, GradientsMatchFiniteDifferences) {
  const std::vector<WindowProblem> problems = {
      {1, 6, 9, 4, 4, 3, 3, window(2, 1, 1, 0, 2, 1, 2, 3, 2)},  // groups 2
      {2, 6, 7, 3, 6, 3, 3, window(1, 2, 0, 2, 1, 1, 2, 2, 3)},  // depthwise, multiplier 2
      {1, 5, 8, 6, 4, 3, 5, window(1, 1, 2, 1, 0, 3, 2, 1, 2)},  // groups 2, kernel 3x5
  };
  unsigned seed = 300;
  for (const WindowProblem& p : problems) {
    SCOPED_TRACE(conv_test::label(p));
    const ConvGeom g = geom_of(p);
    std::mt19937 rng(seed++);
    const auto x = uniform_vec(rng, p.x_numel()), w = uniform_vec(rng, p.w_numel());
    const auto b = uniform_vec(rng, size_t(p.k)), R = uniform_vec(rng, p.y_numel());
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
      std::vector<double> y(R.size());
      conv_fwd<double>(g, xv.data(), wv.data(), bv.data(), y.data());
      return weighted_sum(y, R);
    };
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    conv_dgrad<double>(g, R.data(), w.data(), dx.data());
    conv_wgrad<double>(g, R.data(), x.data(), dw.data(), db.data());
    // The loss is linear in each input, so central differences are exact up to rounding: about
    // 1e-16 * |loss| / h, well under 1e-6.
    const double h = 1e-6, tol = 1e-6;
    expect_gradient_matches(dx, numeric_gradient([&](const auto& v) { return loss(v, w, b); }, x, h), tol,
                            GradError::PerElement, "dx");
    expect_gradient_matches(dw, numeric_gradient([&](const auto& v) { return loss(x, v, b); }, w, h), tol,
                            GradError::PerElement, "dw");
    expect_gradient_matches(db, numeric_gradient([&](const auto& v) { return loss(x, w, v); }, b, h), tol,
                            GradError::PerElement, "db");
  }
}

// Large enough that im2col, the GEMMs and the depthwise loops run on several threads: the cut of
// the work depends on the problem alone, so 1, 3 and 8 threads give the same bytes.
TEST(ConvCpuWindow, SameBytesWhateverTheThreadCount) {
  const KernelsFor reference(CpuKernels::Reference);
  const int saved = threads();
  const std::vector<WindowCase> cases = {
      {{4, 20, 18, 32, 64, 3, 3, window(1, 2, 1, 0, 2, 1, 2, 1, 4)}, true},     // grouped, dilated
      {{4, 24, 20, 64, 128, 3, 3, window(2, 1, 1, 1, 1, 1, 1, 2, 64)}, true},   // depthwise, multiplier 2
      {{4, 16, 16, 96, 96, 5, 5, window(1, 1, 2, 2, 2, 2, 1, 1, 96)}, false},   // depthwise 5x5
  };
  for (const WindowCase& t : cases) {
    SCOPED_TRACE(conv_test::label(t.p));
    const ConvGeom g = geom_of(t.p);
    const Inputs in = inputs<float>(t.p, 11);
    std::vector<std::vector<double>> runs;
    for (int n : {1, 3, 8}) {
      set_threads(n);
      Outputs o = run_kernels<float>(g, in, t.bias);
      for (const auto* v : {&o.dx, &o.dw, &o.db}) o.y.insert(o.y.end(), v->begin(), v->end());
      runs.push_back(std::move(o.y));
    }
    set_threads(saved);
    for (size_t i = 1; i < runs.size(); ++i)
      EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[i].data(), runs[0].size() * sizeof(double))) << "run " << i;
  }
}

TEST(ConvCpuWindow, GeometryOfAWindow) {
  // Input 11x15, kernel 3x5, stride (2,1), padding (1,0,2,1), dilation (2,3), 2 groups.
  const ConvGeom g = ConvGeom::make({2, 11, 15, 6}, {4, 3, 5, 3}, window(2, 1, 1, 0, 2, 1, 2, 3, 2));
  EXPECT_EQ(g.ho, 5);   // (11 + 1 + 2 - 5) / 2 + 1: the dilated kernel spans 5 rows
  EXPECT_EQ(g.wo, 4);   // (15 + 0 + 1 - 13) / 1 + 1: and 13 columns
  EXPECT_EQ(g.cg, 3);
  EXPECT_EQ(g.kg, 2);
  EXPECT_EQ(g.groups(), 2);
  EXPECT_FALSE(g.depthwise());
  EXPECT_TRUE(ConvGeom::make({1, 5, 5, 4}, {8, 3, 3, 1}, window(1, 1, 1, 1, 1, 1, 1, 1, 4)).depthwise());
  // The square overload is the square window.
  EXPECT_EQ(ConvGeom::make({1, 8, 8, 3}, {4, 3, 3, 3}, 2, 1).win, ConvWindow::square(2, 1));
}

// Each refusal names the culprit (and its value) and says what to do.
void expect_refused(const Shape& x, const Shape& w, const ConvWindow& win, const std::vector<std::string>& parts) {
  SCOPED_TRACE("x " + shape_str(x) + " w " + shape_str(w));
  kiln::testing::expect_error([&] { ConvGeom::make(x, w, win); }, parts);
}

TEST(ConvCpuWindow, GroupsThatDoNotDivideTheInputChannelsAreRefused) {
  expect_refused({2, 8, 8, 6}, {8, 3, 3, 1}, window(1, 1, 1, 1, 1, 1, 1, 1, 4),
                 {"groups = 4", "input's 6 channels", "divides both"});
}

TEST(ConvCpuWindow, GroupsThatDoNotDivideTheOutputChannelsAreRefused) {
  expect_refused({2, 8, 8, 8}, {6, 3, 3, 2}, window(1, 1, 1, 1, 1, 1, 1, 1, 4),
                 {"groups = 4", "6 output channels", "divides both"});
}

TEST(ConvCpuWindow, FiltersOfOtherThanCOverGroupsChannelsAreRefused) {
  // Filters of all 8 input channels where 2 groups need 4.
  expect_refused({2, 8, 8, 8}, {6, 3, 3, 8}, window(1, 1, 1, 1, 1, 1, 1, 1, 2),
                 {"filter [6,3,3,8] has 8 channels", "C / groups = 4", "last dimension 4"});
}

TEST(ConvCpuWindow, StridesBelowOneAreRefused) {
  expect_refused({2, 8, 8, 3}, {4, 3, 3, 3}, window(1, 0, 1, 1, 1, 1, 1, 1, 1), {"stride is 1x0", "at least 1"});
  expect_refused({2, 8, 8, 3}, {4, 3, 3, 3}, window(-2, 1, 1, 1, 1, 1, 1, 1, 1), {"stride is -2x1", "at least 1"});
}

TEST(ConvCpuWindow, DilationsBelowOneAreRefused) {
  expect_refused({2, 8, 8, 3}, {4, 3, 3, 3}, window(1, 1, 1, 1, 1, 1, 0, 1, 1), {"dilation is 0x1", "at least 1"});
}

TEST(ConvCpuWindow, NegativePaddingIsRefusedNamingItsSide) {
  const Shape x{2, 8, 8, 3}, w{4, 3, 3, 3};
  expect_refused(x, w, window(1, 1, -1, 0, 0, 0, 1, 1, 1), {"top padding is -1", "must not be negative"});
  expect_refused(x, w, window(1, 1, 0, -2, 0, 0, 1, 1, 1), {"left padding is -2"});
  expect_refused(x, w, window(1, 1, 0, 0, -1, 0, 1, 1, 1), {"bottom padding is -1"});
  expect_refused(x, w, window(1, 1, 0, 0, 0, -3, 1, 1, 1), {"right padding is -3"});
}

TEST(ConvCpuWindow, GroupsBelowOneAreRefused) {
  expect_refused({2, 8, 8, 3}, {4, 3, 3, 3}, window(1, 1, 1, 1, 1, 1, 1, 1, 0), {"groups is 0", "at least 1"});
}

TEST(ConvCpuWindow, ADilatedKernelLargerThanThePaddedInputIsRefused) {
  // 3 taps at dilation 4 span 9 rows; the input has 6 + 1 + 1.
  expect_refused({2, 6, 12, 3}, {4, 3, 3, 3}, window(1, 1, 1, 1, 1, 1, 4, 1, 1),
                 {"dilated kernel spans 9 rows", "dilation 4", "padded input 8"});
  // 5 columns at dilation 1 against 3 + 0 + 1: the undilated message.
  expect_refused({2, 8, 3, 3}, {4, 3, 5, 3}, window(1, 1, 1, 0, 1, 1, 1, 1, 1),
                 {"kernel 5 columns is larger than the padded input 4"});
}

}  // namespace
}  // namespace kiln::cpu
