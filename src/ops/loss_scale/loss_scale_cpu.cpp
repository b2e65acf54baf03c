#include "ops/loss_scale/loss_scale_cpu.h"

#include <cmath>

namespace kiln::cpu {

template <class T>
void scale_in_place(int64_t n, T* x, T scale) {
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

template <class T>
bool any_nonfinite(int64_t n, const T* x) {
  // No early exit: the usual answer is "none", found only at the end, and the branch-free loop
  // vectorizes.
  bool found = false;
  for (int64_t i = 0; i < n; ++i) found |= !std::isfinite(x[i]);
  return found;
}

template void scale_in_place<float>(int64_t, float*, float);
template void scale_in_place<double>(int64_t, double*, double);
template bool any_nonfinite<float>(int64_t, const float*);
template bool any_nonfinite<double>(int64_t, const double*);

}  // namespace kiln::cpu
