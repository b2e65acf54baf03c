#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/elementwise/elementwise_contract.h"
#include "ops/elementwise/elementwise_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/op_bench.h"
#include "support/scoped_threads.h"

namespace {

using namespace kiln;
using namespace kiln::cpu;
using kiln::testing::expect_gradient_matches;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::uniform_vec;
using kiln::testing::Vec;
using kiln::testing::weighted_sum;
using Bytes = std::vector<uint8_t>;

TEST(ElementwiseCpu, ReluForwardAndMask) {
  Vec x = uniform_vec(1, 1000);
  x[3] = 0.0;  // exactly zero: not passed (mask 0), like PyTorch's gradient at 0
  Vec y(x.size());
  Bytes mask(x.size(), 7);
  relu_forward<double>(x.data(), x.size(), y.data(), mask.data());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], x[i] > 0 ? x[i] : 0.0) << i;
    ASSERT_EQ(mask[i], x[i] > 0 ? 1 : 0) << i;
  }
  std::vector<float> xf(x.begin(), x.end()), yf(x.size());
  relu_forward<float>(xf.data(), xf.size(), yf.data(), nullptr);  // inference: no mask
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(yf[i], xf[i] > 0 ? xf[i] : 0.f);
}

TEST(ElementwiseCpu, ReluBackwardMatchesFiniteDifferences) {
  Vec x = uniform_vec(2, 200), R = uniform_vec(3, 200);
  for (double& v : x)  // keep away from the kink so differences are exact
    if (std::abs(v) < 1e-3) v = 0.5;
  Vec y(x.size()), dx(x.size());
  Bytes mask(x.size());
  relu_forward<double>(x.data(), x.size(), y.data(), mask.data());
  relu_backward<double>(R.data(), mask.data(), x.size(), dx.data());
  auto f = [](const Vec& v) {
    Vec out(v.size());
    relu_forward<double>(v.data(), v.size(), out.data(), nullptr);
    return out;
  };
  const Vec numeric = numeric_gradient([&](const Vec& v) { return weighted_sum(f(v), R); }, x, 1e-6);
  expect_gradient_matches(dx, numeric, 1e-6, GradError::Relative, "dx");
}

TEST(ElementwiseCpu, AddAndGradSum) {
  const int64_t n = 300;
  Vec a = uniform_vec(4, n), b = uniform_vec(5, n), c = uniform_vec(6, n), y(n), s(n);
  add_forward<double>(a.data(), b.data(), n, y.data());
  const double* g[] = {a.data(), b.data(), c.data()};
  grad_sum<double>(g, 3, n, s.data());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], a[i] + b[i]);
    ASSERT_EQ(s[i], (a[i] + b[i]) + c[i]);  // fixed order: bitwise reproducible
  }
  grad_sum<double>(g, 1, n, s.data());
  EXPECT_EQ(s, a);
}

TEST(ElementwiseCpu, DropoutMaskFollowsCounterRandomness) {
  const int64_t n = 100000;
  const float p = 0.3f;
  Vec x = uniform_vec(7, n), y(n);
  Bytes mask(n);
  uint64_t seed = 42, stream = dropout_stream(5, 17);
  dropout_forward<double>(x.data(), n, p, seed, stream, y.data(), mask.data());
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool keep = random_uniform(seed, stream, i) >= p;
    ASSERT_EQ(mask[i], keep) << i;
    ASSERT_DOUBLE_EQ(y[i], keep ? x[i] / (1.0 - p) : 0.0) << i;
    kept += keep;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);
  EXPECT_EQ(stream, mix64(5ULL * 1000003ULL + 17ULL));
}

TEST(ElementwiseCpu, DropoutIsIndependentOfThreadCountAndVariesByStep) {
  const int64_t n = 200000;
  Vec x = uniform_vec(8, n), y1(n), y2(n), y3(n);
  Bytes m1(n), m2(n), m3(n);
  {
    kiln::testing::ScopedThreads single(1);
    dropout_forward<double>(x.data(), n, 0.5f, 9, dropout_stream(2, 0), y1.data(), m1.data());
  }
  {
    kiln::testing::ScopedThreads several(3);
    dropout_forward<double>(x.data(), n, 0.5f, 9, dropout_stream(2, 0), y2.data(), m2.data());
    dropout_forward<double>(x.data(), n, 0.5f, 9, dropout_stream(2, 1), y3.data(), m3.data());
  }
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(y1, y2);
  EXPECT_NE(m1, m3);
}

TEST(ElementwiseCpu, DropoutEdgeProbabilities) {
  Vec x = uniform_vec(10, 64), y(64), dx(64);
  Bytes mask(64);
  dropout_forward<double>(x.data(), 64, 0.f, 1, 2, y.data(), mask.data());
  EXPECT_EQ(y, x);  // p = 0 is the identity
  dropout_forward<double>(x.data(), 64, 1.f, 1, 2, y.data(), mask.data());
  dropout_backward<double>(x.data(), mask.data(), 64, 1.f, dx.data());
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(y[i], 0.0);  // p = 1 drops everything, no NaN from 0 * inf
    ASSERT_EQ(dx[i], 0.0);
  }
}

TEST(ElementwiseCpu, DropoutBackwardMatchesFiniteDifferences) {
  const int64_t n = 256;
  const float p = 0.4f;
  Vec x = uniform_vec(11, n), R = uniform_vec(12, n), y(n), dx(n);
  Bytes mask(n);
  dropout_forward<double>(x.data(), n, p, 3, 4, y.data(), mask.data());
  dropout_backward<double>(R.data(), mask.data(), n, p, dx.data());
  auto f = [&](const Vec& v) {
    Vec out(n);
    Bytes m(n);
    dropout_forward<double>(v.data(), n, p, 3, 4, out.data(), m.data());
    return out;
  };
  const Vec numeric = numeric_gradient([&](const Vec& v) { return weighted_sum(f(v), R); }, x, 1e-6);
  expect_gradient_matches(dx, numeric, 1e-6, GradError::Relative, "dx");
  std::vector<float> Rf(R.begin(), R.end()), dxf(n);
  dropout_backward<float>(Rf.data(), mask.data(), n, p, dxf.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(dxf[i], dx[i], 1e-6 * (1 + std::abs(dx[i])));
}

// --- Op wrappers through the registry ---

// The op tests' bench around layer 3, "layer1.0.add".
kiln::testing::OpBench bench() { return kiln::testing::OpBench(3, "layer1.0.add"); }

TEST(ElementwiseOp, AddShapeMismatchNamesLayerAndShapes) {
  kiln::testing::OpBench f = bench();
  Vec a(2 * 4 * 4 * 8), b(2 * 2 * 2 * 32), y(a.size());
  const Op op = make_op(Add<TensorId>{0, 1, 2}, 3);
  OpCall call{op,
              f.program,
              {f.arg({2, 4, 4, 8}, a.data()), f.arg({2, 2, 2, 32}, b.data())},
              {f.arg({2, 4, 4, 8}, y.data())},
              f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::ADD_FWD)(call); },
                              {"layer1.0.add", "[2,4,4,8]", "[2,2,2,32]"});
}

// The mask stream is the op's layer key (a hash of the layer's name, set by lowering) and the step.
TEST(ElementwiseOp, DropoutUsesLayerKeyAndStepStream) {
  kiln::testing::OpBench f = bench();
  f.scalars.seed = 1234;
  f.scalars.step = 56;
  const int64_t n = 500;
  Vec x = uniform_vec(13, n), y(n), dx(n);
  Bytes mask(n);
  DropoutForward<TensorId> fwd{0, 1, 2, 0.25f, 0xC0FFEEu};
  Op op = make_op(fwd, 3);
  OpCall call{op, f.program, {f.arg({5, 100}, x.data())},
              {f.arg({5, 100}, y.data()), f.arg({5, 100}, mask.data(), DType::U8)}, f.scalars};
  find_op(Device::CPU, OpKind::DROPOUT_FWD)(call);
  uint64_t stream = mix64(0xC0FFEEULL * 1000003ULL + 56ULL);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(mask[i], random_uniform(1234, stream, i) >= 0.25f) << i;
  const Op bwd = make_op(DropoutBackward<TensorId>{3, 2, 4, fwd.p}, 3);
  OpCall bcall{bwd, f.program,
               {f.arg({5, 100}, x.data()), f.arg({5, 100}, mask.data(), DType::U8)},
               {f.arg({5, 100}, dx.data())}, f.scalars};
  find_op(Device::CPU, OpKind::DROPOUT_BWD)(bcall);
  EXPECT_EQ(dx, y);  // dy = x gives dx = y: the same mask and scale
  fwd.p = 1.5f;
  op = make_op(fwd, 3);
  EXPECT_THROW(find_op(Device::CPU, OpKind::DROPOUT_FWD)(call), Error);
}

TEST(ElementwiseOp, ReluAndGradSumThroughRegistry) {
  kiln::testing::OpBench f = bench();
  std::vector<float> x = {-1.f, 2.f, 0.f, 3.5f}, y(4), dx(4), g0 = {1, 2, 3, 4}, g1 = {5, 6, 7, 8},
                     s(4);
  Bytes mask(4);
  const Op relu = make_op(ReluForward<TensorId>{0, 1, 2}, 3);
  OpCall rc{relu, f.program, {f.arg({4}, x.data(), DType::F32)},
            {f.arg({4}, y.data(), DType::F32), f.arg({4}, mask.data(), DType::U8)}, f.scalars};
  find_op(Device::CPU, OpKind::RELU_FWD)(rc);
  EXPECT_EQ(y, (std::vector<float>{0.f, 2.f, 0.f, 3.5f}));
  EXPECT_EQ(mask, (Bytes{0, 1, 0, 1}));
  const Op bwd = make_op(ReluBackward<TensorId>{3, 2, 4}, 3);
  OpCall bc{bwd, f.program,
            {f.arg({4}, g0.data(), DType::F32), f.arg({4}, mask.data(), DType::U8)},
            {f.arg({4}, dx.data(), DType::F32)}, f.scalars};
  find_op(Device::CPU, OpKind::RELU_BWD)(bc);
  EXPECT_EQ(dx, (std::vector<float>{0.f, 2.f, 0.f, 4.f}));
  const Op sum = make_op(GradSum<TensorId>{{5, 6}, 7}, 3);
  OpCall sc{sum, f.program,
            {f.arg({4}, g0.data(), DType::F32), f.arg({4}, g1.data(), DType::F32)},
            {f.arg({4}, s.data(), DType::F32)}, f.scalars};
  find_op(Device::CPU, OpKind::GRAD_SUM)(sc);
  EXPECT_EQ(s, (std::vector<float>{6, 8, 10, 12}));
}

TEST(ElementwiseOp, MissingTensorNamesOpLayerAndField) {
  kiln::testing::OpBench f = bench();
  std::vector<float> dy(4), dx(4);
  const Op bwd = make_op(ReluBackward<TensorId>{0, 1, 2}, 3);
  OpCall call{bwd, f.program, {f.arg({4}, dy.data(), DType::F32), TensorArg{}},
              {f.arg({4}, dx.data(), DType::F32)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::RELU_BWD)(call); },
                              {"RELU_BWD", "layer1.0.add", "'mask'"});
}

}  // namespace
