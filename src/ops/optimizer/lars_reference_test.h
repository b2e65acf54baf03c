#pragma once
// LARS written out in double, one parameter tensor at a time, as LarsUpdate in
// optimizer_contract.h states it: the reference the CPU and GPU tests of the update hold the
// kernels, the op and compiled programs to. Written from the rule, not from the kernels: a
// tensor's norms in double, its trust ratio, then the momentum step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <vector>

#include "ops/optimizer/lars_segment.h"

namespace kiln::testing {

struct LarsReference {
  double lr = 0.1, momentum = 0.9, weight_decay = 0, trust_coefficient = 0.001;

  // eta * ||w|| / (||g|| + wd * ||w||) when both norms are > 0, else 1.
  double trust(const double* w, const double* g, int64_t n) const {
    double w2 = 0, g2 = 0;
    for (int64_t i = 0; i < n; ++i) w2 += w[i] * w[i], g2 += g[i] * g[i];
    const double w_norm = std::sqrt(w2), g_norm = std::sqrt(g2);
    return w_norm > 0 && g_norm > 0 ? trust_coefficient * w_norm / (g_norm + weight_decay * w_norm) : 1.0;
  }

  // One step of one tensor of n elements: its parameters w, momentum buffer v and gradient g.
  // plain: momentum SGD without trust ratio or weight decay (a 1-D tensor under skip_1d).
  void step(double* w, double* v, const double* g, int64_t n, bool plain) const {
    const double t = plain ? 1.0 : trust(w, g, n), wd = plain ? 0.0 : weight_decay;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = momentum * v[i] + t * (g[i] + wd * w[i]);
      w[i] -= lr * v[i];
    }
  }

  // One step of every tensor of a region; elements in no segment stay as they are.
  void step(const std::vector<LarsSegment>& segments, std::vector<double>& w, std::vector<double>& v,
            const std::vector<double>& g) const {
    for (const LarsSegment& s : segments)
      step(w.data() + s.offset, v.data() + s.offset, g.data() + s.offset, s.length, s.plain);
  }
};

// The largest |got - want| / (1 + |want|), infinite where got is not finite and want is: a NaN
// slips through a plain running max (max(worst, NaN) keeps worst), so it is counted here.
template <class A>
double lars_err(const A& got, const std::vector<double>& want) {
  double worst = std::size(got) == want.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < want.size() && i < std::size(got); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!std::isfinite(g) && std::isfinite(want[i])) return INFINITY;
    if (std::isfinite(want[i])) worst = std::max(worst, std::abs(g - want[i]) / (1 + std::abs(want[i])));
  }
  return worst;
}

}  // namespace kiln::testing
