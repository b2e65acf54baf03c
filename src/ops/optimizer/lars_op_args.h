#pragma once
// What LARS_UPDATE's glue on either backend (optimizer_ops_cpu.cpp, optimizer_ops_cuda.cpp) takes
// from its bound arguments: the hyper-parameters, checked, and the parameter tensors as segments
// of the region, recovered from the views' specs (optimizer_contract.h says why the views).
#include <cmath>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "ops/optimizer/lars_segment.h"
#include "ops/optimizer/optimizer_contract.h"
#include "runtime/op_call.h"

namespace kiln {

// momentum and weight decay >= 0 and finite, the trust coefficient finite and > 0 (the lars
// family's settings have the ranges, lars_optimizer.cpp; compile() refuses the options before any
// op runs).
inline void check_lars_hyper(const std::string& where, const LarsUpdate<TensorArg>& a) {
  if (!(a.momentum >= 0) || !std::isfinite(a.momentum) || !(a.weight_decay >= 0) || !std::isfinite(a.weight_decay))
    fail("{}: momentum ({}) and weight_decay ({}) must be finite and >= 0; fix the optimizer options", where,
         a.momentum, a.weight_decay);
  if (!(a.trust_coefficient > 0) || !std::isfinite(a.trust_coefficient))
    fail("{}: trust_coefficient {} must be finite and > 0; fix the optimizer options (kiln train: --lars-eta)",
         where, a.trust_coefficient);
}

// One segment per parameter view, in order: its element range from TensorSpec::alias_offset and
// its length, plain when skip_1d and the view has one dimension. Views must lie in `params`, in
// increasing order and without overlap; empty ones are left out.
inline std::vector<LarsSegment> lars_segments(const OpCall& call, const LarsUpdate<TensorArg>& a) {
  const std::vector<TensorSpec>& specs = call.program.tensors;
  const int64_t n = a.params.numel();
  const size_t element = dtype_size(a.params.dtype());
  std::vector<LarsSegment> segments;
  int64_t end = 0;  // of the previous view
  for (const TensorArg& t : a.tensors) {
    const TensorSpec& s = *t.spec;
    const bool view =
        s.alias_of >= 0 && size_t(s.alias_of) < specs.size() && &specs[size_t(s.alias_of)] == a.params.spec;
    if (!view || s.dtype != a.params.dtype() || s.alias_offset % element != 0)
      fail("{}: tensor '{}' is not a view into the parameter region '{}' in its dtype ({}); LARS takes each "
           "parameter tensor from its view there (recompile the program)",
           call.where(), s.name, a.params.spec->name, dtype_name(a.params.dtype()));
    const int64_t offset = int64_t(s.alias_offset / element), length = t.numel();
    if (offset < end || offset + length > n)
      fail("{}: tensor '{}' covers elements [{}, {}) of the parameter region's {}, after a tensor ending at {}; "
           "the views must lie inside the region, in order and without overlapping (recompile the program)",
           call.where(), s.name, offset, offset + length, n, end);
    end = offset + length;
    if (length > 0) segments.push_back({offset, length, a.skip_1d && s.shape.size() == 1});
  }
  return segments;
}

}  // namespace kiln
