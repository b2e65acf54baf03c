#pragma once
// The pieces of BatchNorm's tiled kernels that other families' kernels built on them share
// (ops/resblock's block ends): how each kernel kind splits rows among blocks, the masked backward
// loads, a branch's backward coefficients, and on the host the checks, the choice of type, channel
// group and grid, and the launch. Used by batchnorm_cuda.cu and resblock_cuda.cu only.
#include <initializer_list>
#include <string>
#include <utility>

#include "kiln/error.h"
#include "ops/batchnorm/tile_cuda.cuh"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda::bn_parts {

// How each kernel splits rows among blocks, and the bwd apply's occupancy: chosen by timing
// variants on an H200 (docs/results.md, "BN+ReLU kernels").
constexpr RowSplit kApplySplit = RowSplit::kChunkPerBlock;
constexpr RowSplit kReduceSplit = RowSplit::kContiguous;
constexpr RowSplit kBackwardApplySplit = RowSplit::kRoundRobin;
// The backward apply at 3 blocks per SM (80 registers, no spills in fp16, bf16 and fp32; bf16
// fits since its widening is a shift, pack_cuda.cuh).
constexpr int kBackwardApplyBlocksPerSM = 3;

// The backward kernels' loads of U rows: dy and x packs and the ReLU mask bits, all issued
// before any use (the apply's dx may alias dy or x, so the compiler could not hoist later loads
// above earlier stores by itself). Rows at or past p.end are skipped. STREAMING marks the loads
// evict-first.
template <class T, int VEC, int U, bool STREAMING>
struct MaskedRows {
  Pack<T, VEC> dy[U], x[U];
  unsigned bits[U];

  __device__ __forceinline__ void load(const T* dy_, const uint8_t* bitmask, const T* x_, const TileGrid& g,
                                       const TileThread& p, int64_t row) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = row + int64_t{u} * g.rows;
      if (r >= p.end) continue;
      const int64_t f = r * g.c + p.c0;
      dy[u] = load_row(dy_ + f);
      x[u] = load_row(x_ + f);
      bits[u] = load_mask_bits<VEC>(bitmask, f);
    }
  }
  // One row's pack, evict-first when STREAMING.
  __device__ __forceinline__ static Pack<T, VEC> load_row(const T* at) { return load_tile_pack<STREAMING, T, VEC>(at); }
  // dy given as two terms (a block end's whose output feeds two layers): the second's packs
  // added to the loaded dy's in fp32 and rounded to T, the bits GRAD_SUM stores for the sum of
  // two terms (elementwise_cuda.cu), so what follows computes what it would from the summed tensor.
  __device__ __forceinline__ void add_term(const T* dy2_, const TileGrid& g, const TileThread& p, int64_t row) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = row + int64_t{u} * g.rows;
      if (r >= p.end) continue;
      const Pack<T, VEC> second = load_row(dy2_ + r * g.c + p.c0);
#pragma unroll
      for (int j = 0; j < VEC; ++j) dy[u].v[j] = from_float<T>(to_float(dy[u].v[j]) + to_float(second.v[j]));
    }
  }
  // The mask recomputed from the loaded x and the forward's per-channel scale / shift (a seam's
  // producer, batchnorm_cuda.h's ReluMask), with bn_apply's expression: the bits it would have
  // written. Rows past p.end get bits nobody reads.
  __device__ __forceinline__ void recompute_bits(const float (&scale)[VEC], const float (&shift)[VEC]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      unsigned b = 0;
#pragma unroll
      for (int j = 0; j < VEC; ++j) b |= unsigned{fmaf(to_float(x[u].v[j]), scale[j], shift[j]) > 0.f} << j;
      bits[u] = b;
    }
  }
  // dy * mask as a select, not a multiply: a masked-out NaN/Inf gradient must not leak.
  __device__ __forceinline__ float masked_dy(int u, int j) const {
    return (bits[u] >> j) & 1u ? to_float(dy[u].v[j]) : 0.f;
  }
};

// One BN branch's per-channel inputs to its backward apply (fp32 device arrays of length c).
struct BnBranchCoefficients {
  const float *gamma, *mean, *inv_std, *sum_dy, *sum_dy_xhat;
  // dx = k * (g - a - xhat * b) with k = gamma * inv_std, a = sum_dy / m, b = sum_dy_xhat / m,
  // xhat = (x - mean) * inv_std, folded into dx = k * g - ka - kb * (x - mean): four
  // coefficients per channel in registers instead of five. x - mean stays first, so a large
  // mean does not cancel digits away.
  __device__ __forceinline__ void load(int64_t ch, float inv_m, float& mu, float& k, float& ka, float& kb) const {
    const float is = inv_std[ch];
    mu = mean[ch];
    k = gamma[ch] * is;
    ka = k * (sum_dy[ch] * inv_m);
    kb = k * (sum_dy_xhat[ch] * inv_m) * is;
  }
};

inline void check_shape(const char* fn, int64_t m, int64_t c, const std::string& where) {
  if (m < 0 || c < 1)
    fail("{}: {} got m = {} rows and c = {} channels; m must be >= 0 and c >= 1", where, fn, m, c);
}

using Named = std::pair<const void*, const char*>;

inline void need(const char* fn, const std::string& where, std::initializer_list<Named> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

// The grid for a tile kernel that loads `unroll` rows at a time and splits rows as `split` says.
template <int VEC, class Kernel>
TileGrid grid_for(Kernel* kernel, int64_t m, int64_t c, int unroll, RowSplit split, const std::string& where) {
  const int resident =
      split == RowSplit::kChunkPerBlock ? 0 : resident_blocks(reinterpret_cast<const void*>(kernel), kTileThreads, where);
  return make_tile_grid(m, c, VEC, unroll, resident, split);
}

// The choices most tile launchers make, in one place: calls f(T{}, vec) with the activation type T
// of `dtype` and the widest channel group (std::integral_constant<int, VEC>) that c and the
// activation pointers' alignment allow.
template <class F>
void with_tile_types(DType dtype, const char* fn, int64_t c, std::initializer_list<const void*> activations, F&& f) {
  dispatch_activation(dtype, fn, [&](auto zero) {
    using T = decltype(zero);
    dispatch_vec(choose_vec(c, sizeof(T), activations), [&](auto vec) { f(zero, vec); });
  });
}

// Launches a tile kernel on its grid: g.row_blocks x g.col_blocks blocks of kTileThreads.
template <class... Params, class... Args>
void launch_tiles(void (*kernel)(Params...), const TileGrid& g, cudaStream_t stream, Args... args) {
  kernel<<<dim3(g.row_blocks, g.col_blocks), kTileThreads, 0, stream>>>(args...);
}

}  // namespace kiln::cuda::bn_parts
