#pragma once
// Pooling: max (with the argmax its backward routes through), average (padding counted in the
// divisor, as PyTorch's default) and global average over H x W.
#include "runtime/op_contract.h"

namespace kiln {

// The window every sliding pool op carries.
struct PoolWindow {
  int kernel = 0, stride = 1, padding = 0;
  template <class V>
  void fields(V& v) { v.attr("kernel", kernel), v.attr("stride", stride), v.attr("padding", padding); }
};

template <class T>
struct MaxPoolForward {
  static constexpr OpKind kind = OpKind::MAXPOOL_FWD;
  // argmax: U8 per output element, the window index kh * kernel + kw of its maximum (pool_cpu.h);
  // a byte, not PyTorch's I32 spatial index, so this tensor (live from forward to backward) is
  // a quarter of the size. Hence kernel <= kMaxPoolMaxKernel (pool_cpu.h).
  T x, y, argmax;
  PoolWindow window;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), v.out("argmax", argmax), window.fields(v); }
};

template <class T>
struct MaxPoolBackward {
  static constexpr OpKind kind = OpKind::MAXPOOL_BWD;
  T dy, argmax, dx;
  PoolWindow window;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.in("argmax", argmax), v.out("dx", dx), window.fields(v); }
};

template <class T>
struct MaxPoolInference {
  static constexpr OpKind kind = OpKind::MAXPOOL_INF;
  T x, y;
  PoolWindow window;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), window.fields(v); }
};

template <class T>
struct AvgPoolForward {
  static constexpr OpKind kind = OpKind::AVGPOOL_FWD;
  T x, y;
  PoolWindow window;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), window.fields(v); }
};

template <class T>
struct AvgPoolBackward {
  static constexpr OpKind kind = OpKind::AVGPOOL_BWD;
  T dy, dx;
  PoolWindow window;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.out("dx", dx), window.fields(v); }
};

template <class T>
struct GlobalAvgPoolForward {
  static constexpr OpKind kind = OpKind::GAP_FWD;
  T x, y;  // y: (N, C)
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y); }
};

template <class T>
struct GlobalAvgPoolBackward {
  static constexpr OpKind kind = OpKind::GAP_BWD;
  T dy, dx;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.out("dx", dx); }
};

}  // namespace kiln
