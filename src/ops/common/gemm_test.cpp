// gemm against a naive triple loop: every transpose combination, alpha/beta, padded leading
// dimensions, and sizes large enough to be cut into pieces (bands and depth parts); the same
// bytes at any thread count.
#include "ops/common/gemm_cpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "support/scoped_threads.h"

namespace kiln::cpu {
namespace {

struct Case {
  int64_t m, n, k;
};

template <class T>
void check(const Case& s, bool ta, bool tb, double alpha, double beta, int64_t pad, double tol,
           unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  const int64_t lda = (ta ? s.m : s.k) + pad, ldb = (tb ? s.k : s.n) + pad, ldc = s.n + pad;
  std::vector<T> a((ta ? s.k : s.m) * lda), b((tb ? s.n : s.k) * ldb), c(s.m * ldc);
  for (T& v : a) v = static_cast<T>(dist(rng));
  for (T& v : b) v = static_cast<T>(dist(rng));
  for (T& v : c) v = static_cast<T>(dist(rng));
  std::vector<double> want(c.begin(), c.end());
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < s.k; ++p)
        sum += double(ta ? a[p * lda + i] : a[i * lda + p]) * double(tb ? b[j * ldb + p] : b[p * ldb + j]);
      want[i * ldc + j] = alpha * sum + (beta == 0 ? 0.0 : beta * double(c[i * ldc + j]));
    }
  if (beta == 0)  // beta == 0 must not read C
    for (int64_t i = 0; i < s.m; ++i) c[i * ldc] = NAN;
  gemm<T>(ta, tb, s.m, s.n, s.k, T(alpha), a.data(), lda, b.data(), ldb, T(beta), c.data(), ldc);
  const std::string what = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                           std::to_string(s.k) + (ta ? " A^T" : "") + (tb ? " B^T" : "");
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const double w = want[i * ldc + j];
      // Padding columns beyond n must be left alone.
      const double t = j < s.n ? tol * (1 + std::abs(w)) * std::sqrt(double(s.k) + 1) : 0.0;
      ASSERT_NEAR(double(c[i * ldc + j]), w, t) << what << " at (" << i << "," << j << ")";
    }
}

const std::vector<Case> kCases = {{1, 1, 1}, {3, 5, 7}, {17, 9, 33}, {200, 40, 70},
                                  {32, 200, 300}, {2000, 32, 9}, {32, 9, 4000}};

TEST(GemmCpu, DoubleMatchesNaive) {
  unsigned seed = 1;
  for (const Case& s : kCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check<double>(s, ta, tb, 1.0, 0.0, 0, 1e-13, seed++);
        check<double>(s, ta, tb, -0.5, 1.0, 3, 1e-13, seed++);
        check<double>(s, ta, tb, 2.0, 0.25, 1, 1e-13, seed++);
      }
}

TEST(GemmCpu, FloatMatchesNaive) {
  unsigned seed = 1000;
  for (const Case& s : kCases)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        check<float>(s, ta, tb, 1.0, 0.0, 0, 1e-6, seed++);
        check<float>(s, ta, tb, 1.5, 1.0, 2, 1e-6, seed++);
      }
}

TEST(GemmCpu, EmptyDepthScalesC) {
  std::vector<double> c = {1, 2, 3, 4};
  gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.5, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{0.5, 1, 1.5, 2}));
  gemm<double>(false, false, 2, 2, 0, 1.0, nullptr, 1, nullptr, 2, 0.0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{0, 0, 0, 0}));
}

TEST(GemmCpu, RepeatedRunsAreBitwiseIdentical) {
  const int64_t m = 3000, n = 64, k = 288;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a(m * k), b(n * k), c1(m * n), c2(m * n);
  for (float& v : a) v = dist(rng);
  for (float& v : b) v = dist(rng);
  gemm<float>(false, true, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c1.data(), n);
  gemm<float>(false, true, m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c2.data(), n);
  EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)), 0);
}

// The product is cut by its shape alone, so 1, 2 and 3 threads give the same bits. Shapes for
// each cut: whole, bands of rows (a conv's forward), bands of columns, parts of the depth (a
// conv's weight gradient: k = pixels of the batch).
TEST(GemmCpu, SameBytesAtAnyThreadCount) {
  struct Shape {
    bool ta, tb;
    int64_t m, n, k;
  };
  const std::vector<Shape> shapes = {{false, false, 7, 5, 3},      {false, true, 3000, 64, 288},
                                     {false, false, 64, 3000, 288}, {true, false, 32, 288, 25600},
                                     {false, true, 64, 128, 1600}};
  for (const Shape& s : shapes) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<float> a(s.m * s.k), b(s.k * s.n);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    std::vector<std::vector<float>> c;
    for (int threads : {1, 2, 3}) {
      kiln::testing::ScopedThreads scope(threads);
      c.emplace_back(s.m * s.n, 0.5f);
      gemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 1.f, c.back().data(), s.n);
    }
    const std::string what = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    EXPECT_EQ(std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(float)), 0) << what << ": 1 vs 2 threads";
    EXPECT_EQ(std::memcmp(c[0].data(), c[2].data(), c[0].size() * sizeof(float)), 0) << what << ": 1 vs 3 threads";
  }
}

TEST(GemmCpu, BadLeadingDimensionThrows) {
  std::vector<double> a(6), b(6), c(4);
  EXPECT_THROW(gemm<double>(false, false, 2, 2, 3, 1.0, a.data(), 2, b.data(), 2, 0.0, c.data(), 2),
               Error);
  EXPECT_THROW(gemm<double>(false, false, 2, 2, 3, 1.0, a.data(), 3, b.data(), 2, 0.0, c.data(), 1),
               Error);
}

}  // namespace
}  // namespace kiln::cpu
