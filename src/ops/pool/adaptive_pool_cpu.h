#pragma once
// Adaptive average pooling on the CPU, NHWC, PyTorch's AdaptiveAvgPool2d: output cell (i, j) of an
// out_h x out_w map averages input rows [floor(i H / out_h), ceil((i + 1) H / out_h)) and columns
// [floor(j W / out_w), ceil((j + 1) W / out_w)). The ranges overlap where the size does not divide
// (7 -> 3: rows [0, 3), [2, 5), [4, 7)) and repeat rows where the output is larger (5 -> 7).
// Window sums accumulate in double; every output and every input gradient is written by one task
// in a fixed order, so results do not depend on the thread count.
#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cpu {

// The first and one past the last input cell of output cell i along an axis of `in` input cells
// and `out` output cells. The same two functions with in and out swapped give the output cells
// whose ranges hold input cell i (adaptive_pool_cpu.cpp's backward gathers through them).
inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return i * in / out; }
inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

struct AdaptivePoolGeom {
  int64_t n, h, w, c;  // input NHWC
  int64_t ho, wo;      // output spatial size
  // The geometry of x (N, H, W, C) pooled to y (N, ho, wo, C); throws kiln::Error naming `where`
  // when either is not 4-d, their batch or channels differ, or a size is not positive.
  static AdaptivePoolGeom make(const Shape& x, const Shape& y, const std::string& where);
  Shape in_shape() const { return {n, h, w, c}; }
  Shape out_shape() const { return {n, ho, wo, c}; }
  // The input cells output (oh, ow) averages.
  int64_t cells(int64_t oh, int64_t ow) const {
    return (adaptive_end(oh, h, ho) - adaptive_start(oh, h, ho)) * (adaptive_end(ow, w, wo) - adaptive_start(ow, w, wo));
  }
};

template <class T>
void adaptive_avgpool_forward(const AdaptivePoolGeom& g, const T* x, T* y);
// dx[ih, iw] = sum over the outputs whose ranges hold (ih, iw) of dy / that output's cell count.
template <class T>
void adaptive_avgpool_backward(const AdaptivePoolGeom& g, const T* dy, T* dx);

}  // namespace kiln::cpu
