// The only translation unit that includes Eigen: its headers are slow to compile, so every
// kernel reaches Eigen's GEMM through kiln::cpu::gemm.
//
// Eigen's own OpenMP GEMM synchronizes its threads with spin-waits once per cache block;
// when the cores are shared (or the output is tiny, as in a conv's weight gradient) those
// waits can cost more than the multiply. So Eigen runs serially here and gemm splits C into
// one tile per thread instead: a single parallel region, no waiting inside it.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kiln/error.h"
#include "ops/common/gemm_cpu.h"

namespace kiln::cpu {
namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstView = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using View = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// A tile smaller than this many multiply-adds does not pay for waking a thread.
constexpr double kMinTileWork = 1 << 17;
// Tiles narrower than this make the packed operand's reuse too poor.
constexpr int64_t kMinTileWidth = 16;

void check_leading_dim(const char* name, int64_t ld, int64_t cols) {
  if (ld < std::max<int64_t>(cols, 1))
    fail("gemm: leading dimension {}={} is smaller than the {} columns it must span", name, ld,
         cols);
}

struct Gemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* c;
  int64_t ldc;
};

// C[rows r0..r1, cols c0..c1] += alpha * op(A) op(B), serially.
template <class T>
void multiply_tile(const Gemm& g, T alpha, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  // Row r of op(A) is row r of A, or column r of a transposed A; likewise columns of op(B).
  a += g.trans_a ? r0 : r0 * g.lda;
  b += g.trans_b ? c0 * g.ldb : c0;
  const int64_t m = r1 - r0, n = c1 - c0;
  View<T> C(static_cast<T*>(g.c) + r0 * g.ldc + c0, m, n, Eigen::OuterStride<>(g.ldc));
  ConstView<T> A(a, g.trans_a ? g.k : m, g.trans_a ? m : g.k, Eigen::OuterStride<>(g.lda));
  ConstView<T> B(b, g.trans_b ? n : g.k, g.trans_b ? g.k : n, Eigen::OuterStride<>(g.ldb));
  // Transposed maps are free views; Eigen's GEMM picks the right packing for each case.
  if (!g.trans_a && !g.trans_b)
    C.noalias() += alpha * A * B;
  else if (!g.trans_a)
    C.noalias() += alpha * A * B.transpose();
  else if (!g.trans_b)
    C.noalias() += alpha * A.transpose() * B;
  else
    C.noalias() += alpha * A.transpose() * B.transpose();
}

int tile_count(const Gemm& g, int64_t split_dim) {
  if (omp_in_parallel()) return 1;
  const double work = static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  int64_t tiles = std::min<int64_t>(omp_get_max_threads(), split_dim / kMinTileWidth);
  tiles = std::min<int64_t>(tiles, static_cast<int64_t>(work / kMinTileWork));
  return static_cast<int>(std::max<int64_t>(tiles, 1));
}

// Splits the longer side of C into one contiguous band per thread. Each element is computed
// by exactly one tile, so the result is reproducible for a given thread count.
template <class T>
void multiply_tiled(const Gemm& g, T alpha) {
  const bool split_rows = g.m >= g.n;
  const int64_t dim = split_rows ? g.m : g.n;
  const int tiles = tile_count(g, dim);
  if (tiles == 1) return multiply_tile<T>(g, alpha, 0, g.m, 0, g.n);
#pragma omp parallel for schedule(static, 1) num_threads(tiles)
  for (int t = 0; t < tiles; ++t) {
    const int64_t lo = dim * t / tiles, hi = dim * (t + 1) / tiles;
    if (split_rows)
      multiply_tile<T>(g, alpha, lo, hi, 0, g.n);
    else
      multiply_tile<T>(g, alpha, 0, g.m, lo, hi);
  }
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) fail("gemm: negative size m={} n={} k={}", m, n, k);
  check_leading_dim("lda", lda, trans_a ? m : k);
  check_leading_dim("ldb", ldb, trans_b ? k : n);
  check_leading_dim("ldc", ldc, n);
  if (m == 0 || n == 0) return;

  View<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  // Scaling C first (instead of letting Eigen fold beta in) keeps beta == 0 from reading C.
  if (beta == T(0))
    C.setZero();
  else if (beta != T(1))
    C *= beta;
  if (k == 0 || alpha == T(0)) return;
  multiply_tiled<T>(Gemm{trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc}, alpha);
}

template <class T>
void fill_rows(int64_t rows, int64_t cols, const T* bias, T* c) {
  for (int64_t i = 0; i < rows; ++i) std::copy(bias, bias + cols, c + i * cols);
}

template <class T>
void sum_rows(int64_t rows, int64_t cols, const T* a, T* out) {
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    const T* row = a + i * cols;
    for (int64_t j = 0; j < cols; ++j) acc[j] += row[j];
  }
  for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<T>(acc[j]);
}

template void fill_rows<float>(int64_t, int64_t, const float*, float*);
template void fill_rows<double>(int64_t, int64_t, const double*, double*);
template void sum_rows<float>(int64_t, int64_t, const float*, float*);
template void sum_rows<double>(int64_t, int64_t, const double*, double*);

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

}  // namespace kiln::cpu
