#pragma once
// RMSprop written out in double, as torch.optim.RMSprop's documentation states the algorithm
// (RmspropUpdate in optimizer_contract.h): the reference the CPU and GPU tests hold the kernels,
// the op and compiled programs to. Written from the rule, not from the kernels.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::testing {

struct RmspropReference {
  double lr = 0.01, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false;

  // One step of n elements: parameters w, square average v, momentum buffer b (read only with
  // momentum), gradient average a (read only when centered) and gradient g.
  void step(double* w, double* v, double* b, double* a, const double* g, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      const double gi = weight_decay != 0 ? g[i] + weight_decay * w[i] : g[i];
      v[i] = alpha * v[i] + (1 - alpha) * gi * gi;
      double d;
      if (centered) {
        a[i] = alpha * a[i] + (1 - alpha) * gi;
        d = std::sqrt(v[i] - a[i] * a[i]) + eps;
      } else {
        d = std::sqrt(v[i]) + eps;
      }
      if (momentum > 0) {
        b[i] = momentum * b[i] + gi / d;
        w[i] -= lr * b[i];
      } else {
        w[i] -= lr * gi / d;
      }
    }
  }
};

// The settings the tests run: PyTorch's defaults, momentum with weight decay, centered, and all
// of it at once.
struct RmspropCase {
  const char* name;
  double alpha, eps, weight_decay, momentum;
  bool centered;
};
inline const std::vector<RmspropCase>& rmsprop_cases() {
  static const std::vector<RmspropCase> cases = {
      {"defaults", 0.99, 1e-8, 0, 0, false},
      {"momentum and weight decay", 0.9, 1e-8, 0.01, 0.9, false},
      {"centered", 0.9, 1e-6, 0, 0, true},
      {"centered with momentum and weight decay", 0.99, 1e-3, 0.01, 0.5, true},
  };
  return cases;
}

// The reference of a case with the hyper-parameters an op carries (fp32 attributes) and `lr`.
inline RmspropReference rmsprop_reference(const RmspropCase& c, float lr) {
  RmspropReference r;
  r.lr = lr, r.alpha = float(c.alpha), r.eps = float(c.eps), r.weight_decay = float(c.weight_decay);
  r.momentum = float(c.momentum), r.centered = c.centered;
  return r;
}

}  // namespace kiln::testing
