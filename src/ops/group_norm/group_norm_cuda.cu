#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/common/channels_cuda.cuh"
#include "ops/group_norm/group_norm_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;  // a power of two: the statistics kernels halve it in their trees
// Grid-stride loops cover what a grid does not: a grid's y extent stops at 65535, and 2^16 blocks
// of elementwise work is far past what a GPU holds at once.
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// --- Moments: count, mean and sum of squared deviations of a set of values ---

// Adds (nb, mean_b, m2_b) into (na, mean, m2) by Chan's pairwise formula: no cancellation of large
// sums of squares, whatever the values' offset from zero.
__device__ __forceinline__ void merge_moments(int64_t& na, float& mean, float& m2, int64_t nb, float mean_b,
                                              float m2_b) {
  if (nb == 0) return;
  if (na == 0) {
    na = nb, mean = mean_b, m2 = m2_b;
    return;
  }
  const float fb = float(nb) / float(na + nb);
  const float d = mean_b - mean;
  mean += d * fb;
  m2 += m2_b + d * d * float(na) * fb;
  na += nb;
}

// How many of a chunk's `len` positions strand t of `strands` takes (t, t + strands, ...).
__device__ __forceinline__ int64_t strand_rows(int64_t len, int64_t t, int64_t strands) {
  return t < len ? (len - t + strands - 1) / strands : 0;
}

// --- First stages: one block per (sample, chunk of positions) and run of channels ---
//
// A block is blockDim.x channel groups of V channels (one warp's worth where the channels allow)
// by blockDim.y strands; strand t takes the chunk's positions t, t + blockDim.y, ... Strand 0 then
// combines the strands' results in strand order: the order depends on the launch shape, which
// depends on the extents alone. A group of V channels lies within one normalization group.

// Per (sample, chunk, channel): the mean and sum of squared deviations of x over the chunk's
// positions (Welford's update along a strand).
template <class T, int V>
__global__ void __launch_bounds__(kThreads) chunk_moments_kernel(const T* x, int64_t n, int64_t hw, int64_t c,
                                                                 int64_t rows, int64_t chunks, float* mean_out,
                                                                 float* m2_out) {
  extern __shared__ float shared[];  // [2][blockDim.y][blockDim.x][V]: the strands' means, then their m2
  const int64_t cv = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = cv < c / V;
  const int64_t strands = blockDim.y, plane = strands * blockDim.x * V;
  float* means = shared;
  float* m2s = shared + plane;
  const int64_t slot = (int64_t{threadIdx.y} * blockDim.x + threadIdx.x) * V;
  for (int64_t piece = blockIdx.y; piece < n * chunks; piece += gridDim.y) {
    const int64_t img = piece / chunks, r0 = (piece - img * chunks) * rows, r1 = min(hw, r0 + rows);
    float mean[V] = {}, m2[V] = {};
    if (active) {
      int count = 0;
      for (int64_t r = r0 + threadIdx.y; r < r1; r += strands) {
        float v[V];
        load_channels<V>(x + (img * hw + r) * c + cv * V, v);
        const float inv = 1.f / float(++count);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = v[j] - mean[j];
          mean[j] += d * inv;
          m2[j] += d * (v[j] - mean[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) means[slot + j] = mean[j], m2s[slot + j] = m2[j];
    __syncthreads();
    if (threadIdx.y == 0 && active) {
      // Chan's combination (merge_moments) of each strand's moments into strand 0's, every strand
      // but the last ones of a short chunk holding rows.
      const int64_t len = r1 - r0;
      int64_t na = strand_rows(len, 0, strands);
      for (int64_t t = 1; t < strands; ++t) {
        const int64_t nb = strand_rows(len, t, strands);
        if (nb == 0) break;
        const int64_t other = (t * blockDim.x + threadIdx.x) * V;
        const float fb = float(nb) / float(na + nb);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float d = means[other + j] - mean[j];
          mean[j] += d * fb;
          m2[j] += m2s[other + j] + d * d * float(na) * fb;
        }
        na += nb;
      }
      store_channels<V>(mean_out + piece * c + cv * V, mean);
      store_channels<V>(m2_out + piece * c + cv * V, m2);
    }
    __syncthreads();  // the shared slots are rewritten for the next piece
  }
}

// Per (sample, chunk, channel): the sums of dy and of dy * xhat over the chunk's positions, xhat
// from the forward's saved statistics.
template <class T, int V>
__global__ void __launch_bounds__(kThreads) chunk_grad_sums_kernel(const T* dy, const T* x, const float* mean,
                                                                   const float* rstd, int64_t n, int64_t hw, int64_t c,
                                                                   int64_t groups, int64_t rows, int64_t chunks,
                                                                   float* dy_out, float* dy_xhat_out) {
  extern __shared__ float shared[];  // [2][blockDim.y][blockDim.x][V]
  const int64_t cv = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = cv < c / V;
  const int64_t group = active ? cv * V / (c / groups) : 0;
  const int64_t strands = blockDim.y, plane = strands * blockDim.x * V;
  const int64_t slot = (int64_t{threadIdx.y} * blockDim.x + threadIdx.x) * V;
  for (int64_t piece = blockIdx.y; piece < n * chunks; piece += gridDim.y) {
    const int64_t img = piece / chunks, r0 = (piece - img * chunks) * rows, r1 = min(hw, r0 + rows);
    float a[V] = {}, b[V] = {};
    if (active) {
      const float m = mean[img * groups + group], r = rstd[img * groups + group];
      for (int64_t row = r0 + threadIdx.y; row < r1; row += strands) {
        const int64_t at = (img * hw + row) * c + cv * V;
        float d[V], v[V];
        load_channels<V>(dy + at, d);
        load_channels<V>(x + at, v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          a[j] += d[j];
          b[j] += d[j] * ((v[j] - m) * r);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) shared[slot + j] = a[j], shared[plane + slot + j] = b[j];
    __syncthreads();
    if (threadIdx.y == 0 && active) {
      for (int64_t t = 1; t < strands; ++t) {
        const int64_t other = (t * blockDim.x + threadIdx.x) * V;
#pragma unroll
        for (int j = 0; j < V; ++j) a[j] += shared[other + j], b[j] += shared[plane + other + j];
      }
      store_channels<V>(dy_out + piece * c + cv * V, a);
      store_channels<V>(dy_xhat_out + piece * c + cv * V, b);
    }
    __syncthreads();
  }
}

// out[m][col] = sum over r of in[m][r][col], rows added by 8 strands, the strands in order.
__global__ void __launch_bounds__(kThreads) column_sums_kernel(const float* in, int64_t rows, int64_t cols,
                                                               int64_t matrices, float* out) {
  __shared__ float partial[8][32];
  const int64_t col = blockIdx.x * int64_t{32} + threadIdx.x;
  for (int64_t m = blockIdx.y; m < matrices; m += gridDim.y) {
    float acc = 0;
    if (col < cols)
      for (int64_t r = threadIdx.y; r < rows; r += 8) acc += in[(m * rows + r) * cols + col];
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
      for (int t = 1; t < 8; ++t) acc += partial[t][threadIdx.x];
      out[m * cols + col] = acc;
    }
    __syncthreads();
  }
}

// --- Second stages: one block per (sample, group), its kThreads threads combined in a fixed tree ---

// The forward's statistics: Chan's combination of the group's (chunk, channel) moments. Writes
// mean and rstd = 1 / sqrt(var + eps) to the workspace (for the normalization) and to the saved
// tensors where given.
__global__ void __launch_bounds__(kThreads) group_moments_kernel(const float* chunk_mean, const float* chunk_m2,
                                                                 int64_t n, int64_t hw, int64_t c, int64_t groups,
                                                                 int64_t rows, int64_t chunks, float eps,
                                                                 float* stat_mean, float* stat_rstd, float* saved_mean,
                                                                 float* saved_rstd) {
  __shared__ float means[kThreads], m2s[kThreads];
  __shared__ int64_t counts[kThreads];
  const int t = threadIdx.x;
  const int64_t cg = c / groups;
  for (int64_t s = blockIdx.x; s < n * groups; s += gridDim.x) {
    const int64_t img = s / groups, first = (s - img * groups) * cg;
    int64_t na = 0;
    float mean = 0, m2 = 0;
    for (int64_t i = t; i < chunks * cg; i += kThreads) {
      const int64_t k = i / cg, at = (img * chunks + k) * c + first + (i - k * cg);
      merge_moments(na, mean, m2, min(rows, hw - k * rows), chunk_mean[at], chunk_m2[at]);
    }
    means[t] = mean, m2s[t] = m2, counts[t] = na;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (t < half) {
        merge_moments(na, mean, m2, counts[t + half], means[t + half], m2s[t + half]);
        means[t] = mean, m2s[t] = m2, counts[t] = na;
      }
      __syncthreads();
    }
    if (t == 0) {
      const float r = 1.f / sqrtf(m2 / float(na) + eps);
      stat_mean[s] = mean, stat_rstd[s] = r;
      if (saved_mean) saved_mean[s] = mean, saved_rstd[s] = r;
    }
    __syncthreads();
  }
}

// The backward's mean(g) and mean(g * xhat) per (sample, group), g = dy * weight: weight times each
// channel's sums over the sample's positions, added over the group's channels.
__global__ void __launch_bounds__(kThreads) group_grad_means_kernel(const float* sum_dy, const float* sum_dy_xhat,
                                                                    const float* weight, int64_t n, int64_t c,
                                                                    int64_t groups, float count, float* mean_g,
                                                                    float* mean_g_xhat) {
  __shared__ float as[kThreads], bs[kThreads];
  const int t = threadIdx.x;
  const int64_t cg = c / groups;
  for (int64_t s = blockIdx.x; s < n * groups; s += gridDim.x) {
    const int64_t img = s / groups, first = (s - img * groups) * cg;
    float a = 0, b = 0;
    for (int64_t j = t; j < cg; j += kThreads) {
      const float w = weight[first + j];
      a += w * sum_dy[img * c + first + j];
      b += w * sum_dy_xhat[img * c + first + j];
    }
    as[t] = a, bs[t] = b;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (t < half) as[t] += as[t + half], bs[t] += bs[t + half];
      __syncthreads();
    }
    if (t == 0) mean_g[s] = as[0] / count, mean_g_xhat[s] = bs[0] / count;
    __syncthreads();
  }
}

// --- Elementwise passes: an item is V consecutive channels of one position ---

// y = (x - mean) * (rstd * weight) + bias.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) normalize_kernel(const T* x, const float* weight, const float* bias,
                                                             const float* mean, const float* rstd, T* y, I hw,
                                                             I vgroups, I group_vgroups, I groups, I items) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < items; i += I(gridDim.x) * blockDim.x) {
    const I row = i / vgroups, cv = i - row * vgroups;
    const I s = (row / hw) * groups + cv / group_vgroups;
    const float m = mean[s], r = rstd[s];
    float v[V], o[V];
    load_channels<V>(x + i * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = (v[j] - m) * (r * weight[cv * V + j]) + bias[cv * V + j];
    store_channels<V>(y + i * V, o);
  }
}

// dx = rstd * (dy * weight - mean(g) - xhat * mean(g * xhat)).
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) input_grad_kernel(const T* dy, const T* x, const float* weight,
                                                              const float* mean, const float* rstd,
                                                              const float* mean_g, const float* mean_g_xhat, T* dx,
                                                              I hw, I vgroups, I group_vgroups, I groups, I items) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < items; i += I(gridDim.x) * blockDim.x) {
    const I row = i / vgroups, cv = i - row * vgroups;
    const I s = (row / hw) * groups + cv / group_vgroups;
    const float m = mean[s], r = rstd[s], a = mean_g[s], b = mean_g_xhat[s];
    float d[V], v[V], o[V];
    load_channels<V>(dy + i * V, d);
    load_channels<V>(x + i * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = r * (d[j] * weight[cv * V + j] - a - (v[j] - m) * r * b);
    store_channels<V>(dx + i * V, o);
  }
}

// --- Host side ---

void check_extents(const char* fn, const GroupNormGeom& g, const std::string& where) {
  if (g.n < 1 || g.hw < 1 || g.c < 1 || g.groups < 1 || g.c % g.groups != 0 || g.c > INT_MAX || g.hw > INT_MAX)
    fail("{}: {} got n = {}, hw = {}, c = {}, groups = {}; need n, hw, c >= 1 (hw, c < 2^31) and groups dividing c",
         where, fn, g.n, g.hw, g.c, g.groups);
}

void need(const char* fn, const std::string& where, std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

// Calls f(std::integral_constant<int, V>) with the channel group the tensors allow: 16 bytes when a
// normalization group's channels are a multiple of it (so a channel group never straddles two) and
// every pointer is 16-byte aligned, else one element.
template <class T, class F>
void with_width(const GroupNormGeom& g, std::initializer_list<const void*> pointers, F&& f) {
  if (g.group_channels() % kWide<T> == 0 && all_aligned(pointers, 16))
    f(std::integral_constant<int, kWide<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

// The first stages' launch: as many channel groups as fill a warp (fewer when C is small), the
// rest of the block strands over a chunk's positions (never more strands than its rows); one block
// row per (sample, chunk), looping past the grid's 65535.
struct ChunkLaunch {
  dim3 grid, block;
  size_t shared;
};
ChunkLaunch chunk_launch(const GroupNormGeom& g, const group_norm_gpu::Chunks& ch, int v) {
  const int64_t vgroups = g.c / v;
  const int bx = static_cast<int>(std::min<int64_t>(vgroups, 32));
  const int by = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kThreads / bx, ch.rows)));
  return {dim3(static_cast<unsigned>(ceil_div(vgroups, bx)), static_cast<unsigned>(std::min(g.n * ch.count, kMaxGridY))),
          dim3(static_cast<unsigned>(bx), static_cast<unsigned>(by)), size_t(2) * bx * by * v * sizeof(float)};
}

int statistic_blocks(const GroupNormGeom& g) { return static_cast<int>(std::min(g.statistics(), kMaxBlocks)); }

void column_sums(const float* in, int64_t rows, int64_t cols, int64_t matrices, float* out, cudaStream_t stream,
                 const std::string& where) {
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, 32)), static_cast<unsigned>(std::min(matrices, kMaxGridY)));
  column_sums_kernel<<<grid, dim3(32, 8), 0, stream>>>(in, rows, cols, matrices, out);
  check_launch(where);
}

// Launches an elementwise pass over the map's items of V channels, with 32-bit indices when every
// element offset fits (cheaper division).
template <int V, class Launch>
void elementwise(const GroupNormGeom& g, Launch&& launch) {
  const int64_t items = g.elements() / V;
  const int blocks = static_cast<int>(std::min(ceil_div(items, kThreads), kMaxBlocks));
  auto run = [&](auto index) {
    using I = decltype(index);
    launch(blocks, I(g.hw), I(g.c / V), I(g.group_channels() / V), I(g.groups), I(items));
  };
  if (g.elements() <= INT32_MAX)
    run(uint32_t{});
  else
    run(int64_t{});
}

}  // namespace

void group_norm_forward(DType dtype, const GroupNormGeom& g, const void* x, const float* weight, const float* bias,
                        float eps, void* y, float* mean, float* rstd, float* workspace, cudaStream_t stream,
                        const std::string& where) {
  check_extents("group_norm_forward", g, where);
  need("group_norm_forward", where, {{x, "x"}, {weight, "weight"}, {bias, "bias"}, {y, "y"}, {workspace, "workspace"}});
  if (!mean != !rstd) fail("{}: group_norm_forward saves the mean and the rstd together, got one of them", where);
  const group_norm_gpu::Chunks ch = group_norm_gpu::chunks(g);
  const group_norm_gpu::Workspace ws = group_norm_gpu::workspace(g);
  float* chunk_mean = workspace + ws.partials;
  float* chunk_m2 = chunk_mean + g.n * ch.count * g.c;
  float* stat_mean = workspace + ws.coefficients;
  float* stat_rstd = stat_mean + g.statistics();
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    with_width<T>(g, {x, y}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const ChunkLaunch l = chunk_launch(g, ch, V);
      chunk_moments_kernel<T, V><<<l.grid, l.block, l.shared, stream>>>(px, g.n, g.hw, g.c, ch.rows, ch.count,
                                                                          chunk_mean, chunk_m2);
      check_launch(where);
      group_moments_kernel<<<statistic_blocks(g), kThreads, 0, stream>>>(
          chunk_mean, chunk_m2, g.n, g.hw, g.c, g.groups, ch.rows, ch.count, eps, stat_mean, stat_rstd, mean, rstd);
      check_launch(where);
      elementwise<V>(g, [&](int blocks, auto hw, auto vgroups, auto group_vgroups, auto groups, auto items) {
        using I = decltype(items);
        normalize_kernel<T, V, I><<<blocks, kThreads, 0, stream>>>(px, weight, bias, stat_mean, stat_rstd, py, hw,
                                                                    vgroups, group_vgroups, groups, items);
        check_launch(where);
      });
    });
  });
}

void group_norm_backward(DType dtype, const GroupNormGeom& g, const void* dy, const void* x, const float* weight,
                         const float* mean, const float* rstd, void* dx, float* dweight, float* dbias,
                         float* workspace, cudaStream_t stream, const std::string& where) {
  check_extents("group_norm_backward", g, where);
  need("group_norm_backward", where,
       {{dy, "dy"}, {x, "x"}, {weight, "weight"}, {mean, "mean"}, {rstd, "rstd"}, {dweight, "dweight"},
        {dbias, "dbias"}, {workspace, "workspace"}});
  const group_norm_gpu::Chunks ch = group_norm_gpu::chunks(g);
  const group_norm_gpu::Workspace ws = group_norm_gpu::workspace(g);
  float* chunk_dy = workspace + ws.partials;  // [2][n][chunks][c]: sums of dy, then of dy * xhat
  float* chunk_dy_xhat = chunk_dy + g.n * ch.count * g.c;
  float* sample_dy = workspace + ws.sample_sums;  // [2][n][c]
  float* sample_dy_xhat = sample_dy + g.n * g.c;
  float* mean_g = workspace + ws.coefficients;
  float* mean_g_xhat = mean_g + g.statistics();
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* pdy = static_cast<const T*>(dy);
    const T* px = static_cast<const T*>(x);
    with_width<T>(g, {dy, x, dx}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const ChunkLaunch l = chunk_launch(g, ch, V);
      chunk_grad_sums_kernel<T, V><<<l.grid, l.block, l.shared, stream>>>(
          pdy, px, mean, rstd, g.n, g.hw, g.c, g.groups, ch.rows, ch.count, chunk_dy, chunk_dy_xhat);
      check_launch(where);
      // The chunks of each sample (both planes: 2n matrices of chunks x c), then the samples.
      column_sums(chunk_dy, ch.count, g.c, 2 * g.n, sample_dy, stream, where);
      column_sums(sample_dy, g.n, g.c, 1, dbias, stream, where);
      column_sums(sample_dy_xhat, g.n, g.c, 1, dweight, stream, where);
      if (!dx) return;
      group_grad_means_kernel<<<statistic_blocks(g), kThreads, 0, stream>>>(
          sample_dy, sample_dy_xhat, weight, g.n, g.c, g.groups, float(g.group_elements()), mean_g, mean_g_xhat);
      check_launch(where);
      elementwise<V>(g, [&](int blocks, auto hw, auto vgroups, auto group_vgroups, auto groups, auto items) {
        using I = decltype(items);
        input_grad_kernel<T, V, I><<<blocks, kThreads, 0, stream>>>(pdy, px, weight, mean, rstd, mean_g, mean_g_xhat,
                                                                     static_cast<T*>(dx), hw, vgroups, group_vgroups,
                                                                     groups, items);
        check_launch(where);
      });
    });
  });
}

}  // namespace kiln::cuda
