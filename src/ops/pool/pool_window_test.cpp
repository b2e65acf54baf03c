// Pooling windows in PyTorch's ceil mode and with both average divisors (count_include_pad on and
// off): compiled programs of one max or average pooling layer, float64 and float32, forward,
// backward (d(input)) and inference, against float64 loops written here from the definitions, for
// every combination of ceil mode, count_include_pad, padding 0/1, kernel 2/3 and stride 1/2 on sizes
// where ceil mode adds a window, where it does not and where PyTorch's rule drops the window it
// would add; the output-size rule on cases worked by hand; deliberately wrong references that the
// bounds must reject; and the layer's refusal of a window that cannot fit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/pool/pool_cpu.h"
#include "ops/pool/pool_program_run_test.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::mixed_err;
using testing::Vec;
using pool_test::ProgramRun;
using pool_test::run;

struct WindowCase {
  int64_t h, w;
  int kernel, stride, pad;
  bool ceil_mode, count_include_pad;
};

std::string describe(const WindowCase& c) {
  return fmt::format("{}x{} kernel {} stride {} pad {}{}{}", c.h, c.w, c.kernel, c.stride, c.pad,
                     c.ceil_mode ? " ceil" : " floor", c.count_include_pad ? " count_include_pad" : "");
}

// The windows along one axis by PyTorch's rule, in floating point (the kernels count in integers):
// floor or ceil of (in + 2p - k) / s, plus 1; in ceil mode a last window starting at or past
// in + p (counted from -p: in the bottom/right padding) is dropped. `drop` false leaves it.
int64_t ref_size(int64_t in, int k, int s, int p, bool ceil_mode, bool drop = true) {
  const double q = double(in + 2 * p - k) / s;
  int64_t out = int64_t(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (drop && ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// What a divisor counts, for the deliberately wrong references: PyTorch's rule, the other
// count_include_pad setting's, or the whole k x k window even where it hangs past the padding.
enum class Divisor { PyTorch, OtherPadRule, WholeWindow };

// The float64 reference of one pooling layer on x (n, h, w, ch): y, and for dy the input gradient.
// Every window tap is classified from its coordinates: an input cell, padding ([-p, size + p) but
// outside the input) or beyond the padding (only a ceil-mode window hanging over the edge has
// those). Max: the first largest input cell in raster order; its gradient takes dy. Average: the
// input cells' sum over the divisor: the taps inside the padded input (count_include_pad) or the
// input cells (not); each input cell's gradient adds dy / divisor.
struct Reference {
  int64_t n, h, w, c, ho, wo;
  Vec y, dx;
};

Reference reference(bool max, const WindowCase& wc, int64_t n, int64_t ch, const Vec& x, const Vec& dy,
                    Divisor rule = Divisor::PyTorch) {
  Reference r{n, wc.h, wc.w, ch, ref_size(wc.h, wc.kernel, wc.stride, wc.pad, wc.ceil_mode),
              ref_size(wc.w, wc.kernel, wc.stride, wc.pad, wc.ceil_mode), {}, {}};
  r.y.assign(size_t(n * r.ho * r.wo * ch), 0.0);
  r.dx.assign(x.size(), 0.0);
  const bool count_pad = rule == Divisor::OtherPadRule ? !wc.count_include_pad : wc.count_include_pad;
  auto in_at = [&](int64_t b, int64_t ih, int64_t iw, int64_t c) { return size_t(((b * wc.h + ih) * wc.w + iw) * ch + c); };
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oh = 0; oh < r.ho; ++oh)
      for (int64_t ow = 0; ow < r.wo; ++ow)
        for (int64_t c = 0; c < ch; ++c) {
          const size_t o = size_t(((b * r.ho + oh) * r.wo + ow) * ch + c);
          double best = -std::numeric_limits<double>::infinity(), sum = 0, divisor = 0;
          size_t best_at = 0;
          std::vector<size_t> cells;
          for (int64_t kh = 0; kh < wc.kernel; ++kh)
            for (int64_t kw = 0; kw < wc.kernel; ++kw) {
              const int64_t ih = oh * wc.stride - wc.pad + kh, iw = ow * wc.stride - wc.pad + kw;
              const bool cell = ih >= 0 && ih < wc.h && iw >= 0 && iw < wc.w;
              const bool padded = ih >= -wc.pad && ih < wc.h + wc.pad && iw >= -wc.pad && iw < wc.w + wc.pad;
              if (rule == Divisor::WholeWindow || (count_pad ? padded : cell)) divisor += 1;
              if (!cell) continue;
              const size_t at = in_at(b, ih, iw, c);
              cells.push_back(at);
              sum += x[at];
              if (x[at] > best) best = x[at], best_at = at;
            }
          if (max) {
            r.y[o] = best;
            if (!dy.empty()) r.dx[best_at] += dy[o];
          } else {
            r.y[o] = sum / divisor;
            if (!dy.empty())
              for (size_t at : cells) r.dx[at] += dy[o] / divisor;
          }
        }
  return r;
}

Blueprint one_pool(bool max, const WindowCase& c, int channels) {
  PoolAttrs a = PoolAttrs::square(c.kernel, c.stride, c.pad);
  a.ceil_mode = c.ceil_mode;
  a.count_include_pad = c.count_include_pad;
  Blueprint m(max ? "max" : "avg");
  m.input(int(c.h), int(c.w), channels);
  if (max)
    m.maxpool(a, "pool");
  else
    m.avgpool(a, "pool");
  return m;
}

// float64 programs sum a window (at most 9 values in [-2, 2]) in double and divide once: a few
// units of 2^-53 of the largest partial sum, far below 1e-14 per element (mixed_err's |d| / (1 + |v|)).
// float32 average pooling sums in double too and rounds each result once to float: 2^-24 relative.
// float32 max pooling's backward adds up to 9 dy in [-2, 2] in float, each addition rounding by at
// most 2^-25 of a partial sum below 18: 9 * 18 * 2^-25 < 5e-6.
constexpr double kBoundF64 = 1e-14;
constexpr double kBoundF32 = 6.0e-8;
constexpr double kBoundMaxBackwardF32 = 5e-6;

std::vector<WindowCase> every_combination() {
  std::vector<WindowCase> cases;
  // Sizes, rows and columns unequal, so that a transposed axis shows. Among them ceil mode adds a
  // window (k 2 s 2 p 0 on 5 rows, k 3 s 2 on 6 rows), adds none (7 rows for k 3 s 2 p 0) and would
  // add one that starts in the bottom padding, which PyTorch drops (k 2 s 2 p 1 on 5 or 7 rows).
  const std::pair<int64_t, int64_t> sizes[] = {{4, 5}, {5, 6}, {6, 7}, {7, 4}};
  for (int kernel : {2, 3})
    for (int stride : {1, 2})
      for (int pad : {0, 1})
        for (bool ceil_mode : {false, true})
          for (bool count_include_pad : {false, true})
            for (const auto& [h, w] : sizes) cases.push_back({h, w, kernel, stride, pad, ceil_mode, count_include_pad});
  return cases;
}

TEST(PoolWindowSize, PyTorchsRuleOnCasesWorkedByHand) {
  struct Size {
    int64_t in;
    int kernel, stride, pad;
    int64_t floor, ceil;
  };
  const Size sizes[] = {
      {7, 3, 2, 0, 3, 3},        // (7 - 3) / 2 = 2 exactly: ceil adds nothing
      {6, 3, 2, 0, 2, 3},        // 3 / 2: ceil adds a window [4, 7) hanging one past the edge
      {5, 2, 2, 1, 3, 3},        // 5 / 2 -> 3 + 1 = 4, but window 3 would start at 3*2 - 1 = 5 = in: dropped
      {112, 3, 2, 0, 55, 56},    // GoogLeNet's maxpool1: 112 -> 56
      {109, 3, 2, 0, 54, 54},    // SqueezeNet 1.0's first maxpool: 106 / 2 exactly
      {2, 3, 2, 0, 0, 1},        // a kernel past the input: none in floor mode, one in ceil mode (PyTorch's too)
      {1, 3, 2, 0, 0, 0},        // ceil(-2 / 2) + 1 = 0: none either way
      {6, 3, 1, 1, 6, 6},        // stride 1: ceil never adds
  };
  for (const Size& s : sizes) {
    SCOPED_TRACE(fmt::format("in {} kernel {} stride {} pad {}", s.in, s.kernel, s.stride, s.pad));
    EXPECT_EQ(cpu::pool_output_size(s.in, s.kernel, s.stride, s.pad, false), std::max<int64_t>(s.floor, 0));
    EXPECT_EQ(cpu::pool_output_size(s.in, s.kernel, s.stride, s.pad, true), s.ceil);
    // The floating-point reference rule agrees where a window fits.
    if (s.floor > 0) {
      EXPECT_EQ(ref_size(s.in, s.kernel, s.stride, s.pad, false), s.floor);
    }
    if (s.ceil > 0) {
      EXPECT_EQ(ref_size(s.in, s.kernel, s.stride, s.pad, true), s.ceil);
    }
  }
}

// The sweep covers what it claims: ceil mode adds windows somewhere, leaves the count somewhere,
// and PyTorch's start rule drops a window somewhere (a reference without it would differ there).
TEST(PoolWindowSize, TheSweepHoldsEachKindOfSize) {
  int adds = 0, same = 0, dropped = 0;
  for (const WindowCase& c : every_combination()) {
    if (!c.ceil_mode) continue;
    for (int64_t in : {c.h, c.w}) {
      const int64_t floor = ref_size(in, c.kernel, c.stride, c.pad, false), ceil = ref_size(in, c.kernel, c.stride, c.pad, true);
      (ceil > floor ? adds : same) += 1;
      dropped += ref_size(in, c.kernel, c.stride, c.pad, true, /*drop=*/false) != ceil;
    }
  }
  EXPECT_GT(adds, 0);
  EXPECT_GT(same, 0);
  EXPECT_GT(dropped, 0);
}

template <class T>
void expect_program_matches_reference(bool max) {
  const double bound = sizeof(T) == 8 ? kBoundF64 : kBoundF32;
  int overhanging_checked = 0, other_rule_checked = 0;
  uint32_t seed = 10;
  for (const WindowCase& c : every_combination()) {
    if (max && !c.count_include_pad) continue;  // max pooling has no divisor
    SCOPED_TRACE(std::string(max ? "max " : "avg ") + describe(c));
    const ProgramRun got = run<T>(one_pool(max, c, 3), seed += 2);
    const Reference want = reference(max, c, 2, 3, got.x, got.dy);
    ASSERT_EQ(got.y_shape, (Shape{2, want.ho, want.wo, 3}));
    if (max) {
      // The maximum is one of the inputs, and each dx element a sum of dy in the same order.
      EXPECT_EQ(got.y, want.y);
      EXPECT_EQ(got.y_inference, want.y);
      EXPECT_LE(mixed_err(got.dx, want.dx), sizeof(T) == 8 ? 0.0 : kBoundMaxBackwardF32);
      continue;
    }
    EXPECT_LE(mixed_err(got.y, want.y), bound);
    EXPECT_LE(mixed_err(got.y_inference, want.y), bound);
    EXPECT_LE(mixed_err(got.dx, want.dx), bound);
    // Deliberate mistakes: the other count_include_pad rule, and a divisor of k*k where a ceil-mode
    // window hangs past the padding. Wherever they change the numbers they land far outside the bound.
    for (Divisor wrong : {Divisor::OtherPadRule, Divisor::WholeWindow}) {
      const Reference bad = reference(false, c, 2, 3, got.x, got.dy, wrong);
      if (mixed_err(bad.y, want.y) == 0) continue;  // the mistake changes nothing here
      EXPECT_GT(mixed_err(got.y, bad.y), 1e3 * bound);
      EXPECT_GT(mixed_err(got.dx, bad.dx), 1e3 * bound);
      (wrong == Divisor::OtherPadRule ? other_rule_checked : overhanging_checked) += 1;
    }
  }
  if (!max) {
    EXPECT_GT(other_rule_checked, 0);
    EXPECT_GT(overhanging_checked, 0);
  }
}

TEST(PoolWindowProgram, MaxPoolFloat64) { expect_program_matches_reference<double>(true); }
TEST(PoolWindowProgram, MaxPoolFloat32) { expect_program_matches_reference<float>(true); }
TEST(PoolWindowProgram, AvgPoolFloat64) { expect_program_matches_reference<double>(false); }
TEST(PoolWindowProgram, AvgPoolFloat32) { expect_program_matches_reference<float>(false); }

// Larger maps, many threads' worth of rows and 20 channels, straight through the kernels: the
// overlapping, padded and hanging windows of ceil mode without count_include_pad, and the tiling
// 2x2/2 windows whose ceil-mode last one hangs over an odd edge (max pooling's tiled backward must
// not take those).
TEST(PoolWindowKernels, LargeCeilModeMapsMatchTheReference) {
  const WindowCase cases[] = {{33, 31, 3, 2, 1, true, false}, {33, 31, 2, 2, 0, true, true}, {30, 29, 3, 3, 1, true, true}};
  for (const WindowCase& c : cases) {
    SCOPED_TRACE(describe(c));
    const int64_t n = 3, ch = 20;
    const cpu::PoolGeom g = cpu::PoolGeom::make({n, c.h, c.w, ch}, c.kernel, c.stride, c.pad, "pool", "p", true);
    const Vec x = testing::uniform_vec(31, size_t(n * c.h * c.w * ch), -2, 2);
    const Vec dy = testing::uniform_vec(32, size_t(numel(g.out_shape())), -2, 2);
    for (bool max : {true, false}) {
      const Reference want = reference(max, c, n, ch, x, dy);
      ASSERT_EQ(g.out_shape(), (Shape{n, want.ho, want.wo, ch}));
      Vec y(want.y.size()), dx(x.size(), 123.0);
      if (max) {
        std::vector<uint8_t> arg(y.size());
        cpu::maxpool_forward<double>(g, x.data(), y.data(), arg.data());
        cpu::maxpool_backward<double>(g, dy.data(), arg.data(), dx.data());
        EXPECT_EQ(y, want.y);
        EXPECT_EQ(dx, want.dx);
      } else {
        cpu::avgpool_forward<double>(g, c.count_include_pad, x.data(), y.data());
        cpu::avgpool_backward<double>(g, c.count_include_pad, dy.data(), dx.data());
        EXPECT_LE(mixed_err(y, want.y), kBoundF64);
        EXPECT_LE(mixed_err(dx, want.dx), kBoundF64);
      }
    }
  }
}

// A window that fits nowhere is refused when the model compiles, naming the layer; ceil mode lets
// a kernel larger than the padded input start inside it (PyTorch does), floor mode does not.
TEST(PoolWindowLayer, AWindowThatCannotFitIsRefused) {
  const WindowCase past_the_input{2, 2, 3, 2, 0, true, true};
  const ProgramRun got = run<double>(one_pool(true, past_the_input, 1), 1);
  EXPECT_EQ(got.y_shape, (Shape{2, 1, 1, 1}));
  const Reference want = reference(true, past_the_input, 2, 1, got.x, got.dy);
  EXPECT_EQ(got.y, want.y);
  CompileOptions o;
  o.batch = 1;
  WindowCase floor_mode = past_the_input;
  floor_mode.ceil_mode = false;
  Blueprint floor_model = one_pool(true, floor_mode, 1);
  floor_model.flatten().fc(2);
  expect_error([&] { compile(floor_model, o); }, {"'pool'", "kernel 3", "larger than its padded input"});
  const WindowCase nowhere{1, 1, 3, 2, 0, true, true};
  Blueprint ceil_model = one_pool(false, nowhere, 1);
  ceil_model.flatten().fc(2);
  expect_error([&] { compile(ceil_model, o); }, {"'pool'", "kernel 3", "stride 2", "ceil mode"});
}

}  // namespace
}  // namespace kiln
