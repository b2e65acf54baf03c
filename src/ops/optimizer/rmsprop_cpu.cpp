#include "ops/optimizer/rmsprop_cpu.h"

#include <cmath>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {
// Elements per task: below this many one thread finishes before another would wake.
constexpr int64_t kTaskElems = 1 << 15;
}  // namespace

template <class T>
void rmsprop_update(int64_t n, const T* grad, T* param, T* square_avg, T* momentum_buf, T* grad_avg,
                    const RmspropHyper& h) {
  const T lr = static_cast<T>(h.lr), alpha = static_cast<T>(h.alpha), one_minus_alpha = static_cast<T>(1 - h.alpha);
  const T eps = static_cast<T>(h.eps), wd = static_cast<T>(h.weight_decay), mom = static_cast<T>(h.momentum);
  const T unscale = static_cast<T>(h.unscale);
  const bool decay = h.weight_decay != 0;
  parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T g = grad[i] * unscale;
      if (decay) g += wd * param[i];
      const T v = alpha * square_avg[i] + one_minus_alpha * g * g;
      square_avg[i] = v;
      T d;
      if (grad_avg) {
        const T a = alpha * grad_avg[i] + one_minus_alpha * g;
        grad_avg[i] = a;
        d = std::sqrt(v - a * a) + eps;
      } else {
        d = std::sqrt(v) + eps;
      }
      if (momentum_buf) {
        const T b = mom * momentum_buf[i] + g / d;
        momentum_buf[i] = b;
        param[i] -= lr * b;
      } else {
        param[i] -= lr * (g / d);
      }
    }
  });
}

template void rmsprop_update<float>(int64_t, const float*, float*, float*, float*, float*, const RmspropHyper&);
template void rmsprop_update<double>(int64_t, const double*, double*, double*, double*, double*,
                                     const RmspropHyper&);

}  // namespace kiln::cpu
