#pragma once
// Shared by the CPU op tests: float64 vectors, their max-relative error, and central finite
// differences of sum(f(x) * R) for gradient checks.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

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

// max |a - b| / max |b|: the error relative to the reference's scale.
inline double rel_err(const Vec& a, const Vec& b) {
  double diff = 0, scale = 1e-300;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
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
