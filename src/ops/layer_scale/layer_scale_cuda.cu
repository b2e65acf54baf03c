#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/common/channels_cuda.cuh"
#include "ops/layer_scale/layer_scale_cuda.h"
#include "ops/layer_scale/layer_scale_partials.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
// The scale kernel loops when there are more items than threads; 2^16 blocks (16M threads) is far
// past what a GPU holds at once and keeps a 32-bit item index from wrapping on its last step.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;
// The second pass: a block is kSumChannels channels wide, its other threads strands over chunks.
constexpr int kSumChannels = 32;

// v * g rounded once to T. fp32's product is correctly rounded; a 16-bit value times an fp32 one
// has up to 35 significant bits, exact in double, so rounding that once gives the correctly
// rounded product (an fp32 product rounded again to fp16 or bf16 is off by one unit where the
// first rounding lands on the second's tie).
template <class T>
__device__ __forceinline__ T scaled(float v, float g);
template <>
__device__ __forceinline__ float scaled<float>(float v, float g) {
  return __fmul_rn(v, g);
}
template <>
__device__ __forceinline__ __half scaled<__half>(float v, float g) {
  return __double2half(static_cast<double>(v) * static_cast<double>(g));
}
template <>
__device__ __forceinline__ __nv_bfloat16 scaled<__nv_bfloat16>(float v, float g) {
  return __double2bfloat16(static_cast<double>(v) * static_cast<double>(g));
}

// V channels of one row, scaled by their factors and stored.
template <class T, int V>
__device__ __forceinline__ void store_scaled(T* out, const float (&v)[V], const float (&g)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int j = 0; j < V; ++j) pk.v[j] = scaled<T>(v[j], g[j]);
  store_pack<T, V>(out, pk);
}

// out[row, c] = in[row, c] * gamma[c]; an item is V consecutive channels of one row.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) scale_kernel(const T* in, const float* gamma, T* out, I groups, I items) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < items; i += I(gridDim.x) * blockDim.x) {
    const I cg = i % groups;
    float v[V], g[V];
    load_channels<V>(in + i * V, v);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = gamma[cg * V + j];
    store_scaled<T, V>(out + i * V, v, g);
  }
}

// dgamma's first pass. Block (blockIdx.x, blockIdx.y) holds blockDim.x channel groups of chunk
// blockIdx.y, rows [blockIdx.y * chunk_rows, + chunk_rows) (fewer for the last, none past the
// rows: its partials are zeros). Strand t (threadIdx.y) adds rows t, t + blockDim.y, ... of its
// channels in fp32, then strand 0 adds the strands' sums in strand order and writes the chunk's
// row of `partials`. With kDx, dx = dy * gamma on the way (dy read once). The order depends on
// the extents and the launch shape, which depends on them alone.
template <class T, int V, bool kDx>
__global__ void __launch_bounds__(kThreads) chunk_sums_kernel(const T* dy, const T* x, const float* gamma, T* dx,
                                                              float* partials, int64_t rows, int64_t c,
                                                              int64_t chunk_rows) {
  extern __shared__ float strand_sums[];  // [blockDim.y][blockDim.x][V]
  const int64_t groups = c / V;
  const int64_t cg = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = cg < groups;
  const int64_t r0 = blockIdx.y * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  float acc[V] = {};
  if (active) {
    float g[V] = {};
    if (kDx) {
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = gamma[cg * V + j];
    }
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      const int64_t at = r * c + cg * V;
      float d[V], xv[V];
      load_channels<V>(dy + at, d);
      load_channels<V>(x + at, xv);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += d[j] * xv[j];
      if (kDx) store_scaled<T, V>(dx + at, d, g);
    }
  }
  float* mine = strand_sums + (threadIdx.y * blockDim.x + threadIdx.x) * V;
#pragma unroll
  for (int j = 0; j < V; ++j) mine[j] = acc[j];
  __syncthreads();
  if (threadIdx.y != 0 || !active) return;
  for (unsigned t = 1; t < blockDim.y; ++t) {
    const float* other = strand_sums + (t * blockDim.x + threadIdx.x) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] += other[j];
  }
  float* row = partials + blockIdx.y * c + cg * V;
#pragma unroll
  for (int j = 0; j < V; ++j) row[j] = acc[j];
}

// dgamma's second pass: dgamma[c] = the chunks' partials added in a fixed order. Strand t
// (threadIdx.y) adds chunks t, t + blockDim.y, ... in order, then strand 0 adds the strands' sums
// in strand order.
__global__ void __launch_bounds__(kThreads) combine_kernel(const float* partials, float* dgamma, int64_t chunks,
                                                           int64_t c) {
  __shared__ float strand_sums[kThreads];
  const int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  float sum = 0.f;
  if (k < c)
    for (int64_t p = threadIdx.y; p < chunks; p += blockDim.y) sum += partials[p * c + k];
  strand_sums[threadIdx.y * blockDim.x + threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || k >= c) return;
  for (unsigned t = 1; t < blockDim.y; ++t) sum += strand_sums[t * blockDim.x + threadIdx.x];
  dgamma[k] = sum;
}

// --- Host side ---

void check_extents(const char* fn, const cpu::LayerScaleGeom& g, const std::string& where) {
  if (g.rows < 0 || g.c < 0 || g.c > INT_MAX)
    fail("{}: {} got rows = {}, c = {}; need rows >= 0 and 0 <= c < 2^31", where, fn, g.rows, g.c);
}

void need(const char* fn, const std::string& where, std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

// Calls f(std::integral_constant<int, V>) with the channel group the tensors allow: 16 bytes when
// C is a multiple of it and every element pointer is 16-byte aligned, else one element.
template <class T, class F>
void with_width(int64_t c, std::initializer_list<const void*> pointers, F&& f) {
  if (c % kWide<T> == 0 && all_aligned(pointers, 16))
    f(std::integral_constant<int, kWide<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

// out = in * gamma broadcast over the rows.
template <class T>
void scale(const cpu::LayerScaleGeom& g, const T* in, const float* gamma, T* out, cudaStream_t stream,
           const std::string& where) {
  with_width<T>(g.c, {in, out}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    auto launch = [&](auto index) {  // 32-bit item indices when every element offset fits (cheaper division)
      using I = decltype(index);
      const int64_t items = g.elements() / V;
      const int blocks = static_cast<int>(std::min(ceil_div(items, kThreads), kMaxBlocks));
      scale_kernel<T, V, I><<<blocks, kThreads, 0, stream>>>(in, gamma, out, I(g.c / V), I(items));
      check_launch(where);
    };
    if (g.elements() <= INT32_MAX)
      launch(uint32_t{});
    else
      launch(int64_t{});
  });
}

template <class T>
void backward(const cpu::LayerScaleGeom& g, const T* dy, const T* x, const float* gamma, T* dx, float* dgamma,
              float* partials, cudaStream_t stream, const std::string& where) {
  const int64_t chunks = layer_scale_partial_chunks(g.rows), chunk_rows = layer_scale_chunk_rows(g.rows);
  with_width<T>(g.c, {dy, x, dx}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t groups = g.c / V;
    // As many channel groups as fill a warp (fewer when C is small), the rest of the block
    // strands over the chunk's rows (never more strands than rows).
    const int bx = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, 32)));
    const int by = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kThreads / bx, chunk_rows)));
    const dim3 grid(static_cast<unsigned>(ceil_div(groups, bx)), static_cast<unsigned>(chunks));
    const size_t shared = size_t(bx) * by * V * sizeof(float);
    if (dx)
      chunk_sums_kernel<T, V, true><<<grid, dim3(bx, by), shared, stream>>>(dy, x, gamma, dx, partials, g.rows, g.c,
                                                                            chunk_rows);
    else
      chunk_sums_kernel<T, V, false><<<grid, dim3(bx, by), shared, stream>>>(dy, x, gamma, dx, partials, g.rows, g.c,
                                                                             chunk_rows);
    check_launch(where);
  });
  const int sum_by = static_cast<int>(std::min<int64_t>(kThreads / kSumChannels, chunks));
  combine_kernel<<<static_cast<unsigned>(ceil_div(g.c, kSumChannels)), dim3(kSumChannels, sum_by), 0, stream>>>(
      partials, dgamma, chunks, g.c);
  check_launch(where);
}

}  // namespace

void layer_scale_forward(DType dtype, const cpu::LayerScaleGeom& g, const void* x, const float* gamma, void* y,
                         cudaStream_t stream, const std::string& where) {
  check_extents("layer_scale_forward", g, where);
  if (g.elements() == 0) return;
  need("layer_scale_forward", where, {{x, "x"}, {gamma, "gamma"}, {y, "y"}});
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    scale<T>(g, static_cast<const T*>(x), gamma, static_cast<T*>(y), stream, where);
  });
}

void layer_scale_backward(DType dtype, const cpu::LayerScaleGeom& g, const void* dy, const void* x,
                          const float* gamma, void* dx, float* dgamma, float* partials, cudaStream_t stream,
                          const std::string& where) {
  check_extents("layer_scale_backward", g, where);
  if (g.c == 0) return;
  need("layer_scale_backward", where,
       {{dy, "dy"}, {x, "x"}, {gamma, "gamma"}, {dgamma, "dgamma"}, {partials, "partials"}});
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    backward<T>(g, static_cast<const T*>(dy), static_cast<const T*>(x), gamma, static_cast<T*>(dx), dgamma, partials,
                stream, where);
  });
}

}  // namespace kiln::cuda
