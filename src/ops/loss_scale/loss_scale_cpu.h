#pragma once
// Loss-scaling kernels on the CPU (loss_scale_contract.h says what the ops are for). The scale
// update itself is loss_scale_rule.h, shared with the GPU.
#include <cstdint>

namespace kiln::cpu {

// Whether any of x[0, n) is inf or NaN.
template <class T>
bool any_nonfinite(int64_t n, const T* x);

}  // namespace kiln::cpu
