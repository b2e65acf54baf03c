#pragma once
// Checks and names shared by the op wrappers (the contracts' adapter, runtime/op_call.h, already
// rejects missing tensors): errors name the layer and the op.
#include <cstddef>
#include <string>

#include "runtime/op_call.h"

namespace kiln {

inline std::string layer_name(const OpCall& call) {
  return call.op.layer >= 0 ? call.layer().name : std::string(op_kind_name(call.op.kind));
}

// Prefix for errors raised outside the wrapper (dtype dispatch).
inline std::string layer_label(const OpCall& call) { return "layer '" + layer_name(call) + "'"; }

// `t` must have the shape and dtype of `like` (elementwise ops: outputs and gradients match their
// input); the error names the op, its layer and both tensors.
inline void expect_like(const OpCall& call, const TensorArg& t, const char* role, const TensorArg& like) {
  if (t.shape() != like.shape() || t.dtype() != like.dtype())
    fail("{}: {} '{}' is {} {} but must match '{}' ({} {})", call.where(), role, t.spec->name, dtype_name(t.dtype()),
         shape_str(t.shape()), like.spec->name, dtype_name(like.dtype()), shape_str(like.shape()));
}

// Whether two bound tensors share any byte (false when either is absent): ops that run passes
// over slices or on two streams check what the memory plan may have placed over what.
inline bool overlaps(const TensorArg& a, const TensorArg& b) {
  if (!a || !b) return false;
  const auto* pa = static_cast<const std::byte*>(a.data);
  const auto* pb = static_cast<const std::byte*>(b.data);
  return pa < pb + b.spec->bytes() && pb < pa + a.spec->bytes();
}

}  // namespace kiln
