#pragma once
// BN_ACT_BWD's optional pooled gradient (conv_bn_act_contract.h), checked the same way on every
// device: x is N x H x W x C, dy_pooled N x 1 x 1 x C (or N x C) in x's dtype.
#include <cstdint>

#include "kiln/error.h"
#include "ops/conv_bn_act/conv_bn_act_contract.h"
#include "runtime/op_call.h"

namespace kiln {

// The samples N dy_pooled holds a row of per-channel values for (1 without it).
inline int64_t pooled_samples(const OpCall& call, const BnActBackward<TensorArg>& a) {
  if (!a.dy_pooled) return 1;
  const Shape& x = a.x.shape();
  const Shape& p = a.dy_pooled.shape();
  const bool fits = x.size() == 4 && !p.empty() && p.front() == x[0] && p.back() == x[3] &&
                    numel(p) == x[0] * x[3] && a.dy_pooled.dtype() == a.x.dtype();
  if (!fits)
    fail("{}: the pooled gradient '{}' is {} {}; with x {} {} it must be {} x 1 x 1 x {} in {}", call.where(),
         a.dy_pooled.spec->name, dtype_name(a.dy_pooled.dtype()), shape_str(p), dtype_name(a.x.dtype()), shape_str(x),
         x.empty() ? 0 : x[0], x.empty() ? 0 : x.back(), dtype_name(a.x.dtype()));
  return x[0];
}

}  // namespace kiln
