#pragma once
// Host-side helpers shared by every test (CPU and GPU): float64 vectors, random fills, casts,
// the error measures the tests compare with and checks built on them, and expected kiln::Errors.
// Gradient checks: support/gradcheck.h; op fixtures: support/op_bench.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "support/half_host.h"

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

// n values from Normal(mean, stddev), drawn as V (float or double), each already rounded to
// `dtype` (F32, F16 or BF16): exactly what a tensor of that dtype holds.
template <class V = double>
std::vector<V> random_values(DType dtype, size_t n, std::mt19937& rng, V mean = 0, V stddev = 1) {
  std::normal_distribution<V> dist(mean, stddev);
  std::vector<V> v(n);
  for (V& x : v) x = static_cast<V>(round_to(dtype, static_cast<float>(dist(rng))));
  return v;
}

// The same values as another element type (e.g. inputs rounded to float for a float kernel).
template <class T, class U>
std::vector<T> cast(const std::vector<U>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// --- Error measures: `a` is any indexable container of numbers (float results against a double
// reference), `b` the reference ---

// max |a - b| / max |b| (at least 1e-300, so never 0/0): the error relative to the reference's
// scale.
template <class A, class B>
double rel_err(const A& a, const B& b) {
  double diff = 0, scale = 1e-300;
  for (size_t i = 0; i < std::size(b); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// max |a - b| / (1 + |b|): relative for large values, absolute near zero.
template <class A, class B>
double mixed_err(const A& a, const B& b) {
  double worst = 0;
  for (size_t i = 0; i < std::size(b); ++i) {
    const double bi = static_cast<double>(b[i]);
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - bi) / (1 + std::abs(bi)));
  }
  return worst;
}

// ||a - b|| / ||b|| (||b|| at least 1e-30): the relative L2 error. NaN, which fails every
// comparison, when the sizes differ or an element is NaN.
template <class A, class B>
double rel_l2(const A& a, const B& b) {
  if (std::size(a) != std::size(b)) return std::numeric_limits<double>::quiet_NaN();
  double num = 0, den = 0;
  for (size_t i = 0; i < std::size(b); ++i) {
    const double ai = static_cast<double>(a[i]), bi = static_cast<double>(b[i]);
    num += (ai - bi) * (ai - bi);
    den += bi * bi;
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// --- Checks ---

// Every got[i] within tol * (1 + |want[i]|) of want[i]; the first miss fails, naming its index.
template <class T>
void expect_near_all(const std::vector<T>& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(static_cast<double>(got[i]), want[i], tol * (1.0 + std::abs(want[i]))) << what << " at " << i;
}

// Fails (non-fatally) unless every element of `got` is finite where `want`'s is (NaN = a poisoned
// element the kernel never wrote) and rel_l2(got, want) < tol over the others; the message shows
// the worst element.
template <class A, class B>
void expect_close(const std::string& what, const A& got, const B& want, double tol) {
  ASSERT_EQ(std::size(got), std::size(want)) << what << ": size mismatch";
  size_t nonfinite = 0, first_nonfinite = 0;
  double diff2 = 0, want2 = 0, worst = -1;
  size_t worst_i = 0;
  for (size_t i = 0; i < std::size(got); ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    if (!std::isfinite(g) && std::isfinite(w)) {
      if (nonfinite++ == 0) first_nonfinite = i;
      continue;
    }
    const double d = g - w;
    diff2 += d * d;
    want2 += w * w;
    if (std::abs(d) > worst) worst = std::abs(d), worst_i = i;
  }
  EXPECT_EQ(nonfinite, 0u) << what << ": " << nonfinite << " of " << std::size(got)
                           << " elements are not finite (never written?), first at index " << first_nonfinite;
  const double rel = std::sqrt(diff2) / std::max(std::sqrt(want2), 1e-30);
  EXPECT_LT(rel, tol) << what << ": relative L2 error " << rel << " (tolerance " << tol
                      << "); largest difference at index " << worst_i << ": got "
                      << static_cast<double>(got[worst_i]) << ", want " << static_cast<double>(want[worst_i]);
}

// expect_close against a reference worth comparing with: not empty, finite and not all zeros
// (fatal otherwise: nothing would be compared).
template <class A, class B>
void expect_close_to_reference(const std::string& what, const A& got, const B& ref, double tol) {
  ASSERT_NE(std::size(ref), 0u) << what << ": the reference is empty";
  double norm = 0;
  for (size_t i = 0; i < std::size(ref); ++i) norm += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  ASSERT_TRUE(std::isfinite(norm) && norm > 0) << what << ": reference norm " << norm;
  expect_close(what, got, ref, tol);
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

// Whether `part` occurs in `text` (messages, logs).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace kiln::testing
