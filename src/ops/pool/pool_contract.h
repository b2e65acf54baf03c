#pragma once
// Pooling: max (with the argmax its backward routes through), average (PyTorch's divisor, padding
// counted or not), global average over H x W and adaptive average to a fixed output size.
#include "runtime/op_contract.h"

namespace kiln {

// The window every sliding pool op carries; ceil_mode: PyTorch's, the output size rounded up
// (cpu::pool_output_size).
struct PoolWindow {
  int kernel = 0, stride = 1, padding = 0;
  bool ceil_mode = false;
  template <class V>
  void fields(V& v) {
    v.attr("kernel", kernel), v.attr("stride", stride), v.attr("padding", padding), v.attr("ceil_mode", ceil_mode);
  }
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

// count_include_pad: PyTorch's, whether padding counts in the divisor (cpu::avgpool_divisor).
template <class T>
struct AvgPoolForward {
  static constexpr OpKind kind = OpKind::AVGPOOL_FWD;
  T x, y;
  PoolWindow window;
  bool count_include_pad = true;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), window.fields(v), v.attr("count_include_pad", count_include_pad); }
};

template <class T>
struct AvgPoolBackward {
  static constexpr OpKind kind = OpKind::AVGPOOL_BWD;
  T dy, dx;
  PoolWindow window;
  bool count_include_pad = true;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.out("dx", dx), window.fields(v), v.attr("count_include_pad", count_include_pad);
  }
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

// PyTorch's AdaptiveAvgPool2d: y (N, out_h, out_w, C), whose shape sets the output size; output
// cell (i, j) averages x's rows [floor(i H / out_h), ceil((i + 1) H / out_h)) and its columns
// alike (adaptive_pool_cpu.h). The layer lowers a 1x1 output to GAP_FWD / GAP_BWD instead (the same
// memory as their (N, C)) and an output of the input's size to a view.
template <class T>
struct AdaptiveAvgPoolForward {
  static constexpr OpKind kind = OpKind::ADAPTIVE_AVGPOOL_FWD;
  T x, y;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y); }
};

template <class T>
struct AdaptiveAvgPoolBackward {
  static constexpr OpKind kind = OpKind::ADAPTIVE_AVGPOOL_BWD;
  T dy, dx;
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.out("dx", dx); }
};

}  // namespace kiln
