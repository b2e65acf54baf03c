#pragma once
// Dense matrix multiply on the CPU, the workhorse under conv and linear kernels.
#include <cstdint>

namespace kiln::cpu {

// Row-major BLAS-style GEMM: C (m x n) = alpha * op(A) * op(B) + beta * C, where op(A) is
// m x k and op(B) is k x n. With trans_a, A is stored k x m (leading dimension lda >= m);
// otherwise m x k (lda >= k); likewise B. When beta == 0, C is not read (it may hold garbage).
// Large products are cut into pieces that run on kiln's pool (core/parallel.h); the cut depends
// on m, n and k only, so the result's bits do not depend on the thread count.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// Bias helpers that go with GEMM-shaped kernels (conv, linear), on a row-major rows x cols
// matrix with contiguous rows.
// Sets every row of c to bias (so a following gemm with beta = 1 adds the product to it).
template <class T>
void fill_rows(int64_t rows, int64_t cols, const T* bias, T* c);
// out[j] = sum over i of a[i][j], accumulated in double in a fixed row order (deterministic).
template <class T>
void sum_rows(int64_t rows, int64_t cols, const T* a, T* out);

}  // namespace kiln::cpu
