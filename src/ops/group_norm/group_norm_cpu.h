#pragma once
// The group_norm family's CPU kernels (float and double) on kiln's pool. Every sum is taken in
// double over pieces cut by the extents alone (each sample's positions in runs of rows; core/
// parallel.h), the pieces' partial sums added in piece order, so any thread count gives the same
// bytes. Results are computed in double and rounded once to T.
#include "ops/group_norm/group_norm_geometry.h"

namespace kiln::cpu {

// y = (x - mean) * rstd * weight[c] + bias[c] with each (sample, group)'s mean and biased variance
// var (two passes: the mean, then the squared deviations from it), rstd = 1 / sqrt(var + eps).
// `mean` and `rstd` (n x groups, nullable) get the statistics rounded to T. y must not alias x.
template <class T>
void group_norm_forward(const GroupNormGeom& g, const T* x, const T* weight, const T* bias, double eps, T* y, T* mean,
                        T* rstd);

// From the forward's saved mean and rstd (as stored, in T): with xhat = (x - mean) * rstd and
// g = dy * weight[c], dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over each (sample, group)
// where dx is given (nullable); dweight[c] = sum of dy * xhat and dbias[c] = sum of dy over every
// sample and position. Outputs must not alias inputs.
template <class T>
void group_norm_backward(const GroupNormGeom& g, const T* dy, const T* x, const T* weight, const T* mean, const T* rstd,
                         T* dx, T* dweight, T* dbias);

}  // namespace kiln::cpu
