#pragma once
// The group_norm family's GPU kernels, the CPU's (group_norm_cpu.h) on the device: activations are
// F32, F16 or BF16, read as fp32, every statistic and result computed in fp32 and rounded once on
// store; weight, bias, the statistics and the parameters' gradients are fp32 (the program's
// masters). Each reduction runs in two stages whose partial sums live in `workspace`
// (group_norm_gpu::workspace(g).floats floats, declared by the lowering), every sum taken in an
// order fixed by the extents alone: no atomics, the same bits on every run. Only enqueues work on
// `stream` (no allocation, no host wait: a CUDA Graph can capture it); throws kiln::Error naming
// `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <string>

#include "kiln/dtype.h"
#include "ops/group_norm/group_norm_geometry.h"

namespace kiln::cuda {

// y = (x - mean) * rstd * weight[c] + bias[c] per (sample, group): the statistics from per-chunk
// mean and sum of squared deviations (Welford's update within a thread, Chan's pairwise
// combination across threads, chunks and channels). `mean` and `rstd` (n x groups, nullable
// together) receive them. y must not alias x.
void group_norm_forward(DType dtype, const GroupNormGeom& g, const void* x, const float* weight, const float* bias,
                        float eps, void* y, float* mean, float* rstd, float* workspace, cudaStream_t stream,
                        const std::string& where);

// From the forward's saved mean and rstd: dweight[c] = sum of dy * xhat, dbias[c] = sum of dy, and
// where dx is given (nullable) dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight.
// Outputs must not alias inputs.
void group_norm_backward(DType dtype, const GroupNormGeom& g, const void* dy, const void* x, const float* weight,
                         const float* mean, const float* rstd, void* dx, float* dweight, float* dbias,
                         float* workspace, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
