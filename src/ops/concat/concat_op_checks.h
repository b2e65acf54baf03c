#pragma once
// What both backends check before their copies (concat_ops_cpu.cpp, concat_ops_cuda.cpp): a program
// whose tensors do not fit the op is an error naming the op, its layer and the tensor, never a copy
// out of bounds.
#include <cstdint>

#include "ops/common/op_args.h"
#include "ops/concat/concat_contract.h"
#include "runtime/op_call.h"

namespace kiln::concat_checks {

// N*H*W of a feature map: the rows of channels the copies walk.
inline int64_t rows(const TensorArg& t) { return t.shape()[0] * t.shape()[1] * t.shape()[2]; }
inline int64_t channels(const TensorArg& t) { return t.shape()[3]; }

// `t` is an NHWC feature map with the batch, height, width and dtype of `like`.
inline void expect_rows_like(const OpCall& call, const TensorArg& t, const char* role, const TensorArg& like) {
  const Shape& s = t.shape();
  const Shape& l = like.shape();
  if (s.size() != 4 || l.size() != 4 || s[0] != l[0] || s[1] != l[1] || s[2] != l[2] || t.dtype() != like.dtype())
    fail("{}: {} '{}' is {} {} but needs the batch, height, width and dtype of '{}' ({} {}); recompile the program",
         call.where(), role, t.spec->name, dtype_name(t.dtype()), shape_str(s), like.spec->name,
         dtype_name(like.dtype()), shape_str(l));
  if (overlaps(t, like))
    fail("{}: '{}' and '{}' share memory; the copy needs them apart (recompile the program)", call.where(),
         t.spec->name, like.spec->name);
}

inline void check_forward(const OpCall& call, const ConcatForward<TensorArg>& a) {
  int64_t total = 0;
  for (const TensorArg& x : a.xs) {
    expect_rows_like(call, x, "input", a.y);
    total += channels(x);
  }
  if (total != channels(a.y))
    fail("{}: the inputs have {} channels in all but output '{}' has {} ({}); recompile the program", call.where(),
         total, a.y.spec->name, channels(a.y), shape_str(a.y.shape()));
}

inline void check_backward(const OpCall& call, const ConcatBackward<TensorArg>& a) {
  expect_rows_like(call, a.dx, "input gradient", a.dy);
  if (a.channel_offset < 0 || a.channel_offset + channels(a.dx) > channels(a.dy))
    fail("{}: channels [{}, {}) of '{}' are outside its {} channels; recompile the program", call.where(),
         a.channel_offset, a.channel_offset + channels(a.dx), a.dy.spec->name, channels(a.dy));
}

}  // namespace kiln::concat_checks
