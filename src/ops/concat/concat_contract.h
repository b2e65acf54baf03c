#pragma once
// Channel concatenation (torch.cat(xs, dim=1); kiln's activations are NHWC, so the channel axis is
// the last): the forward writes every input into its slice of channels of y in one op, and the
// backward gives each input its slice of dy with one copy op per input (the memory plan has no
// strided views, so the slices are copied).
#include <vector>

#include "runtime/op_contract.h"

namespace kiln {

// y[n, h, w, :] = xs[0][n, h, w, :], xs[1][n, h, w, :], ... side by side, in list order. Every
// input has y's batch, height and width; their channels add up to y's.
template <class T>
struct ConcatForward {
  static constexpr OpKind kind = OpKind::CONCAT_FWD;
  T y;
  std::vector<T> xs;
  template <class V>
  void fields(V& v) { v.out("y", y), v.in_list("xs", xs); }
};

// dx[n, h, w, c] = dy[n, h, w, channel_offset + c] for c below dx's channels: one input's
// gradient, the slice its forward wrote.
template <class T>
struct ConcatBackward {
  static constexpr OpKind kind = OpKind::CONCAT_BWD;
  T dy, dx;
  int channel_offset = 0;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.out("dx", dx), v.attr("channel_offset", channel_offset); }
};

}  // namespace kiln
