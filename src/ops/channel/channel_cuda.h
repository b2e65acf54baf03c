#pragma once
// The channel family's GPU kernels, the CPU's copies (channel_cpu.h) on the device: elements are F32,
// F16 or BF16, moved bit for bit (each dtype's bits as an unsigned integer of its size), with packed
// accesses of up to 16 bytes where the channel counts and the pointers allow. Every element is
// written by one thread and no value is computed, so every run gives the same bytes. Only enqueues
// work on `stream` (no allocation, no host wait: a CUDA Graph can capture it); throws kiln::Error
// naming `where` on bad arguments or CUDA errors. Outputs must not overlap inputs.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::cuda {

// y[r, j * groups + i] = x[r, i * (channels / groups) + j] for i < groups, j < channels / groups
// (groups divides channels). Its inverse, a shuffle's backward, is the same with channels / groups
// groups.
void shuffle_channels(DType dtype, const void* x, void* y, int64_t rows, int64_t channels, int64_t groups,
                      cudaStream_t stream, const std::string& where);

// y[r, k] = x[r, start + k] for k < count: rows of in_channels in x, of count in y.
void slice_channels(DType dtype, const void* x, int64_t in_channels, int64_t start, void* y, int64_t rows,
                    int64_t count, cudaStream_t stream, const std::string& where);

// One slice's gradient: `channels` a row.
struct SliceGradientPart {
  const void* dy = nullptr;
  int64_t channels = 0;
};

// dx[r, start + o_s + k] = parts[s].dy[r, k] (o_s: the channels of the parts before s), 0 in every
// other channel of dx's rows of `channels`: one copy per part and one zero fill per side not covered.
void join_slice_gradients(DType dtype, const std::vector<SliceGradientPart>& parts, int64_t start, void* dx,
                          int64_t rows, int64_t channels, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
