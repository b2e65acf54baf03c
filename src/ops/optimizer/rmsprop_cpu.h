#pragma once
// The fused RMSprop update on the CPU (RmspropUpdate in optimizer_contract.h states the rule, as
// torch.optim.RMSprop has it): one loop over the flat regions updates every parameter of the
// model, per element in T with the step's scalars formed in double. With loss scaling each
// gradient is first multiplied by `unscale` (1 / the loss scale); skipping a step is the op's
// decision (optimizer_ops_cpu.cpp).
#include <cstdint>

namespace kiln::cpu {

struct RmspropHyper {
  double lr = 0, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false;
  double unscale = 1;  // gradients are multiplied by this as they are read
};

// g = grad * unscale + weight_decay * p; v = alpha * v + (1 - alpha) * g^2;
// centered: a = alpha * a + (1 - alpha) * g, d = sqrt(v - a^2) + eps; else d = sqrt(v) + eps;
// momentum > 0: b = momentum * b + g / d, p -= lr * b; else p -= lr * g / d.
// `momentum_buf` is nullptr exactly when momentum is 0, `grad_avg` exactly when not centered.
template <class T>
void rmsprop_update(int64_t n, const T* grad, T* param, T* square_avg, T* momentum_buf, T* grad_avg,
                    const RmspropHyper& h);

}  // namespace kiln::cpu
