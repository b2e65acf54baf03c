#include "ops/conv/wgrad_direct_cuda.h"

#include <algorithm>

#include "ops/common/pack_cuda.cuh"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kMinRowsPerBlock = 64;
constexpr int64_t kMaxBlocks = 4096;
constexpr int kTileFloats = 8192;  // 32 KB of dY rows in shared memory
constexpr int kSumThreads = 256;

struct Geom {
  int64_t n, h, w, c, k, r, s, stride, pad, ho, wo;
  __host__ __device__ int64_t rows() const { return n * ho * wo; }
  __host__ __device__ int weights() const { return int(k * r * s * c); }
};

int64_t blocks_for(const Geom& g) {
  return std::max<int64_t>(1, std::min(kMaxBlocks, (g.rows() + kMinRowsPerBlock - 1) / kMinRowsPerBlock));
}

// Block b sums rows [b * per_block, (b + 1) * per_block) for weight threadIdx.x. The block first
// loads a tile of dY rows into shared memory with coalesced loads (every weight of a channel k
// reads the same dY values), then each thread walks the tile; X, small for the shapes taken
// here, is read through the L1 cache.
template <class T>
__global__ void wgrad_partials(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ partials,
                               Geom g, int64_t per_block, int tile_rows) {
  extern __shared__ float tile[];  // [tile_rows][k]
  const int o = threadIdx.x;
  const bool mine = o < g.weights();
  const int c = int(o % g.c), s = int(o / g.c % g.s), r = int(o / (g.c * g.s) % g.r), k = int(o / (g.c * g.s * g.r));
  const int64_t first = blockIdx.x * per_block, last = min(first + per_block, g.rows());
  // Walk the rows in (n, ho, wo) order without dividing per row.
  int64_t n = first / (g.ho * g.wo), ho = first / g.wo % g.ho, wo = first % g.wo;
  float acc = 0.f;
  for (int64_t start = first; start < last; start += tile_rows) {
    const int rows = int(min(int64_t(tile_rows), last - start));
    __syncthreads();  // the previous tile is used up
    for (int i = threadIdx.x; i < rows * g.k; i += blockDim.x) tile[i] = to_float(dy[start * g.k + i]);
    __syncthreads();
    if (mine) {
      for (int i = 0; i < rows; ++i) {
        const int64_t hi = ho * g.stride - g.pad + r, wi = wo * g.stride - g.pad + s;
        if (hi >= 0 && hi < g.h && wi >= 0 && wi < g.w)
          acc += tile[i * g.k + k] * to_float(x[((n * g.h + hi) * g.w + wi) * g.c + c]);
        if (++wo == g.wo) {
          wo = 0;
          if (++ho == g.ho) ho = 0, ++n;
        }
      }
    }
  }
  if (mine) partials[o * int64_t(gridDim.x) + blockIdx.x] = acc;  // weight-major: the sum reads it in order
}

// dw[o] = the partials of weight o (block o), each thread adding a strided share in order and
// the shares then added in a fixed tree: the same bits on every run.
template <class T>
__global__ void wgrad_sum_partials(const float* __restrict__ partials, T* __restrict__ dw, int64_t blocks) {
  __shared__ float share[kSumThreads];
  const int o = blockIdx.x;
  float sum = 0.f;
  for (int64_t b = threadIdx.x; b < blocks; b += kSumThreads) sum += partials[o * blocks + b];
  share[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) share[threadIdx.x] += share[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) dw[o] = from_float<T>(share[0]);
}

Geom geom_of(const ConvShape& p) { return {p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride, p.pad, p.ho, p.wo}; }

}  // namespace

bool wgrad_direct_supported(const ConvShape& p) {
  const int64_t weights = p.k * p.r * p.s * p.c;
  return weights >= 1 && weights <= kWgradDirectMaxWeights && p.n >= 1 && p.ho >= 1 && p.wo >= 1;
}

size_t wgrad_direct_workspace_bytes(const ConvShape& p) {
  const Geom g = geom_of(p);
  return (size_t(blocks_for(g)) * size_t(g.weights()) * sizeof(float) + 255) / 256 * 256;
}

void wgrad_direct(const ConvShape& p, const void* x, const void* dy, void* dw, void* workspace,
                  cudaStream_t stream, const std::string& where) {
  if (!wgrad_direct_supported(p))
    fail("{}: the direct weight gradient takes at most {} weights, not {}", where, kWgradDirectMaxWeights,
         p.k * p.r * p.s * p.c);
  if (!x || !dy || !dw || !workspace) fail("{}: the direct weight gradient got a null pointer", where);
  const Geom g = geom_of(p);
  const int64_t blocks = blocks_for(g), per_block = (g.rows() + blocks - 1) / blocks;
  const int threads = (g.weights() + 31) / 32 * 32;
  float* partials = static_cast<float*>(workspace);
  dispatch_activation(p.io, "direct weight gradient", [&](auto zero) {
    using T = decltype(zero);
    const int tile_rows = int(std::max<int64_t>(1, std::min<int64_t>(kMinRowsPerBlock, kTileFloats / g.k)));
    wgrad_partials<T><<<unsigned(blocks), threads, size_t(tile_rows * g.k) * sizeof(float), stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), partials, g, per_block, tile_rows);
    check_launch(where);
    wgrad_sum_partials<T><<<unsigned(g.weights()), kSumThreads, 0, stream>>>(partials, static_cast<T*>(dw), blocks);
    check_launch(where);
  });
}

}  // namespace kiln::cuda
