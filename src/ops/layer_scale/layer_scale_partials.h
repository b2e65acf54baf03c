#pragma once
// How the GPU adds dgamma[c] = sum over rows of dy * x without float atomics: the rows are cut
// into chunks of consecutive rows, each chunk's sums land in its own row of an fp32 workspace
// (chunks x C), and a second pass adds those rows in chunk order. The lowering declares the
// workspace as a tensor of the program (the op allocates nothing, so a CUDA Graph can capture it);
// the op checks it has this shape. The count depends on the rows alone: every run, device and
// thread count adds in the same order.
#include <algorithm>
#include <cstdint>

namespace kiln {

// A chunk gets at least this many rows (fewer leave a block's strands idle), and there are at
// most this many chunks: a channel-poor map (ConvNeXt's first stage, 96 channels: one block wide)
// still gets hundreds of blocks, while the second pass adds at most 512 partials a channel.
inline constexpr int64_t kLayerScaleChunkRows = 64;
inline constexpr int64_t kLayerScaleMaxChunks = 512;

inline int64_t layer_scale_partial_chunks(int64_t rows) {
  return std::clamp<int64_t>((rows + kLayerScaleChunkRows - 1) / kLayerScaleChunkRows, 1, kLayerScaleMaxChunks);
}

// The rows of each chunk (the last one may hold fewer).
inline int64_t layer_scale_chunk_rows(int64_t rows) {
  const int64_t chunks = layer_scale_partial_chunks(rows);
  return std::max<int64_t>(1, (rows + chunks - 1) / chunks);
}

}  // namespace kiln
