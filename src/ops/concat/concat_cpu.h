#pragma once
// The concat family's one CPU kernel: a copy of a run of channels between two NHWC tensors of the
// same batch, height and width (rows = N*H*W) and any channel counts.
#include <cstdint>

namespace kiln::cpu {

// For every row r < rows and channel c < channels:
//   dst[r * dst_channels + dst_offset + c] = src[r * src_channels + src_offset + c].
// The forward copies an input into its slice of y (src_offset 0), the backward y's gradient slice
// into the input's gradient (dst_offset 0). src and dst must not overlap.
template <class T>
void copy_channels(const T* src, int64_t src_channels, int64_t src_offset, T* dst, int64_t dst_channels,
                   int64_t dst_offset, int64_t rows, int64_t channels);

}  // namespace kiln::cpu
