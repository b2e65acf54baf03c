#pragma once
// The layer_scale family's CPU kernels (float and double): rows of C channels scaled by one factor
// a channel, and the gradients. Every loop is cut into pieces by the problem's size alone
// (core/parallel.h), so any thread count gives the same bytes.
#include <cstdint>

namespace kiln::cpu {

// x as the ops see it: `rows` rows (N * H * W for a map, N for flat features) of `c` channels.
struct LayerScaleGeom {
  int64_t rows = 0, c = 0;
  int64_t elements() const { return rows * c; }
};

// y[r, c] = x[r, c] * gamma[c].
template <class T>
void layer_scale_forward(const LayerScaleGeom& g, const T* x, const T* gamma, T* y);

// dx = dy * gamma where dx is given; dgamma[c] = sum over rows of dy[r, c] * x[r, c], products and
// sum in double, in an order fixed by the extents (chunks of rows summed in order, their sums added
// in chunk order), rounded once. Outputs must not alias inputs.
template <class T>
void layer_scale_backward(const LayerScaleGeom& g, const T* dy, const T* x, const T* gamma, T* dx, T* dgamma);

}  // namespace kiln::cpu
