#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "ops/pool/pool_contract.h"
#include "ops/pool/pool_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/op_bench.h"

namespace {

using namespace kiln;
using namespace kiln::cpu;
using kiln::testing::expect_gradient_matches;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::rel_err;
using kiln::testing::uniform_vec;
using kiln::testing::Vec;
using kiln::testing::weighted_sum;

struct Config {
  int64_t n, h, w, c;
  int kernel, stride, pad;
};
const Config kConfigs[] = {
    {2, 6, 6, 3, 2, 2, 0},  // the classic 2x2/2
    {2, 7, 5, 4, 3, 2, 1},  // ResNet stem shape, odd sizes
    {1, 5, 6, 2, 3, 1, 1},  // overlapping windows: gradients add up
    {3, 4, 4, 5, 4, 4, 2},  // padding = kernel / 2
    {2, 7, 5, 3, 2, 2, 0},  // tiling windows that leave the last row and column uncovered
};

PoolGeom geom(const Config& c) {
  return PoolGeom::make({c.n, c.h, c.w, c.c}, c.kernel, c.stride, c.pad, "pool", "test");
}

int64_t at(const PoolGeom& g, int64_t n, int64_t h, int64_t w, int64_t c) {
  return ((n * g.h + h) * g.w + w) * g.c + c;
}
int64_t out_at(const PoolGeom& g, int64_t n, int64_t h, int64_t w, int64_t c) {
  return ((n * g.ho + h) * g.wo + w) * g.c + c;
}

// Visits every window position, padding included: f(n, oh, ow, c, ih, iw, inside).
template <class F>
void for_each_window_tap(const PoolGeom& g, F f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.ho; ++oh)
      for (int64_t ow = 0; ow < g.wo; ++ow)
        for (int64_t c = 0; c < g.c; ++c)
          for (int64_t kh = 0; kh < g.kernel; ++kh)
            for (int64_t kw = 0; kw < g.kernel; ++kw) {
              int64_t ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
              f(n, oh, ow, c, ih, iw, ih >= 0 && ih < g.h && iw >= 0 && iw < g.w);
            }
}

// argmax: the window index kh * kernel + kw of the first maximum, padding taps counted.
void ref_maxpool(const PoolGeom& g, const Vec& x, Vec& y, std::vector<uint8_t>& arg) {
  int64_t size = g.n * g.ho * g.wo * g.c;
  y.assign(size, -std::numeric_limits<double>::infinity());
  arg.assign(size, 0xFF);  // 255: past every window here (at most 4x4), so an unset one shows
  for_each_window_tap(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t ih,
                             int64_t iw, bool inside) {
    double v = inside ? x[at(g, n, ih, iw, c)] : -std::numeric_limits<double>::infinity();
    int64_t o = out_at(g, n, oh, ow, c);
    if (v > y[o]) {
      y[o] = v;
      int64_t kh = ih - (oh * g.stride - g.pad), kw = iw - (ow * g.stride - g.pad);
      arg[o] = static_cast<uint8_t>(kh * g.kernel + kw);
    }
  });
}

// The reference's scatter of dy through window indices: dx[n, ih, iw, c] += dy[n, oh, ow, c] at
// ih = oh*s - p + idx / k, iw = ow*s - p + idx % k.
Vec ref_maxpool_backward(const PoolGeom& g, const Vec& dy, const std::vector<uint8_t>& arg) {
  Vec dx(g.n * g.h * g.w * g.c, 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.ho; ++oh)
      for (int64_t ow = 0; ow < g.wo; ++ow)
        for (int64_t c = 0; c < g.c; ++c) {
          const int64_t o = out_at(g, n, oh, ow, c), idx = arg[o];
          const int64_t ih = oh * g.stride - g.pad + idx / g.kernel, iw = ow * g.stride - g.pad + idx % g.kernel;
          dx[at(g, n, ih, iw, c)] += dy[o];
        }
  return dx;
}

Vec ref_avgpool(const PoolGeom& g, const Vec& x) {
  Vec y(g.n * g.ho * g.wo * g.c, 0.0);
  for_each_window_tap(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t ih,
                             int64_t iw, bool inside) {
    if (inside) y[out_at(g, n, oh, ow, c)] += x[at(g, n, ih, iw, c)] / (g.kernel * g.kernel);
  });
  return y;
}

Vec ref_avgpool_backward(const PoolGeom& g, const Vec& dy) {
  Vec dx(g.n * g.h * g.w * g.c, 0.0);
  for_each_window_tap(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t c, int64_t ih,
                             int64_t iw, bool inside) {
    if (inside) dx[at(g, n, ih, iw, c)] += dy[out_at(g, n, oh, ow, c)] / (g.kernel * g.kernel);
  });
  return dx;
}

TEST(PoolCpu, OutputSizeIsFloorMode) {
  PoolGeom g = PoolGeom::make({1, 7, 8, 1}, 3, 2, 1, "maxpool", "p");
  EXPECT_EQ(g.ho, 4);  // floor((7 + 2 - 3) / 2) + 1
  EXPECT_EQ(g.wo, 4);  // floor((8 + 2 - 3) / 2) + 1
}

TEST(PoolCpu, MaxPoolForwardMatchesReference) {
  for (const Config& cfg : kConfigs) {
    PoolGeom g = geom(cfg);
    Vec x = uniform_vec(1, g.n * g.h * g.w * g.c, -2, 2), ref_y;
    std::vector<uint8_t> ref_arg;
    ref_maxpool(g, x, ref_y, ref_arg);
    Vec y(ref_y.size()), y_inf(ref_y.size());
    std::vector<uint8_t> arg(ref_y.size(), 0xFF);
    maxpool_forward<double>(g, x.data(), y.data(), arg.data());
    maxpool_forward<double>(g, x.data(), y_inf.data(), nullptr);
    EXPECT_EQ(y, ref_y) << "kernel " << cfg.kernel;
    EXPECT_EQ(y_inf, ref_y);
    EXPECT_EQ(arg, ref_arg);
    std::vector<float> xf(x.begin(), x.end()), yf(y.size());
    maxpool_forward<float>(g, xf.data(), yf.data(), nullptr);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yf[i], static_cast<float>(y[i]));
  }
}

TEST(PoolCpu, MaxPoolTiesKeepFirstAndArgmaxIsWindowIndex) {
  // One 4x4 image, one channel, all equal: each window picks its first real element in raster
  // order. 2x2/2: every window's top-left, index 0.
  PoolGeom g = PoolGeom::make({1, 4, 4, 1}, 2, 2, 0, "maxpool", "p");
  Vec x(16, 1.0), y(4);
  std::vector<uint8_t> arg(4, 0xFF);
  maxpool_forward<double>(g, x.data(), y.data(), arg.data());
  EXPECT_EQ(arg, (std::vector<uint8_t>{0, 0, 0, 0}));
  // 3x3/2 padding 1: windows start at -1 or 1, and the index counts from the window's corner,
  // padding included, so the first real element of a window clipped at the top-left is (1, 1).
  g = PoolGeom::make({1, 4, 4, 1}, 3, 2, 1, "maxpool", "p");
  std::fill(arg.begin(), arg.end(), 0xFF);
  maxpool_forward<double>(g, x.data(), y.data(), arg.data());
  EXPECT_EQ(arg, (std::vector<uint8_t>{1 * 3 + 1, 1 * 3 + 0, 0 * 3 + 1, 0}));  // kh * kernel + kw
}

// The largest window a byte indexes: 16x16, whose last position is 255. Backward must route dy
// back to the element the index names.
TEST(PoolCpu, MaxPoolKernel16UsesTheWholeByte) {
  PoolGeom g = PoolGeom::make({1, 16, 16, 2}, kMaxPoolMaxKernel, 16, 0, "maxpool", "p");
  ASSERT_EQ(g.ho * g.wo, 1);
  Vec x(16 * 16 * 2, 0.0), y(2), dy = {3.0, 5.0}, dx(x.size(), 123.0);
  x[at(g, 0, 15, 15, 0)] = 1;  // channel 0: the window's last position
  x[at(g, 0, 0, 1, 1)] = 1;    // channel 1: its second
  std::vector<uint8_t> arg(2);
  maxpool_forward<double>(g, x.data(), y.data(), arg.data());
  EXPECT_EQ(arg, (std::vector<uint8_t>{255, 1}));
  maxpool_backward<double>(g, dy.data(), arg.data(), dx.data());
  Vec want(x.size(), 0.0);
  want[at(g, 0, 15, 15, 0)] = 3, want[at(g, 0, 0, 1, 1)] = 5;
  EXPECT_EQ(dx, want);
}

TEST(PoolCpu, MaxPoolBackwardMatchesFiniteDifferences) {
  for (const Config& cfg : kConfigs) {
    PoolGeom g = geom(cfg);
    Vec x = uniform_vec(2, g.n * g.h * g.w * g.c, -2, 2);
    Vec R = uniform_vec(3, g.n * g.ho * g.wo * g.c, -2, 2), y(R.size()), dx(x.size(), 123.0);
    std::vector<uint8_t> arg(R.size());
    maxpool_forward<double>(g, x.data(), y.data(), arg.data());
    maxpool_backward<double>(g, R.data(), arg.data(), dx.data());
    auto f = [&](const Vec& v) {
      Vec out(R.size());
      maxpool_forward<double>(g, v.data(), out.data(), nullptr);
      return out;
    };
    const Vec numeric = numeric_gradient([&](const Vec& v) { return weighted_sum(f(v), R); }, x, 1e-6);
    expect_gradient_matches(dx, numeric, 1e-6, GradError::Relative, "kernel " + std::to_string(cfg.kernel));
  }
}

TEST(PoolCpu, AvgPoolForwardMatchesReference) {
  for (const Config& cfg : kConfigs) {
    PoolGeom g = geom(cfg);
    Vec x = uniform_vec(4, g.n * g.h * g.w * g.c, -2, 2), ref = ref_avgpool(g, x), y(ref.size());
    avgpool_forward<double>(g, true, x.data(), y.data());
    EXPECT_LT(rel_err(y, ref), 1e-14) << "kernel " << cfg.kernel;
    std::vector<float> xf(x.begin(), x.end()), yf(y.size());
    avgpool_forward<float>(g, true, xf.data(), yf.data());
    EXPECT_LT(rel_err(Vec(yf.begin(), yf.end()), ref), 1e-6);
  }
}

TEST(PoolCpu, AvgPoolCountsPaddingInDivisor) {
  // 2x2 image of ones, kernel 3, padding 1, stride 1: each window covers 4 real ones of 9.
  PoolGeom g = PoolGeom::make({1, 2, 2, 1}, 3, 1, 1, "avgpool", "p");
  Vec x(4, 1.0), y(4);
  avgpool_forward<double>(g, true, x.data(), y.data());
  for (double v : y) EXPECT_DOUBLE_EQ(v, 4.0 / 9.0);
}

TEST(PoolCpu, AvgPoolBackwardMatchesReferenceAndFiniteDifferences) {
  for (const Config& cfg : kConfigs) {
    PoolGeom g = geom(cfg);
    Vec x = uniform_vec(5, g.n * g.h * g.w * g.c, -2, 2);
    Vec R = uniform_vec(6, g.n * g.ho * g.wo * g.c, -2, 2), dx(x.size(), 123.0);
    avgpool_backward<double>(g, true, R.data(), dx.data());
    EXPECT_LT(rel_err(dx, ref_avgpool_backward(g, R)), 1e-14);
    auto f = [&](const Vec& v) {
      Vec out(R.size());
      avgpool_forward<double>(g, true, v.data(), out.data());
      return out;
    };
    const Vec numeric = numeric_gradient([&](const Vec& v) { return weighted_sum(f(v), R); }, x, 1e-6);
    expect_gradient_matches(dx, numeric, 1e-6, GradError::Relative, "kernel " + std::to_string(cfg.kernel));
  }
}

TEST(PoolCpu, GlobalAvgPoolForwardAndBackward) {
  const int64_t n = 3, hw = 10, c = 4;
  Vec x = uniform_vec(7, n * hw * c, -2, 2), y(n * c), ref(n * c, 0.0);
  gap_forward<double>(x.data(), n, hw, c, y.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hw; ++j)
      for (int64_t k = 0; k < c; ++k) ref[i * c + k] += x[(i * hw + j) * c + k] / hw;
  EXPECT_LT(rel_err(y, ref), 1e-14);
  Vec R = uniform_vec(8, n * c, -2, 2), dx(x.size());
  gap_backward<double>(R.data(), n, hw, c, dx.data());
  auto f = [&](const Vec& v) {
    Vec out(n * c);
    gap_forward<double>(v.data(), n, hw, c, out.data());
    return out;
  };
  const Vec numeric = numeric_gradient([&](const Vec& v) { return weighted_sum(f(v), R); }, x, 1e-6);
  expect_gradient_matches(dx, numeric, 1e-6, GradError::Relative, "dx");
}

// Multi-threaded: overlapping windows (3/2/1) and windows that tile the input (2/2/0, and 3/3/0
// leaving two rows and columns uncovered), dx pre-filled so that every element must be written.
class PoolLarge : public ::testing::TestWithParam<Config> {};

TEST_P(PoolLarge, InputsMatchReference) {
  const Config cfg = GetParam();
  PoolGeom g = geom(cfg);
  Vec x = uniform_vec(9, g.n * g.h * g.w * g.c, -2, 2), ref_y, y(g.n * g.ho * g.wo * g.c);
  std::vector<uint8_t> ref_arg, arg(y.size(), 0xFF);
  ref_maxpool(g, x, ref_y, ref_arg);
  maxpool_forward<double>(g, x.data(), y.data(), arg.data());
  EXPECT_EQ(y, ref_y);
  EXPECT_EQ(arg, ref_arg);
  Vec R = uniform_vec(10, y.size(), -2, 2), dx(x.size(), 123.0);
  maxpool_backward<double>(g, R.data(), arg.data(), dx.data());
  // Both add in output raster order, so even overlapping windows' sums agree bit for bit.
  EXPECT_EQ(dx, ref_maxpool_backward(g, R, ref_arg));
  avgpool_backward<double>(g, true, R.data(), dx.data());
  EXPECT_LT(rel_err(dx, ref_avgpool_backward(g, R)), 1e-14);
}

INSTANTIATE_TEST_SUITE_P(Windows, PoolLarge,
                         ::testing::Values(Config{10, 32, 32, 16, 3, 2, 1}, Config{10, 33, 31, 40, 2, 2, 0},
                                           Config{6, 20, 20, 70, 3, 3, 0}));

// --- Op wrappers ---

// The op tests' bench around layer 1, "stem.pool"; buffers default to F32.
kiln::testing::OpBench bench() {
  kiln::testing::OpBench b(1, "stem.pool");
  b.arg_dtype = DType::F32;
  return b;
}

TEST(PoolOp, MaxPoolThroughRegistry) {
  kiln::testing::OpBench f = bench();
  std::vector<float> x(2 * 4 * 4 * 3), y(2 * 2 * 2 * 3), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101);
  std::vector<uint8_t> arg(y.size());
  const MaxPoolForward<TensorId> fwd{0, 1, 2, {.kernel = 2, .stride = 2}};
  const Op op = make_op(fwd, 1);
  OpCall call{op, f.program, {f.arg({2, 4, 4, 3}, x.data())},
              {f.arg({2, 2, 2, 3}, y.data()), f.arg({2, 2, 2, 3}, arg.data(), DType::U8)},
              f.scalars};
  find_op(Device::CPU, OpKind::MAXPOOL_FWD)(call);
  PoolGeom g = PoolGeom::make({2, 4, 4, 3}, 2, 2, 0, "maxpool", "p");
  std::vector<float> ref(y.size());
  std::vector<uint8_t> ref_arg(y.size());
  maxpool_forward<float>(g, x.data(), ref.data(), ref_arg.data());
  EXPECT_EQ(y, ref);
  EXPECT_EQ(arg, ref_arg);
  const Op bwd = make_op(MaxPoolBackward<TensorId>{1, 2, 3, fwd.window}, 1);
  OpCall bcall{bwd, f.program,
               {f.arg({2, 2, 2, 3}, y.data()), f.arg({2, 2, 2, 3}, arg.data(), DType::U8)},
               {f.arg({2, 4, 4, 3}, dx.data())}, f.scalars};
  find_op(Device::CPU, OpKind::MAXPOOL_BWD)(bcall);
  float total = 0, expected = 0;
  for (float v : dx) total += v;
  for (float v : y) expected += v;
  EXPECT_EQ(total, expected);
}

// The saved argmax must be U8 with one window index per output, and its window must fit a byte:
// errors name the op, its layer and the fix.
TEST(PoolOp, MaxPoolArgmaxMustBeU8WindowIndices) {
  kiln::testing::OpBench f = bench();
  std::vector<float> x(2 * 4 * 4 * 3), y(2 * 2 * 2 * 3), dx(x.size());
  std::vector<int32_t> wide(y.size());  // the old I32 spatial index
  const PoolWindow w{.kernel = 2, .stride = 2};
  const Op fwd = make_op(MaxPoolForward<TensorId>{0, 1, 2, w}, 1);
  OpCall call{fwd, f.program, {f.arg({2, 4, 4, 3}, x.data())},
              {f.arg({2, 2, 2, 3}, y.data()), f.arg({2, 2, 2, 3}, wide.data(), DType::I32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::MAXPOOL_FWD)(call); },
                              {"MAXPOOL_FWD 'stem.pool'", "argmax", "I32", "U8", "recompile"});
  const Op bwd = make_op(MaxPoolBackward<TensorId>{0, 1, 2, w}, 1);
  OpCall bcall{bwd, f.program, {f.arg({2, 2, 2, 3}, y.data()), f.arg({2, 2, 2, 3}, wide.data(), DType::I32)},
               {f.arg({2, 4, 4, 3}, dx.data())}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::MAXPOOL_BWD)(bcall); },
                              {"MAXPOOL_BWD 'stem.pool'", "argmax", "U8"});
  // U8, but one index short of y.
  std::vector<uint8_t> arg(y.size());
  OpCall short_call{fwd, f.program, {f.arg({2, 4, 4, 3}, x.data())},
                    {f.arg({2, 2, 2, 3}, y.data()), f.arg({int64_t(y.size()) - 1}, arg.data(), DType::U8)},
                    f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::MAXPOOL_FWD)(short_call); },
                              {"MAXPOOL_FWD 'stem.pool'", "argmax", "per element of y"});
  // A 17x17 window has 289 positions; inference saves no index, so there it is fine.
  std::vector<float> big(17 * 17), one(1);
  const PoolWindow w17{.kernel = 17, .stride = 1};
  OpCall big_call{make_op(MaxPoolForward<TensorId>{0, 1, 2, w17}, 1), f.program, {f.arg({1, 17, 17, 1}, big.data())},
                  {f.arg({1, 1, 1, 1}, one.data()), f.arg({1, 1, 1, 1}, arg.data(), DType::U8)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::MAXPOOL_FWD)(big_call); },
                              {"MAXPOOL_FWD 'stem.pool'", "kernel 17", "at most 16"});
  big[100] = 7;
  OpCall inf_call{make_op(MaxPoolInference<TensorId>{0, 1, w17}, 1), f.program, {f.arg({1, 17, 17, 1}, big.data())},
                  {f.arg({1, 1, 1, 1}, one.data())}, f.scalars};
  find_op(Device::CPU, OpKind::MAXPOOL_INF)(inf_call);
  EXPECT_EQ(one[0], 7.f);
}

// --- The layer ---

CompileOptions layer_options() {
  CompileOptions o;
  o.batch = 2;
  return o;
}

// The compiled max-pool layer saves a U8 argmax shaped as its output.
TEST(PoolLayer, MaxPoolSavesU8Argmax) {
  Blueprint m("m");
  m.input(8, 8, 4).maxpool(3, 2, 1, "pool").flatten().fc(2);
  const Program p = compile(m, layer_options());
  const int arg = p.find("pool:argmax");
  ASSERT_GE(arg, 0);
  EXPECT_EQ(p.tensors[arg].dtype, DType::U8);
  EXPECT_EQ(p.tensors[arg].shape, (Shape{2, 4, 4, 4}));
}

// A window of more than 256 positions cannot be indexed in a byte: kernel 17 is rejected when
// the model compiles, naming the layer and the fix; 16 (and an average pool of 17) compile.
TEST(PoolLayer, MaxPoolKernelOver16IsRejected) {
  Blueprint too_big("m");
  too_big.input(20, 20, 1).maxpool(17, 1, 0, "big_pool").flatten().fc(2);
  kiln::testing::expect_error([&] { compile(too_big, layer_options()); },
                              {"maxpool 'big_pool'", "kernel 17", "at most 16"});
  Blueprint largest("m");
  largest.input(20, 20, 1).maxpool(16, 1, 0, "pool16").flatten().fc(2);
  EXPECT_NO_THROW(compile(largest, layer_options()));
  Blueprint average("m");
  average.input(20, 20, 1).avgpool(17, 1, 0, "avg17").flatten().fc(2);
  EXPECT_NO_THROW(compile(average, layer_options()));
}

TEST(PoolOp, BadGeometryNamesLayer) {
  kiln::testing::OpBench f = bench();
  std::vector<float> x(1 * 4 * 4 * 2), y(64);
  // Padding 2 is more than half the kernel.
  AvgPoolForward<TensorId> avg{0, 1, {.kernel = 3, .stride = 1, .padding = 2}};
  Op op = make_op(avg, 1);
  OpCall call{op, f.program, {f.arg({1, 4, 4, 2}, x.data())}, {f.arg({1, 6, 6, 2}, y.data())},
              f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::AVGPOOL_FWD)(call); }, {"stem.pool"});
  avg.window.padding = 0;
  avg.window.kernel = 5;  // larger than the 4x4 input
  op = make_op(avg, 1);
  EXPECT_THROW(find_op(Device::CPU, OpKind::AVGPOOL_FWD)(call), Error);
  avg.window.kernel = 2;  // fits, but y has the wrong shape
  op = make_op(avg, 1);
  EXPECT_THROW(find_op(Device::CPU, OpKind::AVGPOOL_FWD)(call), Error);
}

TEST(PoolOp, GlobalAvgPoolThroughRegistry) {
  kiln::testing::OpBench f = bench();
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, y(2), dx(8);  // (1, 2, 2, 2)
  const Op op = make_op(GlobalAvgPoolForward<TensorId>{0, 1}, 1);
  OpCall call{op, f.program, {f.arg({1, 2, 2, 2}, x.data())}, {f.arg({1, 2}, y.data())},
              f.scalars};
  find_op(Device::CPU, OpKind::GAP_FWD)(call);
  EXPECT_EQ(y, (std::vector<float>{4, 5}));
  const Op bwd = make_op(GlobalAvgPoolBackward<TensorId>{1, 2}, 1);
  OpCall bcall{bwd, f.program, {f.arg({1, 2}, y.data())}, {f.arg({1, 2, 2, 2}, dx.data())},
               f.scalars};
  find_op(Device::CPU, OpKind::GAP_BWD)(bcall);
  EXPECT_EQ(dx, (std::vector<float>{1, 1.25, 1, 1.25, 1, 1.25, 1, 1.25}));
}

}  // namespace
