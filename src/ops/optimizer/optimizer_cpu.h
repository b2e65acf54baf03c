#pragma once
// Fused optimizer updates on the CPU. The compiler lays parameters, gradients and each
// optimizer-state slot out as contiguous regions in the same order, so one loop over flat
// arrays updates every parameter of the model at once.
//
// Semantics are PyTorch's (torch.optim.SGD with dampening 0, torch.optim.AdamW; LARS as
// optimizer_contract.h states it), computed per element in T with the step's scalar factors
// formed in double. With loss scaling each gradient is first multiplied by `unscale` (1 / the loss
// scale, exact for PyTorch's power-of-two scales), as GradScaler.unscale_ does; skipping a step is
// the op's decision (optimizer_ops_cpu.cpp).
#include <cstdint>
#include <vector>

#include "ops/optimizer/lars_segment.h"

namespace kiln::cpu {

struct SgdHyper {
  double lr = 0, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  double unscale = 1;  // gradients are multiplied by this as they are read
};

// g = grad * unscale + weight_decay * p; buf = momentum * buf + g; g = nesterov ? g + momentum * buf : buf;
// p -= lr * g. Buffers start at zero, which reproduces PyTorch's first step (buf = g). With
// momentum == 0 there is no buffer (momentum_buf may be nullptr) and p -= lr * g.
template <class T>
void sgd_update(int64_t n, const T* grad, T* param, T* momentum_buf, const SgdHyper& h);

struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;  // 1-based number of this update, for bias correction
  double unscale = 1;  // gradients are multiplied by this as they are read
};

// g = grad * unscale; p *= 1 - lr * wd; m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2;
// p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
template <class T>
void adamw_update(int64_t n, const T* grad, T* param, T* m, T* v, const AdamWHyper& h);

struct LarsHyper {
  double lr = 0, momentum = 0, weight_decay = 0, trust_coefficient = 0.001;
  double unscale = 1;  // gradients are multiplied by this as they are read
};

// LARS over the parameter tensors `segments` of the region (LarsUpdate in optimizer_contract.h
// states the rule). The norms of each tensor come first, summed in T over pieces whose bounds
// depend on the segments alone and then in piece order, so any thread count gives the same bytes;
// then the update. Elements in no segment are not touched.
template <class T>
void lars_update(const std::vector<LarsSegment>& segments, const T* grad, T* param, T* momentum_buf,
                 const LarsHyper& h);

}  // namespace kiln::cpu
