#pragma once
// Pooling kernels on the CPU, NHWC. Square windows: kernel k, stride s, zero-or-more padding p on
// every side; output size floor((H + 2p - k) / s) + 1, or in ceil mode ceil(...) + 1 less a last
// window that would start past the input and its top/left padding (PyTorch's rule,
// pool_output_size). Window o spans [o*s - p, o*s - p + k); in ceil mode the last one may hang over
// the bottom/right edge, past the padding, and then reads only what exists.
//  - Max pooling treats padding as -inf, so the max always comes from a real element. Ties keep
//    the first element in raster order; a NaN wins (and then stays). argmax (U8) holds, per
//    output element, the winner's window index idx = kh * kernel + kw: its row and column inside
//    the window [oh*s - p, oh*s - p + k) x [ow*s - p, ow*s - p + k), padding included, so
//    dx[n, ih, iw, c] receives dy[n, oh, ow, c] at ih = oh*s - p + idx / k, iw = ow*s - p + idx % k.
//    A byte indexes at most 256 positions: the kernels that take argmax need kernel <=
//    kMaxPoolMaxKernel (the op wrappers and the max-pool layer check it).
//  - Average pooling divides by PyTorch's divisor (avgpool_divisor): with count_include_pad
//    (PyTorch's default) the window clipped to the padded input [-p, H + p), without it the input
//    cells the window holds. In floor mode with count_include_pad every window lies inside the
//    padded input, so the divisor is always k*k.
//  - Global average pooling: (N, H, W, C) -> (N, C) mean over H*W.
// Window sums accumulate in double; outputs are computed independently (no racy scatter), so
// results are bitwise identical whatever the thread count.
#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln {
// 16 * 16 = 256 window positions: the largest max-pool window a U8 argmax can index.
constexpr int kMaxPoolMaxKernel = 16;
}  // namespace kiln

namespace kiln::cpu {

// The number of windows along an axis of `in` cells padded by `pad` on both sides, PyTorch's:
// floor((in + 2 pad - kernel) / stride) + 1, or in ceil mode ceil(...) + 1, less one when that last
// window would start at or past the input's end, in the bottom/right padding or beyond
// ((out - 1) stride - pad >= in). Below 1 when no
// window fits (floor mode: a kernel larger than the padded input; ceil mode allows one that
// starts inside it, as PyTorch does).
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode);

struct PoolGeom {
  int64_t n, h, w, c;              // input NHWC
  int64_t kernel, stride, pad;
  int64_t ho, wo;                  // output spatial size
  // Builds the geometry of a pooling layer on input x (N, H, W, C). Throws kiln::Error naming
  // `kind` and `layer` when x is not 4-d, the window parameters are invalid, padding exceeds
  // half the kernel (as PyTorch), or no window fits.
  static PoolGeom make(const Shape& x, int kernel, int stride, int pad, const char* kind,
                       const std::string& layer, bool ceil_mode = false);
  Shape out_shape() const { return {n, ho, wo, c}; }
  // Whether every window ends inside the input (plus its padding when `padded`): false only in
  // ceil mode, where the last window may hang over.
  bool windows_end_inside(bool padded) const {
    const int64_t reach = padded ? pad : 0;
    return (ho - 1) * stride - pad + kernel <= h + reach && (wo - 1) * stride - pad + kernel <= w + reach;
  }
};

// The cells along one axis that average pooling's divisor counts for the window starting at
// `start` (padding included, so start >= -pad): with count_include_pad the window clipped to the
// padded input [-pad, size + pad), else the input cells [0, size) it holds (PyTorch's rule).
inline int64_t avgpool_extent(int64_t start, int64_t kernel, int64_t size, int64_t pad, bool count_include_pad) {
  const int64_t end = start + kernel < size + pad ? start + kernel : size + pad;
  if (count_include_pad) return end - start;
  return (end < size ? end : size) - (start > 0 ? start : 0);
}

// The divisor of average pooling's output (oh, ow).
inline int64_t avgpool_divisor(const PoolGeom& g, bool count_include_pad, int64_t oh, int64_t ow) {
  return avgpool_extent(oh * g.stride - g.pad, g.kernel, g.h, g.pad, count_include_pad) *
         avgpool_extent(ow * g.stride - g.pad, g.kernel, g.w, g.pad, count_include_pad);
}

// Whether every output's divisor is kernel * kernel: count_include_pad and no window hanging over
// the padding, or no padding and no window hanging over the input.
inline bool avgpool_divisor_is_window(const PoolGeom& g, bool count_include_pad) {
  return count_include_pad ? g.windows_end_inside(true) : g.pad == 0 && g.windows_end_inside(false);
}

// argmax may be nullptr (inference); when given, g.kernel must be <= kMaxPoolMaxKernel.
template <class T>
void maxpool_forward(const PoolGeom& g, const T* x, T* y, uint8_t* argmax);
// dx = 0, then every dy element is added at the input its window index names, in output raster
// order (argmax must come from maxpool_forward on the same geometry).
template <class T>
void maxpool_backward(const PoolGeom& g, const T* dy, const uint8_t* argmax, T* dx);

// y = the window's sum / avgpool_divisor; dx gathers dy / divisor from the covering outputs (one
// division of their sum by k*k where every divisor is that, avgpool_divisor_is_window).
template <class T>
void avgpool_forward(const PoolGeom& g, bool count_include_pad, const T* x, T* y);
template <class T>
void avgpool_backward(const PoolGeom& g, bool count_include_pad, const T* dy, T* dx);

// x (n, hw, c) -> y (n, c) mean over hw, and its gradient dx = dy / hw broadcast over hw.
template <class T>
void gap_forward(const T* x, int64_t n, int64_t hw, int64_t c, T* y);
template <class T>
void gap_backward(const T* dy, int64_t n, int64_t hw, int64_t c, T* dx);

}  // namespace kiln::cpu
