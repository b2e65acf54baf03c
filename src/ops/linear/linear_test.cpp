// Linear kernels against a naive double reference and finite differences, and the
// LINEAR_FWD / LINEAR_BWD op wrappers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/common/cpu_test_util.h"
#include "ops/linear/linear_contract.h"
#include "ops/linear/linear_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

using kiln::testing::uniform_vec;
using kiln::testing::cast;
using kiln::testing::expect_near_all;

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
  const std::string what = "n" + std::to_string(d.n) + " in" + std::to_string(d.in) + " out" +
                           std::to_string(d.out) + (bias ? " bias" : "");
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
  auto x = uniform_vec(rng, d.n * d.in), w = uniform_vec(rng, d.out * d.in);
  auto b = uniform_vec(rng, d.out);
  const auto R = uniform_vec(rng, d.n * d.out);
  std::vector<double> y(R.size()), dx(x.size()), dw(w.size()), db(b.size());
  cpu::linear_bwd<double>(d, R.data(), x.data(), w.data(), dx.data(), dw.data(), db.data());
  auto loss = [&] {
    cpu::linear_fwd<double>(d, x.data(), w.data(), b.data(), y.data());
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += y[i] * R[i];
    return sum;
  };
  const double eps = 1e-6;
  auto check = [&](std::vector<double>& param, const std::vector<double>& grad, const char* name) {
    for (size_t i = 0; i < param.size(); ++i) {
      const double saved = param[i];
      param[i] = saved + eps;
      const double up = loss();
      param[i] = saved - eps;
      const double down = loss();
      param[i] = saved;
      const double fd = (up - down) / (2 * eps);
      ASSERT_LT(std::abs(fd - grad[i]) / std::max(1.0, std::abs(fd)), 1e-6)
          << name << "[" << i << "]: analytic " << grad[i] << " fd " << fd;
    }
  };
  check(x, dx, "dx");
  check(w, dw, "dw");
  check(b, db, "db");
}

// --- op wrappers ---------------------------------------------------------------------------

struct Fixture {
  Program program;
  std::vector<std::vector<double>> storage;  // double-sized slots fit either precision
  StepScalars scalars;
  int unbound = -1;  // a tensor the program does not give its op (malformed programs)

  Fixture() {
    Layer layer;
    layer.name = "fc1";
    layer.kind = LayerKind::Linear;
    program.graph.layers.push_back(layer);
    program.tensors.reserve(16);  // TensorArgs point into it
  }
  int add(const std::string& name, Shape shape, DType dtype, unsigned seed) {
    TensorSpec spec;
    spec.name = name, spec.shape = shape, spec.dtype = dtype;
    program.tensors.push_back(spec);
    std::mt19937 rng(seed);
    const auto values = uniform_vec(rng, numel(shape));
    storage.emplace_back(values);
    if (dtype == DType::F32)
      for (size_t i = 0; i < values.size(); ++i) as<float>(storage.size() - 1)[i] = float(values[i]);
    return static_cast<int>(program.tensors.size()) - 1;
  }
  template <class T>
  T* as(size_t id) { return reinterpret_cast<T*>(storage[id].data()); }
  template <template <class> class C>
  void run(const C<TensorId>& c) {
    const Op op = make_op(c, 0);
    std::vector<TensorArg> in_args, out_args;
    auto arg = [&](int id) {
      return id < 0 || id == unbound ? TensorArg{} : TensorArg{&program.tensors[id], storage[id].data()};
    };
    for (int id : op.in) in_args.push_back(arg(id));
    for (int id : op.out) out_args.push_back(arg(id));
    OpCall call{op, program, in_args, out_args, scalars};
    find_op(Device::CPU, op.kind)(call);
  }
};

class LinearOpCpu : public ::testing::Test {};

TEST_F(LinearOpCpu, OpsRunTheKernels) {
  Fixture f;
  const LinearDims d{6, 8, 3};
  const int x = f.add("x", {6, 8}, DType::F32, 1), w = f.add("w", {3, 8}, DType::F32, 2);
  const int b = f.add("b", {3}, DType::F32, 3), y = f.add("y", {6, 3}, DType::F32, 4);
  const int dy = f.add("dy", {6, 3}, DType::F32, 5), dx = f.add("dx", {6, 8}, DType::F32, 6);
  const int dw = f.add("dw", {3, 8}, DType::F32, 7), db = f.add("db", {3}, DType::F32, 8);
  f.run(LinearForward<TensorId>{x, w, b, y});
  f.run(LinearBackward<TensorId>{dy, x, w, dx, dw, db});
  std::vector<float> ey(18), edx(48), edw(24), edb(3);
  cpu::linear_fwd<float>(d, f.as<float>(x), f.as<float>(w), f.as<float>(b), ey.data());
  cpu::linear_bwd<float>(d, f.as<float>(dy), f.as<float>(x), f.as<float>(w), edx.data(),
                         edw.data(), edb.data());
  EXPECT_EQ(std::memcmp(ey.data(), f.as<float>(y), sizeof(float) * ey.size()), 0);
  EXPECT_EQ(std::memcmp(edx.data(), f.as<float>(dx), sizeof(float) * edx.size()), 0);
  EXPECT_EQ(std::memcmp(edw.data(), f.as<float>(dw), sizeof(float) * edw.size()), 0);
  EXPECT_EQ(std::memcmp(edb.data(), f.as<float>(db), sizeof(float) * edb.size()), 0);

  // Absent dx and db (first layer, no bias) are skipped; dw is unchanged by their absence.
  f.run(LinearForward<TensorId>{x, w, -1, y});
  f.run(LinearBackward<TensorId>{dy, x, w, -1, dw, -1});
  EXPECT_EQ(std::memcmp(edw.data(), f.as<float>(dw), sizeof(float) * edw.size()), 0);
}

TEST_F(LinearOpCpu, DoubleOpMatchesNaive) {
  Fixture f;
  const int x = f.add("x", {4, 5}, DType::F64, 1), w = f.add("w", {2, 5}, DType::F64, 2);
  const int b = f.add("b", {2}, DType::F64, 3), y = f.add("y", {4, 2}, DType::F64, 4);
  f.run(LinearForward<TensorId>{x, w, b, y});
  const auto ref = naive({4, 5, 2}, f.storage[x], f.storage[w], &f.storage[b],
                         std::vector<double>(8, 0.0));
  expect_near_all(f.storage[y], ref.y, 1e-12, "y");
}

template <class Contract>
void expect_op_error(Fixture& f, const Contract& c, const std::string& needle) {
  kiln::testing::expect_error([&] { f.run(c); }, {"fc1", needle});
}

TEST_F(LinearOpCpu, BadTensorsNameTheLayer) {
  Fixture f;
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
