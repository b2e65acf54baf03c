#pragma once
// BN_ACT_BWD's optional per-sample terms (conv_bn_act_contract.h: a squeeze-and-excitation gate and
// its pool's gradient) and BN_ACT_GATE_GRAD's gradient, checked the same way on every device: x is
// N x H x W x C, each N x 1 x 1 x C (or N x C) in x's dtype.
#include <cstdint>

#include "kiln/error.h"
#include "runtime/op_call.h"

namespace kiln {

// Checks that `t` holds one row of x's channels per sample of x; returns the samples N.
inline int64_t check_per_sample(const OpCall& call, const TensorArg& t, const TensorArg& x, const char* role) {
  const Shape& xs = x.shape();
  const Shape& ts = t.shape();
  const bool fits = xs.size() == 4 && !ts.empty() && ts.front() == xs[0] && ts.back() == xs[3] &&
                    numel(ts) == xs[0] * xs[3] && t.dtype() == x.dtype();
  if (!fits)
    fail("{}: the {} '{}' is {} {}; with x {} {} it must be {} x 1 x 1 x {} in {}", call.where(), role,
         t.spec->name, dtype_name(t.dtype()), shape_str(ts), dtype_name(x.dtype()), shape_str(xs),
         xs.empty() ? 0 : xs[0], xs.empty() ? 0 : xs.back(), dtype_name(x.dtype()));
  return xs[0];
}

// The samples N of x whose per-sample terms are given (1 when neither is).
template <class Args>
int64_t per_sample_terms(const OpCall& call, const Args& a) {
  int64_t n = 1;
  if (a.gate) n = check_per_sample(call, a.gate, a.x, "squeeze-and-excitation gate");
  if (a.dy_pooled) n = check_per_sample(call, a.dy_pooled, a.x, "pooled gradient");
  return n;
}

}  // namespace kiln
