// The layer norm on the GPU. Rows are normalized by teams of lanes: a row's C channels are C / V
// groups of V (16 bytes when C and the pointers allow, else one element), and a team of the
// groups' count rounded up to a power of two, at most a warp, handles one row; a warp holds 32 /
// lanes teams, so short rows (C = 16 in fp32: 4 lanes) do not leave most of a warp idle, and a row
// of ConvNeXt's 96..768 channels takes a warp whose lanes each load a few 16-byte groups. A lane
// keeps its groups in registers for the row's passes (mean, centered squares, output), at most 32
// floats of a tensor (C <= 1024 at full width); a wider row is read again on each pass, from L1
// or L2 where it has just been read. Sums within a team are shuffle butterflies (every lane ends
// with the same bits, in an order fixed by the team's width). The parameter gradients are column
// sums over all rows, which a team-per-row pass cannot make without atomics: a tile pass writes
// each tile of rows' partial sums (layer_norm_tiles.h) and a finishing pass adds them in tile order.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/common/channels_cuda.cuh"
#include "ops/layer_norm/layer_norm_cuda.h"
#include "ops/layer_norm/layer_norm_tiles.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
// The row kernels loop when there are more rows than teams; 2^16 blocks is far past what a GPU
// holds at once.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;
// Registers per lane for one tensor's share of a row; the backward keeps x's and dy's.
constexpr int kMaxCachedFloats = 32;
// The finishing pass: a block adds this many columns of partials, each over this many strands of
// tiles.
constexpr int kFinishColumns = 32;
constexpr int kFinishStrands = 16;

// --- Rows: one team of `lanes` lanes (a power of two, within a warp) per row ---

// The sum over the lane's team, a butterfly of shuffles: each step adds the same two values in
// both lanes of a pair, so every lane of the team ends with the same bits.
__device__ __forceinline__ float team_sum(float v, int lanes) {
  for (int offset = lanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Calls f(i, g) for the lane's groups g = first + i * step below `groups`, in order: unrolled over
// the kItems a lane may hold, or (kItems = 0, a row too wide for registers) a plain loop.
template <int kItems, class F>
__device__ __forceinline__ void for_each_group(int first, int step, int groups, F&& f) {
  if constexpr (kItems > 0) {
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (first + i * step < groups) f(i, first + i * step);
  } else {
    for (int g = first, i = 0; g < groups; g += step, ++i) f(i, g);
  }
}

// A lane's groups of one row of one tensor, as fp32: loaded once into registers, or (kItems = 0)
// read from memory each time they are asked for.
template <class T, int V, int kItems>
struct RowValues {
  float v[kItems > 0 ? kItems : 1][V];
  const T* row;
  __device__ __forceinline__ void load(const T* r, int first, int step, int groups) {
    row = r;
    if constexpr (kItems > 0)
      for_each_group<kItems>(first, step, groups, [&](int i, int g) { load_channels<V>(row + g * V, v[i]); });
  }
  __device__ __forceinline__ void get(int i, int g, float (&out)[V]) const {
    if constexpr (kItems > 0) {
#pragma unroll
      for (int j = 0; j < V; ++j) out[j] = v[i][j];
    } else {
      load_channels<V>(row + g * V, out);
    }
  }
};

// Where a lane's team is: the teams of a warp take consecutive rows, `offset` the team's among them,
// and `lane` the lane's place in its team. The warps stride over the rows together, so every lane
// of a warp runs the same iterations and the shuffles see the whole warp; a team past the last row
// takes part with no groups.
struct Team {
  int lanes, lane, offset;
  int64_t warp_first, stride;  // the warp's first row, and the rows all warps take per iteration
  __device__ explicit Team(int team_lanes) : lanes(team_lanes) {
    const int warp_lane = int(threadIdx.x) % kWarp;
    lane = warp_lane % lanes;
    offset = warp_lane / lanes;
    const int64_t teams = kWarp / lanes;
    warp_first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp * teams;
    stride = int64_t(gridDim.x) * blockDim.x / kWarp * teams;
  }
};

// mean and rstd in two passes over the lane's registers (centered squares: no cancellation), then
// y = (x - mean) * rstd * weight + bias.
template <class T, int V, int kItems>
__global__ void __launch_bounds__(kThreads) forward_kernel(const T* x, const float* weight, const float* bias, T* y,
                                                           float* mean_out, float* rstd_out, int64_t rows, int c,
                                                           int lanes, float eps) {
  const Team team(lanes);
  const int groups = c / V;
  for (int64_t base = team.warp_first; base < rows; base += team.stride) {
    const int64_t row = base + team.offset;
    const bool active = row < rows;
    const int mine = active ? groups : 0;
    const int64_t at = active ? row * c : 0;
    RowValues<T, V, kItems> xs;
    xs.load(x + at, team.lane, lanes, mine);
    float sum = 0;
    for_each_group<kItems>(team.lane, lanes, mine, [&](int i, int g) {
      float v[V];
      xs.get(i, g, v);
#pragma unroll
      for (int j = 0; j < V; ++j) sum += v[j];
    });
    const float mean = team_sum(sum, lanes) / float(c);
    float squares = 0;
    for_each_group<kItems>(team.lane, lanes, mine, [&](int i, int g) {
      float v[V];
      xs.get(i, g, v);
#pragma unroll
      for (int j = 0; j < V; ++j) squares += (v[j] - mean) * (v[j] - mean);
    });
    const float rstd = 1.f / sqrtf(team_sum(squares, lanes) / float(c) + eps);
    for_each_group<kItems>(team.lane, lanes, mine, [&](int i, int g) {
      float v[V], w[V], b[V], o[V];
      xs.get(i, g, v);
      load_channels<V>(weight + g * V, w);
      load_channels<V>(bias + g * V, b);
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = (v[j] - mean) * rstd * w[j] + b[j];
      store_channels<V>(y + at + g * V, o);
    });
    if (mean_out && active && team.lane == 0) mean_out[row] = mean, rstd_out[row] = rstd;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * weight, from the saved statistics.
template <class T, int V, int kItems>
__global__ void __launch_bounds__(kThreads) backward_kernel(const T* dy, const T* x, const float* weight,
                                                            const float* mean, const float* rstd, T* dx, int64_t rows,
                                                            int c, int lanes) {
  const Team team(lanes);
  const int groups = c / V;
  for (int64_t base = team.warp_first; base < rows; base += team.stride) {
    const int64_t row = base + team.offset;
    const bool active = row < rows;
    const int mine = active ? groups : 0;
    const int64_t at = active ? row * c : 0;
    const float m = active ? mean[row] : 0.f, s = active ? rstd[row] : 0.f;
    RowValues<T, V, kItems> xs, ds;
    xs.load(x + at, team.lane, lanes, mine);
    ds.load(dy + at, team.lane, lanes, mine);
    float sum_g = 0, sum_g_xhat = 0;
    for_each_group<kItems>(team.lane, lanes, mine, [&](int i, int g) {
      float v[V], d[V], w[V];
      xs.get(i, g, v);
      ds.get(i, g, d);
      load_channels<V>(weight + g * V, w);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float gj = d[j] * w[j];
        sum_g += gj;
        sum_g_xhat += gj * ((v[j] - m) * s);
      }
    });
    const float mean_g = team_sum(sum_g, lanes) / float(c), mean_g_xhat = team_sum(sum_g_xhat, lanes) / float(c);
    for_each_group<kItems>(team.lane, lanes, mine, [&](int i, int g) {
      float v[V], d[V], w[V], o[V];
      xs.get(i, g, v);
      ds.get(i, g, d);
      load_channels<V>(weight + g * V, w);
#pragma unroll
      for (int j = 0; j < V; ++j) o[j] = s * (d[j] * w[j] - mean_g - ((v[j] - m) * s) * mean_g_xhat);
      store_channels<V>(dx + at + g * V, o);
    });
  }
}

// --- The parameter gradients: tiles of rows, then their partials added in tile order ---

// Block (blockDim.x channel groups) x (blockDim.y row strands) per tile blockIdx.y: strand t sums
// rows t, t + blockDim.y, ... of the tile, then strand 0 adds the strands' sums in strand order and
// writes the tile's partial row: C sums of dy * xhat, then C sums of dy.
template <class T, int V>
__global__ void __launch_bounds__(kThreads) tile_sums_kernel(const T* dy, const T* x, const float* mean,
                                                             const float* rstd, float* partials, int64_t rows, int c,
                                                             int64_t tile_rows) {
  extern __shared__ float strands[];  // [blockDim.y][blockDim.x][2V]
  const int groups = c / V;
  const int cg = int(blockIdx.x * blockDim.x + threadIdx.x);
  const bool active = cg < groups;
  const int64_t r0 = int64_t(blockIdx.y) * tile_rows, r1 = r0 + tile_rows < rows ? r0 + tile_rows : rows;
  float sw[V] = {}, sb[V] = {};
  if (active)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      float d[V], v[V];
      load_channels<V>(dy + r * c + cg * V, d);
      load_channels<V>(x + r * c + cg * V, v);
      const float m = mean[r], s = rstd[r];
#pragma unroll
      for (int j = 0; j < V; ++j) sw[j] += d[j] * ((v[j] - m) * s), sb[j] += d[j];
    }
  float* mine = strands + (threadIdx.y * blockDim.x + threadIdx.x) * 2 * V;
#pragma unroll
  for (int j = 0; j < V; ++j) mine[j] = sw[j], mine[V + j] = sb[j];
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (unsigned t = 1; t < blockDim.y; ++t) {
    const float* other = strands + (t * blockDim.x + threadIdx.x) * 2 * V;
#pragma unroll
    for (int j = 0; j < V; ++j) sw[j] += other[j], sb[j] += other[V + j];
  }
  float* out = partials + int64_t(blockIdx.y) * 2 * c;
#pragma unroll
  for (int j = 0; j < V; ++j) out[cg * V + j] = sw[j], out[c + cg * V + j] = sb[j];
}

// Column k of the partials (k < C: dweight's, else dbias's) summed over the tiles: strand t adds
// tiles t, t + kFinishStrands, ..., then strand 0 adds the strands' sums in order.
__global__ void __launch_bounds__(kFinishColumns* kFinishStrands)
    finish_sums_kernel(const float* partials, int64_t tiles, int c, float* dweight, float* dbias) {
  __shared__ float strands[kFinishStrands][kFinishColumns];
  const int k = int(blockIdx.x) * kFinishColumns + int(threadIdx.x);
  const bool active = k < 2 * c;
  float sum = 0;
  if (active)
    for (int64_t t = threadIdx.y; t < tiles; t += kFinishStrands) sum += partials[t * 2 * c + k];
  strands[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (int t = 1; t < kFinishStrands; ++t) sum += strands[t][threadIdx.x];
  if (k < c) {
    if (dweight) dweight[k] = sum;
  } else if (dbias) {
    dbias[k - c] = sum;
  }
}

// --- Host side ---

void check_extents(const char* fn, const cpu::LayerNormGeom& g, const std::string& where) {
  if (g.rows < 0 || g.c < 1 || g.c > INT_MAX / 2)
    fail("{}: {} got rows = {}, c = {}; need rows >= 0 and 1 <= c < 2^30", where, fn, g.rows, g.c);
}

void need(const char* fn, const std::string& where, std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

// Calls f(std::integral_constant<int, V>) with the channel group the tensors allow: 16 bytes of T
// when C is a multiple of it and every pointer is 16-byte aligned, else one element.
template <class T, class F>
void with_width(int64_t c, std::initializer_list<const void*> pointers, F&& f) {
  if (c % kWide<T> == 0 && all_aligned(pointers, 16))
    f(std::integral_constant<int, kWide<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

// The lanes of a row's team: the groups' count rounded up to a power of two, at most a warp.
int team_lanes(int64_t groups) {
  int lanes = 1;
  while (lanes < groups && lanes < kWarp) lanes *= 2;
  return lanes;
}

// Calls f(std::integral_constant<int, kItems>) with the groups a lane keeps in registers: the
// fewest of 1, 2, 4, 8 that hold its share of the row within kMaxCachedFloats, else 0 (reread).
template <int V, class F>
void with_items(int64_t groups, int lanes, F&& f) {
  const int64_t share = (groups + lanes - 1) / lanes;
  if (share <= 1) return f(std::integral_constant<int, 1>{});
  if constexpr (2 * V <= kMaxCachedFloats)
    if (share <= 2) return f(std::integral_constant<int, 2>{});
  if constexpr (4 * V <= kMaxCachedFloats)
    if (share <= 4) return f(std::integral_constant<int, 4>{});
  if constexpr (8 * V <= kMaxCachedFloats)
    if (share <= 8) return f(std::integral_constant<int, 8>{});
  f(std::integral_constant<int, 0>{});
}

// Launches a row kernel (forward or backward) for rows of groups of V: `launch(kItems constant,
// blocks, lanes)`.
template <int V, class Launch>
void launch_rows(const cpu::LayerNormGeom& g, Launch&& launch) {
  const int64_t groups = g.c / V;
  const int lanes = team_lanes(groups);
  const int64_t rows_per_block = kThreads / lanes;
  const int blocks = static_cast<int>(std::min(ceil_div(g.rows, rows_per_block), kMaxBlocks));
  with_items<V>(groups, lanes, [&](auto items) { launch(items, blocks, lanes); });
}

template <class T>
void parameter_sums(const cpu::LayerNormGeom& g, const T* dy, const T* x, const float* mean, const float* rstd,
                    float* dweight, float* dbias, float* partials, cudaStream_t stream, const std::string& where) {
  const layer_norm_tiles::Tiles tiles = layer_norm_tiles::tiles(g.rows);
  with_width<T>(g.c, {dy, x}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t groups = g.c / V;
    // As many channel groups as fill a warp (fewer when C is small); the rest of the block strands
    // over the tile's rows (never more strands than rows).
    const int bx = static_cast<int>(std::min<int64_t>(groups, kWarp));
    const int by = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kThreads / bx, tiles.rows)));
    const dim3 grid(static_cast<unsigned>(ceil_div(groups, bx)), static_cast<unsigned>(tiles.count));
    const size_t shared = size_t(bx) * by * 2 * V * sizeof(float);
    tile_sums_kernel<T, V><<<grid, dim3(bx, by), shared, stream>>>(dy, x, mean, rstd, partials, g.rows,
                                                                    static_cast<int>(g.c), tiles.rows);
    check_launch(where);
  });
  const unsigned columns = static_cast<unsigned>(ceil_div(2 * g.c, kFinishColumns));
  finish_sums_kernel<<<columns, dim3(kFinishColumns, kFinishStrands), 0, stream>>>(
      partials, tiles.count, static_cast<int>(g.c), dweight, dbias);
  check_launch(where);
}

}  // namespace

void layer_norm_forward(DType dtype, const cpu::LayerNormGeom& g, const void* x, const float* weight,
                        const float* bias, float eps, void* y, float* mean, float* rstd, cudaStream_t stream,
                        const std::string& where) {
  check_extents("layer_norm_forward", g, where);
  if ((mean == nullptr) != (rstd == nullptr))
    fail("{}: layer_norm_forward saves both statistics or neither, got only {}", where, mean ? "mean" : "rstd");
  if (g.rows == 0) return;
  need("layer_norm_forward", where, {{x, "x"}, {weight, "weight"}, {bias, "bias"}, {y, "y"}});
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    with_width<T>(g.c, {px, py, weight, bias}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      launch_rows<V>(g, [&](auto items, int blocks, int lanes) {
        forward_kernel<T, V, decltype(items)::value><<<blocks, kThreads, 0, stream>>>(
            px, weight, bias, py, mean, rstd, g.rows, static_cast<int>(g.c), lanes, eps);
        check_launch(where);
      });
    });
  });
}

void layer_norm_backward(DType dtype, const cpu::LayerNormGeom& g, const void* dy, const void* x, const float* weight,
                         const float* mean, const float* rstd, void* dx, float* dweight, float* dbias, float* partials,
                         cudaStream_t stream, const std::string& where) {
  check_extents("layer_norm_backward", g, where);
  if (!dx && !dweight && !dbias) return;
  need("layer_norm_backward", where, {{dy, "dy"}, {x, "x"}, {weight, "weight"}, {mean, "mean"}, {rstd, "rstd"}});
  if ((dweight || dbias) && !partials)
    fail("{}: layer_norm_backward sums the parameter gradients through a workspace of {} floats, got nullptr", where,
         layer_norm_tiles::partial_elements(g.rows, g.c));
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* pdy = static_cast<const T*>(dy);
    const T* px = static_cast<const T*>(x);
    if (dx && g.rows > 0) {
      T* pdx = static_cast<T*>(dx);
      with_width<T>(g.c, {pdy, px, pdx, weight}, [&](auto width) {
        constexpr int V = decltype(width)::value;
        launch_rows<V>(g, [&](auto items, int blocks, int lanes) {
          backward_kernel<T, V, decltype(items)::value><<<blocks, kThreads, 0, stream>>>(
              pdy, px, weight, mean, rstd, pdx, g.rows, static_cast<int>(g.c), lanes);
          check_launch(where);
        });
      });
    }
    if (dweight || dbias) parameter_sums<T>(g, pdy, px, mean, rstd, dweight, dbias, partials, stream, where);
  });
}

}  // namespace kiln::cuda
