#pragma once
// The per-channel tiling of NHWC tensors (m rows x c channels) that BN's reductions and
// per-channel elementwise kernels share. Included only by batchnorm_cuda.cu and, through
// bn_tile_parts_cuda.cuh, resblock_cuda.cu.
//
// A block of kTileThreads threads is a 2D tile: `width` threads across channels, each owning
// `vec` consecutive channels (one packed load), times `rows` threads down the rows. A warp thus
// reads a contiguous stretch of memory, and every thread keeps its channels for its whole life:
// per-channel parameters and sums stay in registers. blockIdx.y picks the channel slice (only
// when c > kTileThreads * vec); the gridDim.x row blocks take chunks of rows round robin.
//
// The grid is one wave (as many blocks as the GPU holds at once): no block waits for a second
// wave, and in reductions every block combines its rows once, at the end. Reductions write one
// partial per (row block, channel) to a workspace and a second kernel adds them in a fixed
// order: results are deterministic for a given GPU model (the tiling depends on m, c, the
// pointers' alignment and the GPU's occupancy, never on timing).
#include <algorithm>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "ops/common/flat_cuda.cuh"
#include "ops/common/pack_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {  // every includer gets its own copy

constexpr int kTileThreads = 256;
// Upper bound on row blocks (gridDim.x): covers 8 resident blocks on each SM of GPUs with up to
// 256 SMs, and bounds the reduction workspace.
constexpr int kMaxRowBlocks = 2048;
// fp32 per-thread sums stay accurate over a few thousand values; beyond that, more blocks.
constexpr int64_t kMaxRowsPerThread = 4096;
// gridDim.x's limit.
constexpr int64_t kMaxChunkBlocks = 2147483647;

// Rows each thread loads before using them, to keep several loads in flight per thread: 4
// packs of up to 16 bytes, 2 of 32 bytes (fp32 with 8 channels per thread). Kernels that load
// two tensors per row use half that (kPairUnroll): measured on an H200, the backward reduce and
// apply then run 10-16% and 3-10% faster, as fewer registers let 3 blocks share an SM.
template <class T, int VEC>
constexpr int kTileUnroll = VEC * sizeof(T) > 16 ? 2 : 4;
template <class T, int VEC>
constexpr int kPairUnroll = kTileUnroll<T, VEC> / 2;
// A block end's backward apply with its gradient in two terms loads three tensors per row: one
// row at a time, so that its bf16 8-channel kernel keeps within the registers of 3 blocks per SM
// (ptxas, sm_90: 2 rows spilled 132 bytes a thread, 1 row none).
constexpr int kTripleUnroll = 1;

// How row blocks share the rows. kRoundRobin: chunks of rows * unroll rows dealt round robin to a
// one-wave grid. kContiguous: a one-wave grid, each block one contiguous run of chunks (a
// reduction reads a few long streams; 2-5% faster than round robin for the backward reduce).
// kChunkPerBlock: one block per chunk, as many blocks as chunks (no reduction may use it; the
// forward apply runs 5-15% faster so, as blocks that finish early make room for new ones).
enum class RowSplit { kRoundRobin, kContiguous, kChunkPerBlock };

struct TileGrid {
  int64_t m = 0, c = 0;
  int vec = 1;         // channels per thread
  int width = 1;       // threads across the channels of one slice
  int rows = 1;        // rows one block covers per load (kTileThreads / width)
  int col_blocks = 1;  // channel slices (gridDim.y)
  int row_blocks = 0;  // gridDim.x; blocks take chunks of rows * unroll rows round robin
};

// Threads across channels and rows for (c, vec); no row blocks yet.
inline TileGrid tile_shape(int64_t m, int64_t c, int vec) {
  TileGrid g;
  g.m = m, g.c = c, g.vec = vec;
  const int64_t col_vectors = c / vec;
  g.col_blocks = static_cast<int>(ceil_div(col_vectors, kTileThreads));
  g.width = static_cast<int>(ceil_div(col_vectors, g.col_blocks));  // balanced slices
  g.rows = kTileThreads / g.width;
  return g;
}

// Most row blocks a grid for (m, c, vec) can have, whatever the unroll and the GPU.
inline int64_t max_row_blocks(const TileGrid& g) {
  return std::min<int64_t>(ceil_div(g.m, g.rows), kMaxRowBlocks);
}

// One wave (kRoundRobin, kContiguous): as many blocks as the GPU holds at once (`resident`, from
// the occupancy API), so no block waits for a second wave and every block reduces its rows once.
// kChunkPerBlock: one block per chunk of rows * unroll rows.
inline TileGrid make_tile_grid(int64_t m, int64_t c, int vec, int unroll, int resident,
                               RowSplit split = RowSplit::kRoundRobin) {
  TileGrid g = tile_shape(m, c, vec);
  if (m == 0) return g;
  const int64_t chunks = ceil_div(m, int64_t{g.rows} * unroll);
  if (split == RowSplit::kChunkPerBlock) {  // past gridDim.x's limit blocks take chunks round robin
    g.row_blocks = static_cast<int>(std::min(chunks, kMaxChunkBlocks));
    return g;
  }
  int64_t blocks = ceil_div(resident, g.col_blocks);
  blocks = std::max(blocks, ceil_div(m, int64_t{g.rows} * kMaxRowsPerThread));
  g.row_blocks =
      static_cast<int>(std::clamp<int64_t>(blocks, 1, std::min(chunks, max_row_blocks(g))));
  return g;
}

// Widest vec (8, 4, 2 or 1 channels, at most max_vec) that divides c and that every pointer's
// alignment allows: activation pointers (element size `elem`) for the packed access, byte-mask
// pointers for a vec-byte store. The default max_vec gives 16-byte packs: wider ones cost
// registers (occupancy) without moving more bytes per instruction.
inline int choose_vec(int64_t c, size_t elem, std::initializer_list<const void*> activations,
                      std::initializer_list<const void*> byte_masks = {}, int max_vec = 0) {
  if (max_vec == 0) max_vec = static_cast<int>(16 / elem);
  for (int v : {8, 4, 2}) {
    if (v <= max_vec && c % v == 0 && all_aligned(activations, pack_alignment(v * elem)) &&
        all_aligned(byte_masks, v))
      return v;
  }
  return 1;
}

// Calls f(std::integral_constant<int, vec>{}).
template <class F>
void dispatch_vec(int vec, F&& f) {
  switch (vec) {
    case 8: return f(std::integral_constant<int, 8>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}

// Two partial arrays [row_blocks][c] of fp32.
inline size_t partials_bytes(const TileGrid& g, int64_t row_blocks, int arrays = 2) {
  return size_t(arrays) * size_t(row_blocks) * size_t(g.c) * sizeof(float);
}

// Enough for any vec the pointers' alignment may select, on any GPU.
inline size_t reduction_workspace_bytes(int64_t m, int64_t c, int arrays = 2) {
  size_t bytes = 0;
  for (int v : {8, 4, 2, 1}) {
    if (c < 1 || c % v != 0) continue;
    const TileGrid g = tile_shape(m, c, v);
    bytes = std::max(bytes, partials_bytes(g, max_row_blocks(g), arrays));
  }
  return bytes;
}

// --- Device side ---

struct TileThread {
  int64_t c0 = 0;      // first of the thread's vec channels
  int64_t row = 0;     // first row (end for threads outside the tile: they skip their row loop)
  int64_t stride = 0;  // rows between the thread's consecutive chunks
  int64_t end = 0;     // one past the block's last row
  bool active = false;
};

// `unroll` rows per thread and chunk: a block's chunk is rows * unroll consecutive rows, the
// thread loads rows row, row + g.rows, ... (below end) and moves on by `stride`.
template <RowSplit SPLIT>
__device__ __forceinline__ TileThread tile_thread(const TileGrid& g, int unroll) {
  const int lane_c = threadIdx.x % g.width, lane_r = threadIdx.x / g.width;
  TileThread p;
  p.c0 = (int64_t{blockIdx.y} * g.width + lane_c) * g.vec;
  p.active = lane_r < g.rows && p.c0 < g.c;
  const int64_t chunk = int64_t{g.rows} * unroll;
  if constexpr (SPLIT == RowSplit::kContiguous) {
    const int64_t chunks = (g.m + chunk - 1) / chunk;
    const int64_t first = chunks * blockIdx.x / gridDim.x, last = chunks * (blockIdx.x + 1) / gridDim.x;
    p.row = first * chunk + lane_r;
    p.end = min(g.m, last * chunk);
    p.stride = chunk;
  } else {  // kRoundRobin; kChunkPerBlock is its one-iteration case
    p.row = int64_t{blockIdx.x} * chunk + lane_r;
    p.end = g.m;
    p.stride = chunk * gridDim.x;
  }
  if (!p.active) p.row = p.end;
  return p;
}

// One pack of the thread's channels at `at`, evict-first when STREAMING (a stream read once).
template <bool STREAMING, class T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_tile_pack(const T* at) {
  if constexpr (STREAMING) return load_pack_streaming<T, VEC>(at);
  return load_pack<T, VEC>(at);
}

// The tile loop's loads of one tensor t, or of two (t and t2, row by row): the thread's U rows
// row, row + g.rows, ... (those before p.end; the others are left as they are), all issued before
// the caller uses any.
template <bool STREAMING, class T, int VEC, int U>
__device__ __forceinline__ void load_rows(Pack<T, VEC> (&out)[U], const T* t, const TileGrid& g, const TileThread& p,
                                          int64_t row) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t r = row + int64_t{u} * g.rows;
    if (r < p.end) out[u] = load_tile_pack<STREAMING, T, VEC>(t + r * g.c + p.c0);
  }
}
template <bool STREAMING, class T, int VEC, int U>
__device__ __forceinline__ void load_rows(Pack<T, VEC> (&out)[U], const T* t, Pack<T, VEC> (&out2)[U], const T* t2,
                                          const TileGrid& g, const TileThread& p, int64_t row) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t r = row + int64_t{u} * g.rows;
    if (r >= p.end) continue;
    out[u] = load_tile_pack<STREAMING, T, VEC>(t + r * g.c + p.c0);
    out2[u] = load_tile_pack<STREAMING, T, VEC>(t2 + r * g.c + p.c0);
  }
}

// Bits of flat elements f .. f+VEC-1 at bit positions 0..VEC-1 (higher bits are garbage). f is
// a multiple of VEC and VEC divides 8, so they sit in one byte. No mask: all ones.
template <int VEC>
__device__ __forceinline__ unsigned load_mask_bits(const uint8_t* bitmask, int64_t f) {
  return bitmask ? unsigned{bitmask[f >> 3]} >> (f & 7) : 0xffu;
}

// Adds the N accumulators of the block's row lanes in a fixed tree order and writes the block's
// partials: part[k][blockIdx.x * c + channel]. Every thread of the block must call it.
template <int VEC, int N>
__device__ void write_block_partials(const TileGrid& g, const TileThread& p, const float (&a)[N][VEC],
                                     float* const (&part)[N]) {
  __shared__ float s[N][kTileThreads * VEC];
  const int t = threadIdx.x, lane_r = t / g.width;
#pragma unroll
  for (int k = 0; k < N; ++k)
#pragma unroll
    for (int j = 0; j < VEC; ++j) s[k][t * VEC + j] = a[k][j];  // inactive threads hold zeros
  __syncthreads();
  int span = 1;
  while (span < g.rows) span *= 2;
  for (int h = span / 2; h > 0; h /= 2) {
    if (lane_r < h && lane_r + h < g.rows) {
      const int o = t + h * g.width;
#pragma unroll
      for (int k = 0; k < N; ++k)
#pragma unroll
        for (int j = 0; j < VEC; ++j) s[k][t * VEC + j] += s[k][o * VEC + j];
    }
    __syncthreads();
  }
  if (lane_r == 0 && p.c0 < g.c) {
    const int64_t base = int64_t{blockIdx.x} * g.c + p.c0;
#pragma unroll
    for (int k = 0; k < N; ++k)
#pragma unroll
      for (int j = 0; j < VEC; ++j) part[k][base + j] = s[k][t * VEC + j];
  }
}

// The two-sum form most reductions use.
template <int VEC>
__device__ void write_block_partials(const TileGrid& g, const TileThread& p, const float (&a0)[VEC],
                                     const float (&a1)[VEC], float* part0, float* part1) {
  float a[2][VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) a[0][j] = a0[j], a[1][j] = a1[j];
  float* const parts[2] = {part0, part1};
  write_block_partials<VEC, 2>(g, p, a, parts);
}

constexpr int kCombineChannels = 32, kCombineLanes = 32;

// out[ch] = sum over row blocks of part[rb][ch], in fp64: lane l adds row blocks l, l+32, ...
// in order, then the 32 lanes are added in a fixed tree.
__global__ void combine_partials_kernel(const float* part0, const float* part1, int row_blocks,
                                        int64_t c, float* out0, float* out1) {
  __shared__ double s0[kCombineLanes][kCombineChannels], s1[kCombineLanes][kCombineChannels];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t ch = int64_t{blockIdx.x} * kCombineChannels + tx;
  double a0 = 0, a1 = 0;
  if (ch < c)
#pragma unroll 4
    for (int rb = ty; rb < row_blocks; rb += kCombineLanes) {
      a0 += part0[int64_t{rb} * c + ch];
      a1 += part1[int64_t{rb} * c + ch];
    }
  s0[ty][tx] = a0;
  s1[ty][tx] = a1;
  __syncthreads();
  for (int s = kCombineLanes / 2; s > 0; s /= 2) {
    if (ty < s) {
      s0[ty][tx] += s0[ty + s][tx];
      s1[ty][tx] += s1[ty + s][tx];
    }
    __syncthreads();
  }
  if (ty == 0 && ch < c) {
    out0[ch] = static_cast<float>(s0[0][tx]);
    out1[ch] = static_cast<float>(s1[0][tx]);
  }
}

inline void launch_combine_partials(const float* part0, const float* part1, int row_blocks,
                                    int64_t c, float* out0, float* out1, cudaStream_t stream) {
  combine_partials_kernel<<<static_cast<unsigned>(ceil_div(c, kCombineChannels)),
                            dim3(kCombineChannels, kCombineLanes), 0, stream>>>(
      part0, part1, row_blocks, c, out0, out1);
}

}  // namespace
}  // namespace kiln::cuda
