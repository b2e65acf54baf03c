#pragma once
// BatchNorm's backward reduce and apply as kernel templates over a gate: what turns the loaded
// gradient dy into g, the gradient at the BatchNorm's output. batchnorm_cuda.cu instantiates them
// with the ReLU's gates (a stored bit mask, or one recomputed from x); ops/conv_bn_act with any
// activation's derivative, act'(x * scale + shift), so that a BN + activation's backward reads dy
// and x twice (reduce, apply) and never stores g. Included by those two .cu files only.
//
// A gate is a struct of device pointers, passed by value, with:
//   bits()            the stored bit mask MaskedRows loads (nullptr: none);
//   load(p, g)        the thread's part of it: its per-channel coefficients in registers, with
//     prepare(in, rows) anything derived from a set of loaded rows (the recomputed bits, a term
//                     added to dy), rows giving where they lie (LoadedRows), and
//     g(in, u, j)     the gated gradient of row u, channel j, in fp32;
//   kApplyBlocksPerSM the backward apply's occupancy bound with the thread part's registers;
//   kTakesSecondTerm  whether dy may come in two terms (a block end's stored mask only).
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "ops/batchnorm/bn_tile_parts_cuda.cuh"
#include "ops/batchnorm/tile_cuda.cuh"

namespace kiln::cuda::bn_parts {

// Where the rows a thread loaded at once lie: rows first + u * step for u < U, those at or past
// end not loaded.
struct LoadedRows {
  int64_t first, step, end;
};

// dy * the ReLU's stored bit mask (or dy itself without one).
template <int VEC>
struct StoredMaskGate {
  const uint8_t* mask_bits;
  static constexpr int kApplyBlocksPerSM = kBackwardApplyBlocksPerSM;
  static constexpr bool kTakesSecondTerm = true;
  struct Thread {
    template <class Rows>
    __device__ __forceinline__ void prepare(Rows&, const LoadedRows&) const {}
    template <class Rows>
    __device__ __forceinline__ float g(const Rows& in, int u, int j) const {
      return in.masked_dy(u, j);
    }
  };
  __device__ __forceinline__ const uint8_t* bits() const { return mask_bits; }
  __device__ __forceinline__ Thread load(const TileThread&, const TileGrid&) const { return {}; }
};

// The thread's VEC channels of two per-channel fp32 arrays, in registers (0 for idle threads).
template <int VEC>
struct ScaleShift {
  float scale[VEC], shift[VEC];
  __device__ __forceinline__ void load(const float* scale_at, const float* shift_at, const TileThread& p) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      scale[j] = p.active ? scale_at[p.c0 + j] : 0.f;
      shift[j] = p.active ? shift_at[p.c0 + j] : 0.f;
    }
  }
};

// dy * the ReLU mask recomputed from x and the forward's scale / shift (batchnorm_cuda.h's
// ReluMask). Its 2 * VEC coefficients in registers fit 2 blocks per SM without spilling.
template <int VEC>
struct RecomputedReluGate {
  const float *scale, *shift;
  static constexpr int kApplyBlocksPerSM = 2;
  static constexpr bool kTakesSecondTerm = false;
  struct Thread : ScaleShift<VEC> {
    template <class Rows>
    __device__ __forceinline__ void prepare(Rows& in, const LoadedRows&) const {
      in.recompute_bits(this->scale, this->shift);
    }
    template <class Rows>
    __device__ __forceinline__ float g(const Rows& in, int u, int j) const {
      return in.masked_dy(u, j);
    }
  };
  __device__ __forceinline__ const uint8_t* bits() const { return nullptr; }
  __device__ __forceinline__ Thread load(const TileThread& p, const TileGrid&) const {
    Thread t;
    t.load(scale, shift, p);
    return t;
  }
};

// A branch's saved mean and inverse std for the thread's channels, in registers, and xhat from them.
template <int VEC>
struct SavedStats {
  float mu[VEC], is[VEC];
  __device__ __forceinline__ void load(const float* mean, const float* inv_std, const TileThread& p) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      mu[j] = p.active ? mean[p.c0 + j] : 0.f;
      is[j] = p.active ? inv_std[p.c0 + j] : 0.f;
    }
  }
  template <class T>
  __device__ __forceinline__ float xhat(T x, int j) const {
    return (to_float(x) - mu[j]) * is[j];
  }
};

// Per-block partial sums of g (dbeta) and g * xhat (dgamma). TERMS2: dy comes as dy + dy2
// (MaskedRows::add_term), with a stored mask only.
template <class T, int VEC, class Gate, bool TERMS2>
__global__ void __launch_bounds__(kTileThreads)
    bn_backward_reduce_kernel(const T* dy, const T* dy2, Gate gate, const T* x, const float* mean,
                              const float* inv_std, TileGrid g, float* part_dy, float* part_dy_xhat) {
  constexpr int U = kPairUnroll<T, VEC>;
  const TileThread p = tile_thread<kReduceSplit>(g, U);
  float s[VEC] = {}, sx[VEC] = {};
  SavedStats<VEC> stats;
  stats.load(mean, inv_std, p);
  const auto gt = gate.load(p, g);
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    MaskedRows<T, VEC, U, /*STREAMING=*/true> in;
    in.load(dy, gate.bits(), x, g, p, row);
    if constexpr (TERMS2) in.add_term(dy2, g, p, row);
    gt.prepare(in, LoadedRows{row, g.rows, p.end});
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (row + int64_t{u} * g.rows >= p.end) break;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float gj = gt.g(in, u, j);
        s[j] += gj;
        sx[j] += gj * stats.xhat(in.x[u].v[j], j);
      }
    }
  }
  write_block_partials<VEC>(g, p, s, sx, part_dy, part_dy_xhat);
}

// dx = gamma * inv_std * (g - sum_dy / count - xhat * sum_dy_xhat / count).
template <class T, int VEC, class Gate>
__global__ void __launch_bounds__(kTileThreads, Gate::kApplyBlocksPerSM)
    bn_backward_apply_kernel(const T* dy, Gate gate, const T* x, const float* gamma, const float* mean,
                             const float* inv_std, const float* sum_dy, const float* sum_dy_xhat, float inv_m,
                             TileGrid g, T* dx) {
  constexpr int U = kPairUnroll<T, VEC>;
  const TileThread p = tile_thread<kBackwardApplySplit>(g, U);
  if (!p.active) return;
  const BnBranchCoefficients coef{gamma, mean, inv_std, sum_dy, sum_dy_xhat};
  float mu[VEC], k[VEC], ka[VEC], kb[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) coef.load(p.c0 + j, inv_m, mu[j], k[j], ka[j], kb[j]);
  const auto gt = gate.load(p, g);
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    MaskedRows<T, VEC, U, /*STREAMING=*/false> in;
    in.load(dy, gate.bits(), x, g, p, row);  // every load before the first store
    gt.prepare(in, LoadedRows{row, g.rows, p.end});
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = row + int64_t{u} * g.rows;
      if (r >= p.end) break;
      Pack<T, VEC> out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float gj = gt.g(in, u, j);
        out.v[j] = from_float<T>(fmaf(k[j], gj, -ka[j]) - kb[j] * (to_float(in.x[u].v[j]) - mu[j]));
      }
      store_pack<T, VEC>(dx + r * g.c + p.c0, out);
    }
  }
}

// --- Host side ---

// A reduction's N partial arrays [row_blocks][c] in the caller's workspace.
template <int N>
std::array<float*, N> partial_arrays(const char* fn, const TileGrid& g, void* workspace, size_t workspace_bytes,
                                     const std::string& where) {
  const size_t need_bytes = partials_bytes(g, g.row_blocks, N);
  if (!workspace || workspace_bytes < need_bytes || !all_aligned({workspace}, alignof(float)))
    fail(
        "{}: {} needs a 4-byte aligned workspace of {} bytes for m = {}, c = {} (got {} bytes at "
        "{}); size it with the matching *_workspace_bytes(m, c)",
        where, fn, need_bytes, g.m, g.c, workspace_bytes, workspace);
  std::array<float*, N> parts;
  for (int k = 0; k < N; ++k) parts[k] = static_cast<float*>(workspace) + k * int64_t{g.row_blocks} * g.c;
  return parts;
}

// The two partial arrays of most reductions.
inline std::pair<float*, float*> partials(const char* fn, const TileGrid& g, void* workspace, size_t workspace_bytes,
                                          const std::string& where) {
  const auto parts = partial_arrays<2>(fn, g, workspace, workspace_bytes, where);
  return {parts[0], parts[1]};
}

// After the tile kernel: adds the partials in a fixed order into out0 / out1.
inline void combine(const TileGrid& g, std::pair<float*, float*> parts, float* out0, float* out1,
                    cudaStream_t stream, const std::string& where) {
  check_launch(where);
  launch_combine_partials(parts.first, parts.second, g.row_blocks, g.c, out0, out1, stream);
  check_launch(where);
}

// The backward reduce with `gate` on an (m, c) tensor: sum_dy = sum of g, sum_dy_xhat = sum of
// g * xhat, deterministic (batchnorm_cuda.h); dy2 (nullable) only where the gate takes a second
// term. Shapes and pointers are the caller's to check.
template <class T, int V, class Gate>
void launch_bn_backward_reduce(const char* fn, const T* dy, const T* dy2, const Gate& gate, const T* x,
                               const float* mean, const float* inv_std, int64_t m, int64_t c, float* sum_dy,
                               float* sum_dy_xhat, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                               const std::string& where) {
  auto* kernel = bn_backward_reduce_kernel<T, V, Gate, false>;
  if constexpr (Gate::kTakesSecondTerm) {
    if (dy2) kernel = bn_backward_reduce_kernel<T, V, Gate, true>;
  } else if (dy2) {
    fail("{}: {} takes a second gradient term with a stored mask only (a block end's)", where, fn);
  }
  const TileGrid g = grid_for<V>(kernel, m, c, kPairUnroll<T, V>, kReduceSplit, where);
  const auto parts = partials(fn, g, workspace, workspace_bytes, where);
  launch_tiles(kernel, g, stream, dy, dy2, gate, x, mean, inv_std, g, parts.first, parts.second);
  combine(g, parts, sum_dy, sum_dy_xhat, stream, where);
}

// The backward apply with `gate`, count values per channel in the sums; dx may alias dy or x.
template <class T, int V, class Gate>
void launch_bn_backward_apply(const T* dy, const Gate& gate, const T* x, const float* gamma, const float* mean,
                              const float* inv_std, const float* sum_dy, const float* sum_dy_xhat, int64_t m,
                              int64_t c, int64_t count, T* dx, cudaStream_t stream, const std::string& where) {
  auto* kernel = bn_backward_apply_kernel<T, V, Gate>;
  const TileGrid g = grid_for<V>(kernel, m, c, kPairUnroll<T, V>, kBackwardApplySplit, where);
  const float inv_m = static_cast<float>(1.0 / double(count));
  launch_tiles(kernel, g, stream, dy, gate, x, gamma, mean, inv_std, sum_dy, sum_dy_xhat, inv_m, g, dx);
  check_launch(where);
}

}  // namespace kiln::cuda::bn_parts
