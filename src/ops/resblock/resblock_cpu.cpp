#include "ops/resblock/resblock_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/mask_bits.h"
#include "core/parallel.h"
#include "ops/batchnorm/batchnorm_cpu.h"

namespace kiln::cpu {
namespace {

// Rows per task of an elementwise pass: about 32K elements, and a multiple of 8 rows so that a
// task's rows cover whole mask bytes and no two tasks write the same byte.
int64_t rows_per_task(int64_t C) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(C, 1) / 8) * 8; }

template <class T>
void to_type(const std::vector<double>& v, T* out) {
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<T>(v[i]);
}

}  // namespace

template <class T>
void conv_bn_forward(const ConvGeom& g, const ConvBnForwardTensors<T>& t, double eps, double momentum) {
  const int64_t M = g.n * g.ho * g.wo, C = g.k;
  conv_fwd<T>(g, t.x, t.w, nullptr, t.conv_out);
  std::vector<double> sum(C), sqsum(C), scale(C), shift(C);
  bn_channel_sums(t.conv_out, M, C, sum.data(), sqsum.data());
  bn_finalize(sum.data(), sqsum.data(), M, t.gamma, t.beta, eps, momentum, t.running_mean, t.running_var,
              t.saved_mean, t.saved_inv_std, scale.data(), shift.data(), C);
  to_type(scale, t.scale);
  to_type(shift, t.shift);
}

template <class T>
void conv_bn_inference(const ConvGeom& g, const T* x, const T* w, const T* gamma, const T* beta,
                       const T* running_mean, const T* running_var, double eps, T* conv_out, T* scale, T* shift) {
  for (int64_t c = 0; c < g.k; ++c) {
    const double s = static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(running_var[c]) + eps);
    scale[c] = static_cast<T>(s);
    shift[c] = static_cast<T>(beta[c] - running_mean[c] * s);
  }
  conv_fwd<T>(g, x, w, nullptr, conv_out);
}

template <class T>
void conv_bn_backward(const ConvGeom& g, const T* dconv, const T* x, const T* w, T* dw, T* dx) {
  conv_wgrad<T>(g, dconv, x, dw, nullptr);  // before dgrad: dx may overwrite x
  if (dx) conv_dgrad<T>(g, dconv, w, dx);
}

// One row of the join: y = relu(a * scale_a + shift_a + shortcut), shortcut = b * scale_b +
// shift_b (scale_b given) or b. The length comes by value and the test is a select, which the
// vectorizer takes.
template <class T>
void join_row(const T* a, const T* scale_a, const T* shift_a, const T* b, const T* scale_b, const T* shift_b,
              int64_t n, T* y) {
  if (scale_b) {
    for (int64_t c = 0; c < n; ++c) {
      const T v = a[c] * scale_a[c] + shift_a[c] + (b[c] * scale_b[c] + shift_b[c]);
      y[c] = v > T(0) ? v : T(0);
    }
  } else {
    for (int64_t c = 0; c < n; ++c) {
      const T v = a[c] * scale_a[c] + shift_a[c] + b[c];
      y[c] = v > T(0) ? v : T(0);
    }
  }
}

template <class T>
void bn_add_relu_forward(const T* a, const T* scale_a, const T* shift_a, const T* b, const T* scale_b,
                         const T* shift_b, int64_t M, int64_t C, T* y, uint8_t* bitmask) {
  // The mask is y > 0, which holds exactly where the sum is > 0 (NaN fails: y = 0, bit 0), packed
  // once per task from the task's rows of y (core/mask_bits.h).
  parallel_blocks(M, rows_per_task(C), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) join_row(a + m * C, scale_a, shift_a, b + m * C, scale_b, shift_b, C, y + m * C);
    if (bitmask) pack_positive(y + m0 * C, (m1 - m0) * C, bitmask, m0 * C);
  });
}

template <class T>
void bn_add_relu_backward(const BnAddReluBackwardTensors<T>& t, int64_t M, int64_t C) {
  // All reductions first, then the passes that write: no output is read afterwards.
  std::vector<double> sum_g(C), sum_g_xhat_a(C), sum_g_b(C), sum_g_xhat_b(C);
  bn_backward_reduce(t.dy, t.bitmask, t.a, t.saved_mean_a, t.saved_inv_std_a, M, C, sum_g.data(),
                     sum_g_xhat_a.data(), t.dy2);
  if (t.b)
    bn_backward_reduce(t.dy, t.bitmask, t.b, t.saved_mean_b, t.saved_inv_std_b, M, C, sum_g_b.data(),
                       sum_g_xhat_b.data(), t.dy2);
  bn_backward_apply(t.dy, t.bitmask, t.a, t.gamma_a, t.saved_mean_a, t.saved_inv_std_a, sum_g.data(),
                    sum_g_xhat_a.data(), M, C, t.da, t.dy2);
  to_type(sum_g_xhat_a, t.dgamma_a);
  to_type(sum_g, t.dbeta_a);
  if (t.b) {
    bn_backward_apply(t.dy, t.bitmask, t.b, t.gamma_b, t.saved_mean_b, t.saved_inv_std_b, sum_g_b.data(),
                      sum_g_xhat_b.data(), M, C, t.db, t.dy2);
    to_type(sum_g_xhat_b, t.dgamma_b);
    to_type(sum_g_b, t.dbeta_b);
  } else if (t.db) {
    parallel_blocks(M * C, int64_t{1} << 15, [&](int64_t i0, int64_t i1) {
      std::vector<uint8_t> passed(i1 - i0);
      unpack_bits(t.bitmask, i0, i1 - i0, passed.data());
      T* db = t.db + i0;
      const T* g = t.dy + i0;
      if (t.dy2) {  // the two terms summed into db itself, then masked there (db shares no storage with them)
        add_terms_row(t.dy + i0, t.dy2 + i0, i1 - i0, db);
        g = db;
      }
      keep_where(passed.data(), g, i1 - i0, db);
    });
  }
}

#define KILN_RESBLOCK_INSTANTIATE(T)                                                                           \
  template void conv_bn_forward<T>(const ConvGeom&, const ConvBnForwardTensors<T>&, double, double);          \
  template void conv_bn_inference<T>(const ConvGeom&, const T*, const T*, const T*, const T*, const T*,       \
                                     const T*, double, T*, T*, T*);                                            \
  template void conv_bn_backward<T>(const ConvGeom&, const T*, const T*, const T*, T*, T*);                   \
  template void bn_add_relu_forward<T>(const T*, const T*, const T*, const T*, const T*, const T*, int64_t,   \
                                       int64_t, T*, uint8_t*);                                                 \
  template void bn_add_relu_backward<T>(const BnAddReluBackwardTensors<T>&, int64_t, int64_t);
KILN_RESBLOCK_INSTANTIATE(float)
KILN_RESBLOCK_INSTANTIATE(double)
#undef KILN_RESBLOCK_INSTANTIATE

}  // namespace kiln::cpu
