// The only translation unit that includes Eigen: its headers are slow to compile, so every
// kernel reaches Eigen's GEMM through kiln::cpu::gemm.
#include "ops/common/gemm_cpu.h"

#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "kiln/error.h"

namespace kiln::cpu {
namespace {

template <class T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstView = Eigen::Map<const RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using View = Eigen::Map<RowMajor<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

void check_leading_dim(const char* name, int64_t ld, int64_t cols) {
  if (ld < std::max<int64_t>(cols, 1))
    fail("gemm: leading dimension {}={} is smaller than the {} columns it must span", name, ld,
         cols);
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0) fail("gemm: negative size m={} n={} k={}", m, n, k);
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  check_leading_dim("lda", lda, a_cols);
  check_leading_dim("ldb", ldb, b_cols);
  check_leading_dim("ldc", ldc, n);
  if (m == 0 || n == 0) return;

  View<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  // Scaling C first (instead of letting Eigen fold beta in) keeps beta == 0 from reading C.
  if (beta == T(0))
    C.setZero();
  else if (beta != T(1))
    C *= beta;
  if (k == 0 || alpha == T(0)) return;

  ConstView<T> A(a, a_rows, a_cols, Eigen::OuterStride<>(lda));
  ConstView<T> B(b, b_rows, b_cols, Eigen::OuterStride<>(ldb));
  // Transposed maps are free views; Eigen's GEMM picks the right packing for each case.
  if (!trans_a && !trans_b)
    C.noalias() += alpha * A * B;
  else if (!trans_a && trans_b)
    C.noalias() += alpha * A * B.transpose();
  else if (trans_a && !trans_b)
    C.noalias() += alpha * A.transpose() * B;
  else
    C.noalias() += alpha * A.transpose() * B.transpose();
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
