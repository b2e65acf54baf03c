#pragma once
// Pooling kernels on the CPU, NHWC. Square windows: kernel k, stride s, zero-or-more padding p on
// every side; output size floor((H + 2p - k) / s) + 1 (PyTorch's floor mode).
//  - Max pooling treats padding as -inf, so the max always comes from a real element.
//    argmax (I32) holds, per output element, PyTorch's convention: the spatial index
//    ih * W + iw of the winner inside its own image and channel (not a flat offset), so
//    dx[n, ih, iw, c] receives dy[n, oh, ow, c]. Ties keep the first element in raster order.
//  - Average pooling counts padding in the divisor (count_include_pad=True, PyTorch's default);
//    in floor mode every window lies inside the padded image, so the divisor is always k*k.
//  - Global average pooling: (N, H, W, C) -> (N, C) mean over H*W.
// Window sums accumulate in double; outputs are computed independently (no racy scatter), so
// results are bitwise identical whatever the thread count.
#include <cstdint>
#include <string>

#include "kiln/dtype.h"

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

// argmax may be nullptr (inference).
template <class T>
void maxpool_forward(const PoolGeom& g, const T* x, T* y, int32_t* argmax);
// dx = 0, then every dy element is added at its argmax (argmax must come from maxpool_forward).
template <class T>
void maxpool_backward(const PoolGeom& g, const T* dy, const int32_t* argmax, T* dx);

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
