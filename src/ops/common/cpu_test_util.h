#pragma once
// Shared by the CPU op tests: float64 vectors, random fills, casts, their max-relative error and
// element-wise checks, and central finite differences of sum(f(x) * R) for gradient checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/program.h"
#include "runtime/op_call.h"

namespace kiln::testing {

using Vec = std::vector<double>;

// n values drawn uniformly from [lo, hi) with `rng`.
inline Vec uniform_vec(std::mt19937& rng, size_t n, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// The same from a generator of its own, seeded with `seed`.
inline Vec uniform_vec(uint32_t seed, size_t n, double lo = -1, double hi = 1) {
  std::mt19937 rng(seed);
  return uniform_vec(rng, n, lo, hi);
}

// max |a - b| / max |b| (at least 1e-300, so never 0/0): the error relative to the reference's
// scale. `a` is any indexable container of numbers (float results against a double reference).
template <class A>
double rel_err(const A& a, const Vec& b) {
  double diff = 0, scale = 1e-300;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

// The same values as another element type (e.g. inputs rounded to float for a float kernel).
template <class T, class U>
std::vector<T> cast(const std::vector<U>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Every got[i] within tol * (1 + |want[i]|) of want[i]; the first miss fails, naming its index.
template <class T>
void expect_near_all(const std::vector<T>& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

// Runs `body` and returns the kiln::Error message it throws (fails the test if none).
template <class F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected kiln::Error";
  return "";
}

// Runs `f` and expects a kiln::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  const std::string message = error_of(f);
  if (message.empty()) return;  // error_of has reported the missing error
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}

// d/dx of sum(f(x) * R) by central differences (step 1e-6), in double.
template <class F>
Vec numeric_grad(F f, Vec x, const Vec& R) {
  const double h = 1e-6;
  auto loss = [&](const Vec& v) {
    const Vec y = f(v);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += y[i] * R[i];
    return l;
  };
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss(x);
    x[i] = keep - h;
    const double down = loss(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// A minimal program holding host tensors, enough to build OpCalls by hand for one layer: op
// wrapper tests bind their own buffers and check that errors name the layer.
struct OpFixture {
  Program program;
  std::deque<TensorSpec> specs;  // a deque keeps spec addresses stable as args are added
  StepScalars scalars;
  DType default_dtype;
  OpFixture(int layer, const std::string& name, DType dtype) : default_dtype(dtype) {
    program.graph.layers.resize(size_t(layer) + 1);
    program.graph.layers[size_t(layer)].name = name;
  }
  TensorArg arg(Shape shape, void* data) { return arg(std::move(shape), data, default_dtype); }
  TensorArg arg(Shape shape, void* data, DType dtype) {
    TensorSpec& s = specs.emplace_back();
    s.shape = std::move(shape);
    s.dtype = dtype;
    return TensorArg{&s, data};
  }
};

}  // namespace kiln::testing
