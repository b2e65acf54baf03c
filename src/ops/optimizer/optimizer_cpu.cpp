#include "ops/optimizer/optimizer_cpu.h"

#include <cmath>

#include "core/parallel.h"

namespace kiln {
namespace cpu {

namespace {
// Elements per task: below this many one thread finishes before another would wake.
constexpr int64_t kTaskElems = 1 << 15;
}  // namespace

template <class T>
void sgd_update(int64_t n, const T* grad, T* param, T* momentum_buf, const SgdHyper& h) {
  const T lr = static_cast<T>(h.lr), mom = static_cast<T>(h.momentum),
          wd = static_cast<T>(h.weight_decay), unscale = static_cast<T>(h.unscale);
  const bool use_buf = h.momentum != 0, decay = h.weight_decay != 0, nesterov = h.nesterov;
  parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T g = grad[i] * unscale;
      if (decay) g += wd * param[i];
      if (use_buf) {
        const T buf = mom * momentum_buf[i] + g;
        momentum_buf[i] = buf;
        g = nesterov ? g + mom * buf : buf;
      }
      param[i] -= lr * g;
    }
  });
}

template <class T>
void adamw_update(int64_t n, const T* grad, T* param, T* m, T* v, const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const T keep = static_cast<T>(1 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T one_minus_b1 = static_cast<T>(1 - h.beta1), one_minus_b2 = static_cast<T>(1 - h.beta2);
  const T step_size = static_cast<T>(h.lr / (1 - std::pow(h.beta1, t)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1 - std::pow(h.beta2, t)));
  const T eps = static_cast<T>(h.eps), unscale = static_cast<T>(h.unscale);
  parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T g = grad[i] * unscale;
      const T mi = b1 * m[i] + one_minus_b1 * g;
      const T vi = b2 * v[i] + one_minus_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const T denom = std::sqrt(vi) / bc2_sqrt + eps;
      param[i] = param[i] * keep - step_size * (mi / denom);
    }
  });
}

template void sgd_update<float>(int64_t, const float*, float*, float*, const SgdHyper&);
template void sgd_update<double>(int64_t, const double*, double*, double*, const SgdHyper&);
template void adamw_update<float>(int64_t, const float*, float*, float*, float*, const AdamWHyper&);
template void adamw_update<double>(int64_t, const double*, double*, double*, double*,
                                   const AdamWHyper&);

}  // namespace cpu
}  // namespace kiln
