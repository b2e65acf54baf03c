#pragma once
// The layer_norm family's CPU kernels (float and double): each row's statistics, the normalized
// output and the gradients, in double, each result rounded once. Work is cut into pieces by the
// problem's size alone (core/parallel.h), so any thread count gives the same bytes.
#include <cstdint>

namespace kiln::cpu {

// rows rows of c values each (an NHWC map's N*H*W positions of C channels, or N rows of F).
struct LayerNormGeom {
  int64_t rows = 0, c = 0;
  int64_t elements() const { return rows * c; }
};

// y = (x - mean) * rstd * weight + bias per row, mean and var = sum((x - mean)^2) / c in two
// passes, rstd = 1 / sqrt(var + eps); mean and rstd saved per row where given (both or neither).
template <class T>
void layer_norm_forward(const LayerNormGeom& g, const T* x, const T* weight, const T* bias, double eps, T* y, T* mean,
                        T* rstd);

// From the saved mean and rstd: dx where given (per row, from the row's sums of g = dy * weight and
// of g * xhat), dweight = sum over rows of dy * xhat and dbias = sum of dy where given, summed in
// double over chunks of rows fixed by the extents, the chunks' sums added in order.
template <class T>
void layer_norm_backward(const LayerNormGeom& g, const T* dy, const T* x, const T* weight, const T* mean,
                         const T* rstd, T* dx, T* dweight, T* dbias);

}  // namespace kiln::cpu
