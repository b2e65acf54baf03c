#pragma once
// Convolution kernels on the CPU: NHWC activations, KRSC filters, im2col + GEMM.
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cpu {

struct ConvGeom {
  int64_t n, h, w, c;   // input NHWC
  int64_t k, r, s;      // filters KRSC (C shared with input)
  int64_t stride, pad;  // same in both spatial dims
  int64_t ho, wo;       // output spatial size
  // Builds the geometry from x (N,H,W,C) and w (K,R,S,C) shapes; throws kiln::Error on mismatch.
  static ConvGeom make(const Shape& x, const Shape& w, int stride, int pad);
};

template <class T>
void conv_fwd(const ConvGeom& g, const T* x, const T* w, const T* bias /*nullable*/, T* y);
template <class T>
void conv_dgrad(const ConvGeom& g, const T* dy, const T* w, T* dx);
template <class T>
void conv_wgrad(const ConvGeom& g, const T* dy, const T* x, T* dw, T* dbias /*nullable*/);

}  // namespace kiln::cpu
