#pragma once
// What both backends check before they copy (channel_ops_cpu.cpp, channel_ops_cuda.cpp): a program
// whose tensors do not fit the op is an error naming the op, its layer and the tensor, never a copy
// out of bounds.
#include <algorithm>
#include <cstdint>

#include "ops/channel/channel_contract.h"
#include "ops/common/op_args.h"
#include "runtime/op_call.h"

namespace kiln::channel_checks {

// The rows of channels a tensor holds: N*H*W for an NHWC map, N for flat N x F features.
inline int64_t rows(const TensorArg& t) {
  int64_t r = 1;
  for (size_t d = 0; d + 1 < t.shape().size(); ++d) r *= t.shape()[d];
  return r;
}
inline int64_t channels(const TensorArg& t) { return t.shape().back(); }

// `t` is, like `like`, an NHWC map or N x F features with like's leading extents and dtype, apart
// from it in memory.
inline void expect_rows_like(const OpCall& call, const TensorArg& t, const char* role, const TensorArg& like) {
  const Shape& s = t.shape();
  const Shape& l = like.shape();
  const bool ranked = (s.size() == 4 || s.size() == 2) && s.size() == l.size();
  if (!ranked || !std::equal(s.begin(), s.end() - 1, l.begin()) || t.dtype() != like.dtype())
    fail("{}: {} '{}' is {} {} but needs the leading extents (N,H,W or N), rank and dtype of '{}' ({} {}); "
         "recompile the program",
         call.where(), role, t.spec->name, dtype_name(t.dtype()), shape_str(s), like.spec->name,
         dtype_name(like.dtype()), shape_str(l));
  if (overlaps(t, like))
    fail("{}: '{}' and '{}' share memory; the copy needs them apart (recompile the program)", call.where(),
         t.spec->name, like.spec->name);
}

// y (or dx) is an NHWC map of x's shape and dtype, apart from it, whose channels `groups` divides.
inline void check_shuffle(const OpCall& call, const TensorArg& in, const TensorArg& out, int groups) {
  expect_like(call, out, "output", in);
  expect_rows_like(call, out, "output", in);
  if (in.shape().size() != 4 || groups < 1 || channels(in) % groups != 0)
    fail("{}: '{}' is {}; the shuffle needs an NHWC map whose channels its {} groups divide; recompile the program",
         call.where(), in.spec->name, shape_str(in.shape()), groups);
}

inline void check_slice_forward(const OpCall& call, const ChannelSliceForward<TensorArg>& f) {
  expect_rows_like(call, f.y, "output", f.x);
  if (f.start < 0 || f.start + channels(f.y) > channels(f.x))
    fail("{}: channels [{}, {}) are outside the {} channels of '{}'; recompile the program", call.where(), f.start,
         f.start + channels(f.y), channels(f.x), f.x.spec->name);
}

// Returns the channels the slices' gradients cover together.
inline int64_t check_slice_backward(const OpCall& call, const ChannelSliceBackward<TensorArg>& f) {
  int64_t covered = 0;
  for (const TensorArg& dy : f.dys) {
    expect_rows_like(call, dy, "slice gradient", f.dx);
    covered += channels(dy);
  }
  if (f.start < 0 || f.start + covered > channels(f.dx))
    fail("{}: the slices' gradients fill channels [{}, {}), outside the {} channels of '{}'; recompile the program",
         call.where(), f.start, f.start + covered, channels(f.dx), f.dx.spec->name);
  return covered;
}

}  // namespace kiln::channel_checks
