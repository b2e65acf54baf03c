// The only translation unit that includes Eigen: its headers are slow to compile, so every
// kernel reaches Eigen's GEMM through kiln::cpu::gemm.
//
// Eigen runs serially here (its own OpenMP GEMM spin-waits between cache blocks, which costs
// more than the multiply when cores are shared) and gemm cuts the product into pieces that run
// on kiln's pool. The pieces depend on m, n and k only: Eigen's blocking and the rows or columns
// that fall into its edge paths change the order of a dot product's additions, so a cut that
// followed the thread count would change the result's bits with it.
#define EIGEN_DONT_PARALLELIZE
#include <Eigen/Core>

#include <algorithm>
#include <vector>

#include "core/parallel.h"
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

// A piece of about this many multiply-adds (tens of microseconds) is worth a task.
constexpr double kPieceWork = 1 << 18;
// At most this many pieces: enough to keep many threads busy and balanced.
constexpr int64_t kMaxPieces = 64;
// A band narrower than this repacks the other operand (all of it, for every band) too often for
// the work it does: at 64 rows, 64 bands cost a conv's forward 10-15% on one thread.
constexpr int64_t kMinBandWidth = 256;
// Splitting the depth: at least this many products per part, at most this many parts, and at
// most this many elements of partial results in all.
constexpr int64_t kMinPartDepth = 256;
constexpr int64_t kMaxDepthParts = 16;
constexpr int64_t kMaxPartialElems = int64_t{1} << 22;

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

// How a product is cut: into bands of C's rows or columns (each element of C computed whole by
// one piece), or, when the depth k dwarfs C (a weight gradient: k = pixels of the batch), into
// parts of the depth, each summed into its own partial C, the partials added in part order.
struct Cut {
  enum Kind { Whole, RowBands, ColBands, DepthParts } kind = Whole;
  int64_t pieces = 1;
};

Cut plan_cut(int64_t m, int64_t n, int64_t k) {
  const double work = double(m) * double(n) * double(k);
  const int64_t wanted = std::clamp<int64_t>(int64_t(work / kPieceWork), 1, kMaxPieces);
  if (wanted == 1) return {};
  const int64_t side = std::max(m, n);
  if (k >= 4 * side) {
    const int64_t parts = std::min({wanted, k / kMinPartDepth, kMaxDepthParts, kMaxPartialElems / (m * n)});
    if (parts >= 2) return {Cut::DepthParts, parts};
  }
  const int64_t bands = std::min(wanted, side / kMinBandWidth);
  if (bands < 2) return {};
  return {m >= n ? Cut::RowBands : Cut::ColBands, bands};
}

// out[0..r1-r0, 0..c1-c0] += alpha * op(A)[r0:r1, k0:k1] * op(B)[k0:k1, c0:c1], serially;
// out has leading dimension ldo.
template <class T>
void multiply_block(const Gemm& g, T alpha, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t k0,
                    int64_t k1, T* out, int64_t ldo) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  // Row r of op(A) is row r of A, or column r of a transposed A; likewise columns of op(B).
  a += g.trans_a ? k0 * g.lda + r0 : r0 * g.lda + k0;
  b += g.trans_b ? c0 * g.ldb + k0 : k0 * g.ldb + c0;
  const int64_t m = r1 - r0, n = c1 - c0, k = k1 - k0;
  View<T> C(out, m, n, Eigen::OuterStride<>(ldo));
  ConstView<T> A(a, g.trans_a ? k : m, g.trans_a ? m : k, Eigen::OuterStride<>(g.lda));
  ConstView<T> B(b, g.trans_b ? n : k, g.trans_b ? k : n, Eigen::OuterStride<>(g.ldb));
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

// Grow-only scratch for partial results, one per thread (gemm calls on a thread run one at a
// time), so a step does not allocate and page-fault it again.
template <class T>
T* partial_buffer(int64_t count) {
  static thread_local std::vector<T> buffer;
  if (buffer.size() < size_t(count)) buffer.resize(size_t(count));
  return buffer.data();
}

template <class T>
void multiply_depth_parts(const Gemm& g, T alpha, int64_t parts) {
  const int64_t mn = g.m * g.n;
  T* partial = partial_buffer<T>(parts * mn);
  parallel_for(parts, [&](int64_t p) {
    T* out = partial + p * mn;
    std::fill(out, out + mn, T(0));
    multiply_block<T>(g, T(1), 0, g.m, 0, g.n, g.k * p / parts, g.k * (p + 1) / parts, out, g.n);
  });
  T* c = static_cast<T*>(g.c);
  parallel_blocks(g.m, std::max<int64_t>(1, 16384 / g.n), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        T sum = partial[i * g.n + j];
        for (int64_t p = 1; p < parts; ++p) sum += partial[p * mn + i * g.n + j];
        c[i * g.ldc + j] += alpha * sum;
      }
  });
}

template <class T>
void multiply(const Gemm& g, T alpha) {
  const Cut cut = plan_cut(g.m, g.n, g.k);
  T* c = static_cast<T*>(g.c);
  switch (cut.kind) {
    case Cut::Whole:
      return multiply_block<T>(g, alpha, 0, g.m, 0, g.n, 0, g.k, c, g.ldc);
    case Cut::RowBands:
      return parallel_for(cut.pieces, [&](int64_t t) {
        const int64_t r0 = g.m * t / cut.pieces, r1 = g.m * (t + 1) / cut.pieces;
        multiply_block<T>(g, alpha, r0, r1, 0, g.n, 0, g.k, c + r0 * g.ldc, g.ldc);
      });
    case Cut::ColBands:
      return parallel_for(cut.pieces, [&](int64_t t) {
        const int64_t c0 = g.n * t / cut.pieces, c1 = g.n * (t + 1) / cut.pieces;
        multiply_block<T>(g, alpha, 0, g.m, c0, c1, 0, g.k, c + c0, g.ldc);
      });
    case Cut::DepthParts:
      return multiply_depth_parts<T>(g, alpha, cut.pieces);
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
  multiply<T>(Gemm{trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc}, alpha);
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
