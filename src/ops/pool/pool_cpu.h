#pragma once
// Pooling kernels on the CPU, NHWC. Square windows: kernel k, stride s, zero-or-more padding p on
// every side; output size floor((H + 2p - k) / s) + 1 (PyTorch's floor mode).
//  - Max pooling treats padding as -inf, so the max always comes from a real element. Ties keep
//    the first element in raster order; a NaN wins (and then stays). argmax (U8) holds, per
//    output element, the winner's window index idx = kh * kernel + kw: its row and column inside
//    the window [oh*s - p, oh*s - p + k) x [ow*s - p, ow*s - p + k), padding included, so
//    dx[n, ih, iw, c] receives dy[n, oh, ow, c] at ih = oh*s - p + idx / k, iw = ow*s - p + idx % k.
//    A byte indexes at most 256 positions: the kernels that take argmax need kernel <=
//    kMaxPoolMaxKernel (the op wrappers and the max-pool layer check it).
//  - Average pooling counts padding in the divisor (count_include_pad=True, PyTorch's default);
//    in floor mode every window lies inside the padded image, so the divisor is always k*k.
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

struct PoolGeom {
  int64_t n, h, w, c;              // input NHWC
  int64_t kernel, stride, pad;
  int64_t ho, wo;                  // output spatial size
  // Builds the geometry of a pooling layer on input x (N, H, W, C). Throws kiln::Error naming
  // `kind` and `layer` when x is not 4-d, the window parameters are invalid, padding exceeds
  // half the kernel (as PyTorch), or the window does not fit.
  static PoolGeom make(const Shape& x, int kernel, int stride, int pad, const char* kind,
                       const std::string& layer);
  Shape out_shape() const { return {n, ho, wo, c}; }
};

// argmax may be nullptr (inference); when given, g.kernel must be <= kMaxPoolMaxKernel.
template <class T>
void maxpool_forward(const PoolGeom& g, const T* x, T* y, uint8_t* argmax);
// dx = 0, then every dy element is added at the input its window index names, in output raster
// order (argmax must come from maxpool_forward on the same geometry).
template <class T>
void maxpool_backward(const PoolGeom& g, const T* dy, const uint8_t* argmax, T* dx);

template <class T>
void avgpool_forward(const PoolGeom& g, const T* x, T* y);
template <class T>
void avgpool_backward(const PoolGeom& g, const T* dy, T* dx);

// x (n, hw, c) -> y (n, c) mean over hw, and its gradient dx = dy / hw broadcast over hw.
template <class T>
void gap_forward(const T* x, int64_t n, int64_t hw, int64_t c, T* y);
template <class T>
void gap_backward(const T* dy, int64_t n, int64_t hw, int64_t c, T* dx);

}  // namespace kiln::cpu
