#pragma once
// Naive double reference of conv -> batchnorm(train) -> relu, written from the definitions
// (loops over every index, nothing shared with the kernels under test): the CBR op tests
// (src/ops/cbr/) and the GPU block's float64 check (tests/gpu/cbr_float64_check.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/conv/conv_cpu.h"
#include "support/cpu_test_util.h"

namespace kiln::cbr_test {

struct Geometry {
  int64_t n, h, w, c, k, kernel, stride, pad;
  int64_t ho() const { return (h + 2 * pad - kernel) / stride + 1; }
  int64_t wo() const { return (w + 2 * pad - kernel) / stride + 1; }
  int64_t rows() const { return n * ho() * wo(); }
  int64_t x_numel() const { return n * h * w * c; }
  int64_t w_numel() const { return k * kernel * kernel * c; }
  int64_t y_numel() const { return rows() * k; }
  cpu::ConvGeom conv() const {
    return cpu::ConvGeom::make({n, h, w, c}, {k, kernel, kernel, c}, static_cast<int>(stride),
                               static_cast<int>(pad));
  }
};

using testing::cast;
using testing::mixed_err;
using testing::uniform_vec;

// Direct convolution by definition: NHWC input, KRSC filters, zero padding.
struct Conv {
  const Geometry& g;
  // Calls f(x_index, w_index, y_index) for every multiply-add of the convolution.
  template <class F>
  void for_each_tap(F f) const {
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t oh = 0; oh < g.ho(); ++oh)
        for (int64_t ow = 0; ow < g.wo(); ++ow)
          for (int64_t k = 0; k < g.k; ++k)
            for (int64_t r = 0; r < g.kernel; ++r)
              for (int64_t s = 0; s < g.kernel; ++s) {
                const int64_t ih = oh * g.stride - g.pad + r, iw = ow * g.stride - g.pad + s;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                for (int64_t c = 0; c < g.c; ++c)
                  f(((n * g.h + ih) * g.w + iw) * g.c + c,
                    ((k * g.kernel + r) * g.kernel + s) * g.c + c,
                    ((n * g.ho() + oh) * g.wo() + ow) * g.k + k);
              }
  }
};

struct Forward {
  std::vector<double> z, y, pre, mean, var, inv_std, running_mean, running_var;
  std::vector<uint8_t> mask;  // byte per element, as the unfused ReLU stores it
};

inline Forward reference_forward(const Geometry& g, const std::vector<double>& x,
                                 const std::vector<double>& w, const std::vector<double>& gamma,
                                 const std::vector<double>& beta, std::vector<double> running_mean,
                                 std::vector<double> running_var, double eps, double momentum) {
  Forward f;
  f.z.assign(g.y_numel(), 0.0);
  Conv{g}.for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { f.z[yi] += x[xi] * w[wi]; });
  const int64_t m = g.rows();
  f.mean.assign(g.k, 0.0);
  f.var.assign(g.k, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < g.k; ++k) f.mean[k] += f.z[i * g.k + k] / m;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < g.k; ++k) f.var[k] += std::pow(f.z[i * g.k + k] - f.mean[k], 2) / m;
  f.inv_std.resize(g.k);
  for (int64_t k = 0; k < g.k; ++k) {
    f.inv_std[k] = 1.0 / std::sqrt(f.var[k] + eps);
    running_mean[k] = (1 - momentum) * running_mean[k] + momentum * f.mean[k];
    running_var[k] = (1 - momentum) * running_var[k] + momentum * f.var[k] * m / (m - 1.0);
  }
  f.running_mean = running_mean;
  f.running_var = running_var;
  f.pre.resize(g.y_numel());
  f.y.resize(g.y_numel());
  f.mask.resize(g.y_numel());
  for (int64_t i = 0; i < g.y_numel(); ++i) {
    const int64_t k = i % g.k;
    f.pre[i] = gamma[k] * (f.z[i] - f.mean[k]) * f.inv_std[k] + beta[k];
    f.y[i] = std::max(f.pre[i], 0.0);
    f.mask[i] = f.pre[i] > 0 ? 1 : 0;
  }
  return f;
}

struct Backward {
  std::vector<double> dx, dw, dgamma, dbeta, dz;
};

inline Backward reference_backward(const Geometry& g, const Forward& f,
                                   const std::vector<double>& dy, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& gamma) {
  Backward b;
  const int64_t m = g.rows();
  std::vector<double> gy(g.y_numel()), xhat(g.y_numel());
  b.dgamma.assign(g.k, 0.0);
  b.dbeta.assign(g.k, 0.0);
  for (int64_t i = 0; i < g.y_numel(); ++i) {
    const int64_t k = i % g.k;
    gy[i] = f.mask[i] ? dy[i] : 0.0;
    xhat[i] = (f.z[i] - f.mean[k]) * f.inv_std[k];
    b.dbeta[k] += gy[i];
    b.dgamma[k] += gy[i] * xhat[i];
  }
  b.dz.resize(g.y_numel());
  for (int64_t i = 0; i < g.y_numel(); ++i) {
    const int64_t k = i % g.k;
    b.dz[i] = gamma[k] * f.inv_std[k] / m * (m * gy[i] - b.dbeta[k] - xhat[i] * b.dgamma[k]);
  }
  b.dx.assign(g.x_numel(), 0.0);
  b.dw.assign(g.w_numel(), 0.0);
  Conv{g}.for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) {
    b.dx[xi] += b.dz[yi] * w[wi];
    b.dw[wi] += b.dz[yi] * x[xi];
  });
  return b;
}

}  // namespace kiln::cbr_test
