#include "ops/batchnorm/batchnorm_cpu.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/mask_bits.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Below this many elements threads cost more than they save; elementwise passes give each
// task about this many.
constexpr int64_t kParallelElems = 1 << 15;

// Rows per task of an elementwise pass over an M x C matrix (a multiple of 8, see bn_apply_relu).
int64_t rows_per_task(int64_t C) { return std::max<int64_t>(1, kParallelElems / std::max<int64_t>(C, 1) / 8) * 8; }

// Rows are split into a number of chunks that depends on M and C only (never on the thread
// count); each chunk sums into its own partial row and partials are added in chunk order, so
// every run adds the same numbers in the same order.
struct RowChunks {
  int64_t count = 1, rows = 1;
  RowChunks(int64_t M, int64_t C) {
    int64_t want = std::clamp<int64_t>(M * C / kParallelElems, 1, 64);
    rows = std::max<int64_t>(1, (M + want - 1) / want);
    count = std::max<int64_t>(1, (M + rows - 1) / rows);
  }
};

// out[k][c] = sum over rows m of what add_rows(m0, m1, acc) adds into acc[k][c] for the rows
// [m0, m1) of one chunk.
template <size_t K, class AddRows>
void reduce_rows(int64_t M, int64_t C, AddRows add_rows, std::array<double*, K> out) {
  RowChunks chunks(M, C);
  std::vector<double> partial(chunks.count * K * C, 0.0);
  parallel_for(chunks.count, [&](int64_t b) {
    std::array<double*, K> acc;
    for (size_t k = 0; k < K; ++k) acc[k] = partial.data() + (b * K + k) * C;
    add_rows(b * chunks.rows, std::min(M, (b + 1) * chunks.rows), acc);
  });
  for (size_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0.0;
      for (int64_t b = 0; b < chunks.count; ++b) s += partial[(b * K + k) * C + c];
      out[k][c] = s;
    }
}

template <class T>
std::vector<double> to_double(const T* v, int64_t n) {
  return std::vector<double>(v, v + n);
}

// Row kernels of the passes below. The length comes by value and every test is a select, not a
// branch: a byte store (the ReLU flags) may alias anything, so a bound read through a reference
// would be reloaded each iteration, and both would keep the loops from vectorizing.
template <class T>
void apply_relu_row(const T* x, const double* scale, const double* shift, int64_t n, T* y, uint8_t* passed) {
  if (passed) {
    for (int64_t c = 0; c < n; ++c) {
      const double v = x[c] * scale[c] + shift[c];
      passed[c] = v > 0.0;
    }
  }
  for (int64_t c = 0; c < n; ++c) {
    const double v = x[c] * scale[c] + shift[c];
    y[c] = v > 0.0 ? static_cast<T>(v) : T(0);
  }
}

// g = dy where the ReLU passed (on[c] = 1), else 0 (keep_if: core/mask_bits.h).
template <class T>
void backward_sums_row(const T* dy, const uint8_t* on, const T* x, const double* mean, const double* inv,
                       int64_t n, double* sum_g, double* sum_g_xhat) {
  for (int64_t c = 0; c < n; ++c) {
    const double g = keep_if(on[c], static_cast<double>(dy[c]));
    sum_g[c] += g;
    sum_g_xhat[c] += g * ((x[c] - mean[c]) * inv[c]);
  }
}

template <class T>
void backward_apply_row(const T* dy, const uint8_t* on, const T* x, const double* mean, const double* inv,
                        const double* k, const double* a, const double* b, int64_t n, T* dx) {
  for (int64_t c = 0; c < n; ++c) {
    const double g = keep_if(on[c], static_cast<double>(dy[c]));
    const double xhat = (x[c] - mean[c]) * inv[c];
    dx[c] = static_cast<T>(k[c] * (g - a[c] - xhat * b[c]));
  }
}

}  // namespace

template <class T>
void bn_channel_moments(const T* x, int64_t M, int64_t C, double* mean, double* var) {
  reduce_rows<1>(
      M, C,
      [&](int64_t m0, int64_t m1, const std::array<double*, 1>& acc) {
        for (int64_t m = m0; m < m1; ++m) {
          const T* row = x + m * C;
          for (int64_t c = 0; c < C; ++c) acc[0][c] += row[c];
        }
      },
      {mean});
  for (int64_t c = 0; c < C; ++c) mean[c] /= static_cast<double>(std::max<int64_t>(M, 1));
  reduce_rows<1>(
      M, C,
      [&](int64_t m0, int64_t m1, const std::array<double*, 1>& acc) {
        for (int64_t m = m0; m < m1; ++m) {
          const T* row = x + m * C;
          for (int64_t c = 0; c < C; ++c) {
            double d = row[c] - mean[c];
            acc[0][c] += d * d;
          }
        }
      },
      {var});
  for (int64_t c = 0; c < C; ++c) var[c] /= static_cast<double>(std::max<int64_t>(M, 1));
}

template <class T>
void bn_channel_sums(const T* x, int64_t M, int64_t C, double* sum, double* sqsum) {
  reduce_rows<2>(
      M, C,
      [&](int64_t m0, int64_t m1, const std::array<double*, 2>& acc) {
        for (int64_t m = m0; m < m1; ++m) {
          const T* row = x + m * C;
          for (int64_t c = 0; c < C; ++c) {
            double v = row[c];
            acc[0][c] += v;
            acc[1][c] += v * v;
          }
        }
      },
      {sum, sqsum});
}

template <class T>
void bn_finalize_moments(const double* mean, const double* var, int64_t count, const T* gamma,
                         const T* beta, double eps, double momentum, T* running_mean,
                         T* running_var, T* saved_mean, T* saved_inv_std, double* scale,
                         double* shift, int64_t C) {
  // PyTorch updates running_var with the unbiased estimate; count 1 has none.
  double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
  for (int64_t c = 0; c < C; ++c) {
    double inv_std = 1.0 / std::sqrt(var[c] + eps);
    saved_mean[c] = static_cast<T>(mean[c]);
    saved_inv_std[c] = static_cast<T>(inv_std);
    scale[c] = static_cast<double>(gamma[c]) * inv_std;
    shift[c] = static_cast<double>(beta[c]) - mean[c] * scale[c];
    running_mean[c] = static_cast<T>((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
    running_var[c] =
        static_cast<T>((1.0 - momentum) * running_var[c] + momentum * var[c] * unbias);
  }
}

template <class T>
void bn_finalize(const double* sum, const double* sqsum, int64_t count, const T* gamma,
                 const T* beta, double eps, double momentum, T* running_mean, T* running_var,
                 T* saved_mean, T* saved_inv_std, double* scale, double* shift, int64_t C) {
  std::vector<double> mean(C), var(C);
  double n = static_cast<double>(std::max<int64_t>(count, 1));
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = sum[c] / n;
    var[c] = std::max(sqsum[c] / n - mean[c] * mean[c], 0.0);  // rounding can go below 0
  }
  bn_finalize_moments(mean.data(), var.data(), count, gamma, beta, eps, momentum, running_mean,
                      running_var, saved_mean, saved_inv_std, scale, shift, C);
}

template <class T>
void bn_apply(const T* x, const double* scale, const double* shift, int64_t M, int64_t C, T* y) {
  parallel_blocks(M, rows_per_task(C), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const T* xr = x + m * C;
      T* yr = y + m * C;
      for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>(xr[c] * scale[c] + shift[c]);
    }
  });
}

template <class T>
void bn_apply_relu(const T* x, const double* scale, const double* shift, int64_t M, int64_t C,
                   T* y, uint8_t* bitmask) {
  // Runs of 8k rows cover exactly kC whole mask bytes, so tasks never share a byte. The flags
  // are packed once per task (core/mask_bits.h).
  parallel_blocks(M, rows_per_task(C), [&](int64_t m0, int64_t m1) {
    std::vector<uint8_t> flags(bitmask ? (m1 - m0) * C : 0);
    for (int64_t m = m0; m < m1; ++m)
      apply_relu_row(x + m * C, scale, shift, C, y + m * C, bitmask ? flags.data() + (m - m0) * C : nullptr);
    if (bitmask) pack_bits(flags.data(), (m1 - m0) * C, bitmask, m0 * C);
  });
}

template <class T>
void add_terms_row(const T* a, const T* b, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

namespace {
// Row m of the gradient: dy's own row, or with a second term their sum in `scratch` (C elements).
template <class T>
const T* gradient_row(const T* dy, const T* dy2, int64_t m, int64_t C, T* scratch) {
  if (!dy2) return dy + m * C;
  add_terms_row(dy + m * C, dy2 + m * C, C, scratch);
  return scratch;
}
}  // namespace

// g = dy where the ReLU passed (relu_bitmask's bit, unpacked per row), else 0: a select, not a
// branch (core/mask_bits.h), with the same values.
template <class T>
void bn_backward_reduce(const T* dy, const uint8_t* relu_bitmask, const T* x, const T* saved_mean,
                        const T* saved_inv_std, int64_t M, int64_t C, double* sum_dy,
                        double* sum_dy_xhat, const T* dy2) {
  std::vector<double> mean = to_double(saved_mean, C), inv = to_double(saved_inv_std, C);
  reduce_rows<2>(
      M, C,
      [&](int64_t m0, int64_t m1, const std::array<double*, 2>& acc) {
        std::vector<uint8_t> passed(C, 1);
        std::vector<T> summed(dy2 ? C : 0);
        const double *mu = mean.data(), *is = inv.data();
        double *sum_g = acc[0], *sum_g_xhat = acc[1];
        for (int64_t m = m0; m < m1; ++m) {
          if (relu_bitmask) unpack_bits(relu_bitmask, m * C, C, passed.data());
          backward_sums_row(gradient_row(dy, dy2, m, C, summed.data()), passed.data(), x + m * C, mu, is, C, sum_g,
                            sum_g_xhat);
        }
      },
      {sum_dy, sum_dy_xhat});
}

template <class T>
void bn_backward_apply(const T* dy, const uint8_t* relu_bitmask, const T* x, const T* gamma,
                       const T* saved_mean, const T* saved_inv_std, const double* sum_dy,
                       const double* sum_dy_xhat, int64_t M, int64_t C, T* dx, const T* dy2) {
  std::vector<double> mean = to_double(saved_mean, C), inv = to_double(saved_inv_std, C);
  std::vector<double> k(C), a(C), b(C);
  for (int64_t c = 0; c < C; ++c) {
    k[c] = static_cast<double>(gamma[c]) * inv[c];
    a[c] = sum_dy[c] / static_cast<double>(M);
    b[c] = sum_dy_xhat[c] / static_cast<double>(M);
  }
  parallel_blocks(M, rows_per_task(C), [&](int64_t m0, int64_t m1) {
    std::vector<uint8_t> passed(C, 1);
    std::vector<T> summed(dy2 ? C : 0);
    const double *mu = mean.data(), *is = inv.data(), *kc = k.data(), *ac = a.data(), *bc = b.data();
    for (int64_t m = m0; m < m1; ++m) {  // element by element: dx may alias dy or x
      if (relu_bitmask) unpack_bits(relu_bitmask, m * C, C, passed.data());
      backward_apply_row(gradient_row(dy, dy2, m, C, summed.data()), passed.data(), x + m * C, mu, is, kc, ac, bc, C,
                         dx + m * C);
    }
  });
}

template <class T>
void bn_forward_train(const T* x, const T* gamma, const T* beta, int64_t M, int64_t C, double eps,
                      double momentum, T* y, T* saved_mean, T* saved_inv_std, T* running_mean,
                      T* running_var) {
  std::vector<double> mean(C), var(C), scale(C), shift(C);
  bn_channel_moments(x, M, C, mean.data(), var.data());
  bn_finalize_moments(mean.data(), var.data(), M, gamma, beta, eps, momentum, running_mean,
                      running_var, saved_mean, saved_inv_std, scale.data(), shift.data(), C);
  bn_apply(x, scale.data(), shift.data(), M, C, y);
}

template <class T>
void bn_backward(const T* dy, const T* x, const T* gamma, const T* saved_mean,
                 const T* saved_inv_std, int64_t M, int64_t C, T* dx, T* dgamma, T* dbeta) {
  std::vector<double> sum_dy(C), sum_dy_xhat(C);
  bn_backward_reduce<T>(dy, nullptr, x, saved_mean, saved_inv_std, M, C, sum_dy.data(),
                        sum_dy_xhat.data());
  if (dx)
    bn_backward_apply<T>(dy, nullptr, x, gamma, saved_mean, saved_inv_std, sum_dy.data(),
                         sum_dy_xhat.data(), M, C, dx);
  for (int64_t c = 0; c < C; ++c) {
    dgamma[c] = static_cast<T>(sum_dy_xhat[c]);
    dbeta[c] = static_cast<T>(sum_dy[c]);
  }
}

template <class T>
void bn_inference(const T* x, const T* gamma, const T* beta, const T* running_mean,
                  const T* running_var, int64_t M, int64_t C, double eps, T* y) {
  std::vector<double> scale(C), shift(C);
  for (int64_t c = 0; c < C; ++c) {
    scale[c] = gamma[c] / std::sqrt(static_cast<double>(running_var[c]) + eps);
    shift[c] = beta[c] - running_mean[c] * scale[c];
  }
  bn_apply(x, scale.data(), shift.data(), M, C, y);
}

#define KILN_INSTANTIATE_BN(T)                                                                  \
  template void bn_channel_moments<T>(const T*, int64_t, int64_t, double*, double*);           \
  template void bn_channel_sums<T>(const T*, int64_t, int64_t, double*, double*);              \
  template void bn_finalize_moments<T>(const double*, const double*, int64_t, const T*,        \
                                       const T*, double, double, T*, T*, T*, T*, double*,      \
                                       double*, int64_t);                                      \
  template void bn_finalize<T>(const double*, const double*, int64_t, const T*, const T*,      \
                               double, double, T*, T*, T*, T*, double*, double*, int64_t);     \
  template void bn_apply<T>(const T*, const double*, const double*, int64_t, int64_t, T*);     \
  template void bn_apply_relu<T>(const T*, const double*, const double*, int64_t, int64_t, T*, \
                                 uint8_t*);                                                    \
  template void bn_backward_reduce<T>(const T*, const uint8_t*, const T*, const T*, const T*,  \
                                      int64_t, int64_t, double*, double*, const T*);           \
  template void bn_backward_apply<T>(const T*, const uint8_t*, const T*, const T*, const T*,   \
                                     const T*, const double*, const double*, int64_t, int64_t, \
                                     T*, const T*);                                            \
  template void add_terms_row<T>(const T*, const T*, int64_t, T*);                            \
  template void bn_forward_train<T>(const T*, const T*, const T*, int64_t, int64_t, double,    \
                                    double, T*, T*, T*, T*, T*);                               \
  template void bn_backward<T>(const T*, const T*, const T*, const T*, const T*, int64_t,      \
                               int64_t, T*, T*, T*);                                           \
  template void bn_inference<T>(const T*, const T*, const T*, const T*, const T*, int64_t,     \
                                int64_t, double, T*);
KILN_INSTANTIATE_BN(float)
KILN_INSTANTIATE_BN(double)
#undef KILN_INSTANTIATE_BN

}  // namespace kiln::cpu
