#include "ops/conv_bn_act/bn_act_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/batchnorm/batchnorm_cpu.h"
#include "ops/conv_bn_act/bn_act_functions.h"

namespace kiln::cpu {
namespace {

// Rows a block of the elementwise passes takes: about 16K elements, so a block stays in cache.
int64_t rows_per_block(int64_t channels) { return std::max<int64_t>(1, 16384 / channels); }

// y = F(x * scale + shift) row by row; the activation is chosen once, outside the loops, so each
// function's loop is its own (and vectorizes where the function does).
template <class T>
void apply(const T* x, const T* scale, const T* shift, int64_t M, int64_t C, int activation, double alpha, T* y) {
  bn_act::visit(activation, [&](auto fn) {
    using F = decltype(fn);
    const T a = static_cast<T>(alpha);
    parallel_blocks(M, rows_per_block(C), [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const T* xr = x + m * C;
        T* yr = y + m * C;
        for (int64_t c = 0; c < C; ++c) yr[c] = F::value(xr[c] * scale[c] + shift[c], a);
      }
    });
    return 0;
  });
}

}  // namespace

template <class T>
void bn_act_forward(const BnActForwardTensors<T>& t, int64_t M, int64_t C, int activation, double alpha, double eps,
                    double momentum) {
  std::vector<double> sum(static_cast<size_t>(C)), sqsum(static_cast<size_t>(C)), scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  bn_channel_sums(t.x, M, C, sum.data(), sqsum.data());
  bn_finalize(sum.data(), sqsum.data(), M, t.gamma, t.beta, eps, momentum, t.running_mean, t.running_var,
              t.saved_mean, t.saved_inv_std, scale.data(), shift.data(), C);
  for (int64_t c = 0; c < C; ++c) t.scale[c] = static_cast<T>(scale[c]), t.shift[c] = static_cast<T>(shift[c]);
  apply(t.x, t.scale, t.shift, M, C, activation, alpha, t.y);
}

template <class T>
void bn_act_backward(const BnActBackwardTensors<T>& t, int64_t M, int64_t C, int activation, double alpha) {
  bn_act::visit(activation, [&](auto fn) {
    using F = decltype(fn);
    const T a = static_cast<T>(alpha);
    // The terms as the unfused layers' backward ops computed them: the multiply's dy * gate
    // (mul_cpu.cpp), the pool's dy / (H W) (pool_cpu.cpp), added to it (a GRAD_SUM).
    const int64_t rows_per_sample = M / t.samples;
    const double area = static_cast<double>(rows_per_sample);
    parallel_blocks(M, rows_per_block(C), [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const T *xr = t.x + m * C, *dyr = t.dy + m * C;
        const T* gate = t.gate ? t.gate + (m / rows_per_sample) * C : nullptr;
        const T* pooled = t.dy_pooled ? t.dy_pooled + (m / rows_per_sample) * C : nullptr;
        T* gr = t.dx + m * C;
        if (!gate && !pooled) {  // most layers: the plain loop, which the compiler vectorizes
          for (int64_t c = 0; c < C; ++c) gr[c] = dyr[c] * F::derivative(xr[c] * t.scale[c] + t.shift[c], a);
          continue;
        }
        for (int64_t c = 0; c < C; ++c) {
          T d = gate ? dyr[c] * gate[c] : dyr[c];
          if (pooled) d = d + static_cast<T>(static_cast<double>(pooled[c]) / area);
          gr[c] = d * F::derivative(xr[c] * t.scale[c] + t.shift[c], a);
        }
      }
    });
    return 0;
  });
  std::vector<double> sum_g(static_cast<size_t>(C)), sum_g_xhat(static_cast<size_t>(C));
  bn_backward_reduce(t.dx, nullptr, t.x, t.saved_mean, t.saved_inv_std, M, C, sum_g.data(), sum_g_xhat.data());
  bn_backward_apply(t.dx, nullptr, t.x, t.gamma, t.saved_mean, t.saved_inv_std, sum_g.data(), sum_g_xhat.data(), M,
                    C, t.dx);
  for (int64_t c = 0; c < C; ++c) t.dbeta[c] = static_cast<T>(sum_g[c]), t.dgamma[c] = static_cast<T>(sum_g_xhat[c]);
}

template <class T>
void bn_act_gate_gradient(const T* dy, const T* x, const T* scale, const T* shift, int64_t N, int64_t M, int64_t C,
                          int activation, double alpha, T* db) {
  constexpr int64_t kRun = 64;  // channels one piece sums: an image's accumulators stay in cache
  const int64_t rows = M / N, runs = (C + kRun - 1) / kRun;
  bn_act::visit(activation, [&](auto fn) {
    using F = decltype(fn);
    const T a = static_cast<T>(alpha);
    parallel_for(N * runs, [&](int64_t piece) {
      const int64_t img = piece / runs, k0 = (piece % runs) * kRun, k1 = std::min(C, k0 + kRun);
      double acc[kRun] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = (img * rows + r) * C;
        for (int64_t k = k0; k < k1; ++k) {
          const T y = F::value(x[row + k] * scale[k] + shift[k], a);  // as apply() stored it
          acc[k - k0] += static_cast<double>(dy[row + k]) * static_cast<double>(y);
        }
      }
      for (int64_t k = k0; k < k1; ++k) db[img * C + k] = static_cast<T>(acc[k - k0]);
    });
    return 0;
  });
}

template <class T>
void bn_act_inference(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                      int64_t M, int64_t C, int activation, double alpha, double eps, T* y) {
  std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double s = static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(running_var[c]) + eps);
    scale[size_t(c)] = static_cast<T>(s);
    shift[size_t(c)] = static_cast<T>(static_cast<double>(beta[c]) - static_cast<double>(running_mean[c]) * s);
  }
  apply(x, scale.data(), shift.data(), M, C, activation, alpha, y);
}

#define KILN_BN_ACT_INSTANTIATE(T)                                                                              \
  template void bn_act_forward<T>(const BnActForwardTensors<T>&, int64_t, int64_t, int, double, double, double); \
  template void bn_act_backward<T>(const BnActBackwardTensors<T>&, int64_t, int64_t, int, double);              \
  template void bn_act_gate_gradient<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, int,  \
                                        double, T*);                                                              \
  template void bn_act_inference<T>(const T*, const T*, const T*, const T*, const T*, int64_t, int64_t, int,     \
                                    double, double, T*);
KILN_BN_ACT_INSTANTIATE(float)
KILN_BN_ACT_INSTANTIATE(double)
#undef KILN_BN_ACT_INSTANTIATE

}  // namespace kiln::cpu
