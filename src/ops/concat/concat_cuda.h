#pragma once
// The concat family's GPU kernel, the CPU's copy (concat_cpu.h) on the device: a run of channels
// copied between two NHWC tensors of the same rows (N*H*W). Elements are F32, F16 or BF16 and are
// copied bit for bit. Only enqueues work on `stream`; throws kiln::Error naming `where` on bad
// arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// dst[r * dst_channels + dst_offset + c] = src[r * src_channels + src_offset + c] for r < rows,
// c < channels. src and dst must not overlap.
void copy_channels(DType dtype, const void* src, int64_t src_channels, int64_t src_offset, void* dst,
                   int64_t dst_channels, int64_t dst_offset, int64_t rows, int64_t channels, cudaStream_t stream,
                   const std::string& where);

}  // namespace kiln::cuda
