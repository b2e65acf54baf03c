// Linear kernels against a naive double reference and finite differences, and the
// LINEAR_FWD / LINEAR_BWD op wrappers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/linear/linear_contract.h"
#include "ops/linear/linear_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using kiln::testing::cast;
using kiln::testing::expect_gradient_matches;
using kiln::testing::expect_near_all;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::OpBench;
using kiln::testing::uniform_vec;
using kiln::testing::weighted_sum;

using cpu::LinearDims;

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// y = x w^T + b; dx, dw, db are the gradients of sum(y * dy).
Reference naive(const LinearDims& d, const std::vector<double>& x, const std::vector<double>& w,
                const std::vector<double>* b, const std::vector<double>& dy) {
  Reference ref{std::vector<double>(d.n * d.out, 0.0), std::vector<double>(x.size(), 0.0),
                std::vector<double>(w.size(), 0.0), std::vector<double>(d.out, 0.0)};
  for (int64_t i = 0; i < d.n; ++i)
    for (int64_t o = 0; o < d.out; ++o) {
      double sum = b ? (*b)[o] : 0.0;
      const double g = dy[i * d.out + o];
      for (int64_t f = 0; f < d.in; ++f) {
        sum += x[i * d.in + f] * w[o * d.in + f];
        ref.dx[i * d.in + f] += g * w[o * d.in + f];
        ref.dw[o * d.in + f] += g * x[i * d.in + f];
      }
      ref.y[i * d.out + o] = sum;
      ref.db[o] += g;
    }
  return ref;
}

template <class T>
void check_dims(const LinearDims& d, bool bias, bool with_dx, double tol, unsigned seed) {
  std::mt19937 rng(seed);
  const auto x = cast<double>(cast<T>(uniform_vec(rng, d.n * d.in)));
  const auto w = cast<double>(cast<T>(uniform_vec(rng, d.out * d.in)));
  const auto b = cast<double>(cast<T>(uniform_vec(rng, d.out)));
  const auto dy = cast<double>(cast<T>(uniform_vec(rng, d.n * d.out)));
  const Reference ref = naive(d, x, w, bias ? &b : nullptr, dy);
  const auto xt = cast<T>(x), wt = cast<T>(w), bt = cast<T>(b), dyt = cast<T>(dy);
  // NaN-filled outputs: the kernels must overwrite every element.
  std::vector<T> y(ref.y.size(), NAN), dx(x.size(), NAN), dw(w.size(), NAN), db(d.out, NAN);
  cpu::linear_fwd<T>(d, xt.data(), wt.data(), bias ? bt.data() : nullptr, y.data());
  cpu::linear_bwd<T>(d, dyt.data(), xt.data(), wt.data(), with_dx ? dx.data() : nullptr,
                     dw.data(), bias ? db.data() : nullptr);
  std::string what = "n";  // not "literal" + std::string&&, which GCC 12's -Wrestrict misreports once inlined
  what += std::to_string(d.n) + " in" + std::to_string(d.in) + " out" + std::to_string(d.out) + (bias ? " bias" : "");
  expect_near_all(y, ref.y, tol, "y " + what);
  if (with_dx) expect_near_all(dx, ref.dx, tol, "dx " + what);
  expect_near_all(dw, ref.dw, tol, "dw " + what);
  if (bias) expect_near_all(db, ref.db, tol, "db " + what);
}

const std::vector<LinearDims> kDims = {{1, 1, 1}, {3, 5, 2}, {7, 13, 10}, {32, 64, 10}, {64, 300, 33}};

TEST(LinearCpu, DoubleMatchesNaive) {
  unsigned seed = 1;
  for (const auto& d : kDims)
    for (bool bias : {false, true}) check_dims<double>(d, bias, true, 1e-10, seed++);
}

TEST(LinearCpu, FloatMatchesNaive) {
  unsigned seed = 50;
  for (const auto& d : kDims)
    for (bool bias : {false, true}) check_dims<float>(d, bias, true, 1e-4, seed++);
}

TEST(LinearCpu, InputGradientIsOptional) {
  check_dims<double>({5, 7, 3}, true, false, 1e-10, 90);
  check_dims<float>({5, 7, 3}, false, false, 1e-4, 91);
}

// Loss = sum(linear(x, w, b) * R); linear_bwd fed with dy = R must give its gradient.
TEST(LinearCpu, GradientsMatchFiniteDifferences) {
  const LinearDims d{4, 6, 5};
  std::mt19937 rng(123);
  const auto x = uniform_vec(rng, d.n * d.in), w = uniform_vec(rng, d.out * d.in);
  const auto b = uniform_vec(rng, d.out);
  const auto R = uniform_vec(rng, d.n * d.out);
  std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
  cpu::linear_bwd<double>(d, R.data(), x.data(), w.data(), dx.data(), dw.data(), db.data());
  auto loss = [&](const std::vector<double>& xv, const std::vector<double>& wv, const std::vector<double>& bv) {
    std::vector<double> y(R.size());
    cpu::linear_fwd<double>(d, xv.data(), wv.data(), bv.data(), y.data());
    return weighted_sum(y, R);
  };
  const double h = 1e-6, tol = 1e-6;
  expect_gradient_matches(dx, numeric_gradient([&](const auto& v) { return loss(v, w, b); }, x, h), tol,
                          GradError::PerElement, "dx");
  expect_gradient_matches(dw, numeric_gradient([&](const auto& v) { return loss(x, v, b); }, w, h), tol,
                          GradError::PerElement, "dw");
  expect_gradient_matches(db, numeric_gradient([&](const auto& v) { return loss(x, w, v); }, b, h), tol,
                          GradError::PerElement, "db");
}

// --- op wrappers ---------------------------------------------------------------------------

// The op tests' bench around one Linear layer, "fc1".
OpBench fc1() { return OpBench(0, "fc1", LayerKind::Linear); }

class LinearOpCpu : public ::testing::Test {};

TEST_F(LinearOpCpu, OpsRunTheKernels) {
  OpBench f = fc1();
  const LinearDims d{6, 8, 3};
  const int x = f.add("x", {6, 8}, DType::F32, 1), w = f.add("w", {3, 8}, DType::F32, 2);
  const int b = f.add("b", {3}, DType::F32, 3), y = f.add("y", {6, 3}, DType::F32, 4);
  const int dy = f.add("dy", {6, 3}, DType::F32, 5), dx = f.add("dx", {6, 8}, DType::F32, 6);
  const int dw = f.add("dw", {3, 8}, DType::F32, 7), db = f.add("db", {3}, DType::F32, 8);
  f.run(LinearForward<TensorId>{x, w, b, y});
  f.run(LinearBackward<TensorId>{dy, x, w, dx, dw, db});
  std::vector<float> ey(18), edx(48), edw(24), edb(3);
  cpu::linear_fwd<float>(d, f.data<float>(x), f.data<float>(w), f.data<float>(b), ey.data());
  cpu::linear_bwd<float>(d, f.data<float>(dy), f.data<float>(x), f.data<float>(w), edx.data(),
                         edw.data(), edb.data());
  EXPECT_EQ(std::memcmp(ey.data(), f.data<float>(y), sizeof(float) * ey.size()), 0);
  EXPECT_EQ(std::memcmp(edx.data(), f.data<float>(dx), sizeof(float) * edx.size()), 0);
  EXPECT_EQ(std::memcmp(edw.data(), f.data<float>(dw), sizeof(float) * edw.size()), 0);
  EXPECT_EQ(std::memcmp(edb.data(), f.data<float>(db), sizeof(float) * edb.size()), 0);

  // Absent dx and db (first layer, no bias) are skipped; dw is unchanged by their absence.
  f.run(LinearForward<TensorId>{x, w, -1, y});
  f.run(LinearBackward<TensorId>{dy, x, w, -1, dw, -1});
  EXPECT_EQ(std::memcmp(edw.data(), f.data<float>(dw), sizeof(float) * edw.size()), 0);
}

TEST_F(LinearOpCpu, DoubleOpMatchesNaive) {
  OpBench f = fc1();
  const int x = f.add("x", {4, 5}, DType::F64, 1), w = f.add("w", {2, 5}, DType::F64, 2);
  const int b = f.add("b", {2}, DType::F64, 3), y = f.add("y", {4, 2}, DType::F64, 4);
  f.run(LinearForward<TensorId>{x, w, b, y});
  const std::vector<double> bv = f.values(b);
  const auto ref = naive({4, 5, 2}, f.values(x), f.values(w), &bv, std::vector<double>(8, 0.0));
  expect_near_all(f.values(y), ref.y, 1e-12, "y");
}

template <class Contract>
void expect_op_error(OpBench& f, const Contract& c, const std::string& needle) {
  kiln::testing::expect_error([&] { f.run(c); }, {"fc1", needle});
}

TEST_F(LinearOpCpu, BadTensorsNameTheLayer) {
  OpBench f = fc1();
  const int x = f.add("x", {6, 8}, DType::F32, 1), w = f.add("w", {3, 8}, DType::F32, 2);
  const int x4 = f.add("x4", {6, 2, 2, 2}, DType::F32, 3), w_bad = f.add("w_bad", {3, 7}, DType::F32, 4);
  const int y = f.add("y", {6, 3}, DType::F32, 5), y_bad = f.add("y_bad", {6, 4}, DType::F32, 6);
  const int b_bad = f.add("b_bad", {4}, DType::F32, 7), dw64 = f.add("dw64", {3, 8}, DType::F64, 8);
  const int x16 = f.add("x16", {6, 8}, DType::F16, 9), w16 = f.add("w16", {3, 8}, DType::F16, 9);
  const int y16 = f.add("y16", {6, 3}, DType::F16, 9);
  expect_op_error(f, LinearForward<TensorId>{x4, w, -1, y}, "flatten");
  expect_op_error(f, LinearForward<TensorId>{x, w_bad, -1, y}, "w_bad");
  expect_op_error(f, LinearForward<TensorId>{x, w, -1, y_bad}, "y_bad");
  expect_op_error(f, LinearForward<TensorId>{x, w, b_bad, y}, "b_bad");
  expect_op_error(f, LinearForward<TensorId>{x16, w16, -1, y16}, "F16");
  expect_op_error(f, LinearBackward<TensorId>{y_bad, x, w, -1, w, -1}, "y_bad");
  expect_op_error(f, LinearBackward<TensorId>{y, x, w, -1, dw64, -1}, "F64");
  const int dw = f.add("dw", {3, 8}, DType::F32, 10);
  f.unbound = dw;  // a malformed program: its LINEAR_BWD has no weight gradient
  expect_op_error(f, LinearBackward<TensorId>{y, x, w, -1, dw, -1}, "'dw'");
  f.unbound = -1;
}

}  // namespace
}  // namespace kiln
