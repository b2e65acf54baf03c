#pragma once
// The elementwise product, PyTorch's `a * b` on feature maps: `a` is an NHWC map and `b` either a
// map of the same shape or a per-channel gate of shape N x 1 x 1 x C broadcast over a's height
// and width (squeeze-and-excitation's `scale * input`). The layer puts the map first whichever
// input the gate was (a product does not depend on the order of its factors).
#include "runtime/op_contract.h"

namespace kiln {

// y[n, h, w, c] = a[n, h, w, c] * b[n, h, w, c], or * b[n, 0, 0, c] for a gate; y has a's shape.
template <class T>
struct MulForward {
  static constexpr OpKind kind = OpKind::MUL_FWD;
  T a, b, y;
  template <class V>
  void fields(V& v) { v.in("a", a), v.in("b", b), v.out("y", y); }
};

// da = dy * b (b broadcast as in the forward) and db = dy * a, a gate's summed over height and
// width in a fixed order (fp32 for fp16/bf16, double on the CPU). Either gradient may be absent (an
// input the data batch feeds, or a frozen layer's output, wants none), never both.
template <class T>
struct MulBackward {
  static constexpr OpKind kind = OpKind::MUL_BWD;
  T dy, a, b, da, db;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("a", a), v.in("b", b), v.out("da", da, kOptional), v.out("db", db, kOptional);
  }
};

}  // namespace kiln
