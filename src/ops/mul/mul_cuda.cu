#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/common/channels_cuda.cuh"
#include "ops/common/flat_cuda.cuh"
#include "ops/mul/mul_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
// The item kernels loop when there are more items than threads; 2^16 blocks (16M threads) is far
// past what a GPU holds at once and keeps a 32-bit item index from wrapping on its last step.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// --- Maps of one shape: flat kernels (flat_cuda.cuh), 8 elements per thread and step ---

// out1 = x * s1 and out2 = x * s2, each where given: the forward is out1 = a * b alone, the
// backward reads dy (x) once for both gradients.
template <class T>
struct Products {
  const T* x;
  const T* s1;
  T* out1;
  const T* s2;
  T* out2;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float xv[8];
    load8(x, i0, n, vec, xv);
    if (out1) product(s1, out1, i0, n, vec, xv);
    if (out2) product(s2, out2, i0, n, vec, xv);
  }
  __device__ static void product(const T* s, T* out, int64_t i0, int64_t n, bool vec, const float (&xv)[8]) {
    float sv[8], o[8];
    load8(s, i0, n, vec, sv);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = xv[j] * sv[j];
    store8(out, i0, n, vec, o);
  }
};

// --- A map and its per-channel gate ---

// out[row, c] = x[row, c] * gate[row / hw, c]; an item is V consecutive channels of one row.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) gate_scale_kernel(const T* x, const T* gate, T* out, I hw, I groups,
                                                              I items) {
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < items; i += I(gridDim.x) * blockDim.x) {
    const I row = i / groups;
    const I cg = i - row * groups;
    float xv[V], sv[V], o[V];
    load_channels<V>(x + i * V, xv);
    load_channels<V>(gate + ((row / hw) * groups + cg) * V, sv);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = xv[j] * sv[j];
    store_channels<V>(out + i * V, o);
  }
}

// The gate's gradient db[n, c] = sum over rows r of dy[n, r, c] * a[n, r, c], and with kDa the
// map's da = dy * gate on the way (dy read once). A block of (blockDim.x channel groups) x
// (blockDim.y row strands) per image, as global average pooling's forward (pool_cuda.cu): strand
// t sums rows t, t + blockDim.y, ... of its channels, then strand 0 adds the strands' partials in
// strand order. The order depends on the launch shape alone, so every run gives the same bits.
template <class T, int V, bool kDa>
__global__ void __launch_bounds__(kThreads) gate_backward_kernel(const T* dy, const T* a, const T* gate, T* da, T* db,
                                                                 int64_t n, int64_t hw, int64_t c) {
  extern __shared__ float partial[];  // [blockDim.y][blockDim.x][V]
  const int64_t groups = c / V;
  const int64_t cg = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = cg < groups;
  float* mine = partial + (threadIdx.y * blockDim.x + threadIdx.x) * V;
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    float acc[V] = {};
    if (active) {
      float s[V] = {};
      if (kDa) load_channels<V>(gate + img * c + cg * V, s);
      for (int64_t r = threadIdx.y; r < hw; r += blockDim.y) {
        const int64_t at = (img * hw + r) * c + cg * V;
        float d[V], x[V];
        load_channels<V>(dy + at, d);
        load_channels<V>(a + at, x);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += d[j] * x[j];
        if (kDa) {
          float o[V];
#pragma unroll
          for (int j = 0; j < V; ++j) o[j] = d[j] * s[j];
          store_channels<V>(da + at, o);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) mine[j] = acc[j];
    __syncthreads();
    if (threadIdx.y == 0 && active) {
      for (unsigned t = 1; t < blockDim.y; ++t) {
        const float* other = partial + (t * blockDim.x + threadIdx.x) * V;
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += other[j];
      }
      store_channels<V>(db + img * c + cg * V, acc);
    }
    __syncthreads();  // the partials are rewritten for the next image
  }
}

// --- Host side ---

void check_extents(const char* fn, const cpu::MulGeom& g, const std::string& where) {
  if (g.n < 0 || g.hw < 1 || g.c < 0 || g.c > INT_MAX || g.hw > INT_MAX)
    fail("{}: {} got n = {}, hw = {}, c = {}; need n >= 0, 1 <= hw < 2^31 and 0 <= c < 2^31", where, fn, g.n, g.hw,
         g.c);
}

void need(const char* fn, const std::string& where, std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

// Calls f(std::integral_constant<int, V>) with the channel group the tensors allow: 16 bytes when
// C is a multiple of it and every pointer is 16-byte aligned, else one element.
template <class T, class F>
void with_width(int64_t c, std::initializer_list<const void*> pointers, F&& f) {
  if (c % kWide<T> == 0 && all_aligned(pointers, 16))
    f(std::integral_constant<int, kWide<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

template <class T>
void products(const T* x, const T* s1, T* out1, const T* s2, T* out2, int64_t n, cudaStream_t stream,
              const std::string& where) {
  launch_flat(Products<T>{x, s1, out1, s2, out2}, n, flat_vectorizable({x, s1, out1, s2, out2}), stream, where);
}

// out = x * gate broadcast over each image's rows.
template <class T>
void gate_scale(const cpu::MulGeom& g, const T* x, const T* gate, T* out, cudaStream_t stream, const std::string& where) {
  with_width<T>(g.c, {x, gate, out}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    auto launch = [&](auto index) {  // 32-bit item indices when every element offset fits (cheaper division)
      using I = decltype(index);
      const int64_t items = g.map_elements() / V;
      const int blocks = static_cast<int>(std::min(ceil_div(items, kThreads), kMaxBlocks));
      gate_scale_kernel<T, V, I><<<blocks, kThreads, 0, stream>>>(x, gate, out, I(g.hw), I(g.c / V), I(items));
      check_launch(where);
    };
    if (g.map_elements() <= INT32_MAX)
      launch(uint32_t{});
    else
      launch(int64_t{});
  });
}

template <class T>
void gate_backward(const cpu::MulGeom& g, const T* dy, const T* a, const T* gate, T* da, T* db, cudaStream_t stream,
                   const std::string& where) {
  with_width<T>(g.c, {dy, a, gate, da, db}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t groups = g.c / V;
    // As many channel groups as fill a warp (fewer when C is small), the rest of the block
    // strands over the rows (never more strands than rows).
    const int bx = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, 32)));
    const int by = static_cast<int>(std::min<int64_t>(kThreads / bx, g.hw));
    const dim3 grid(static_cast<unsigned>(ceil_div(groups, bx)), static_cast<unsigned>(std::min<int64_t>(g.n, 65535)));
    const size_t shared = size_t(bx) * by * V * sizeof(float);
    if (da)
      gate_backward_kernel<T, V, true><<<grid, dim3(bx, by), shared, stream>>>(dy, a, gate, da, db, g.n, g.hw, g.c);
    else
      gate_backward_kernel<T, V, false><<<grid, dim3(bx, by), shared, stream>>>(dy, a, gate, da, db, g.n, g.hw, g.c);
    check_launch(where);
  });
}

}  // namespace

void mul_forward(DType dtype, const cpu::MulGeom& g, const void* a, const void* b, void* y, cudaStream_t stream,
                 const std::string& where) {
  check_extents("mul_forward", g, where);
  if (g.map_elements() == 0) return;
  need("mul_forward", where, {{a, "a"}, {b, "b"}, {y, "y"}});
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    if (g.gate)
      gate_scale<T>(g, pa, pb, static_cast<T*>(y), stream, where);
    else
      products<T>(pa, pb, static_cast<T*>(y), nullptr, nullptr, g.map_elements(), stream, where);
  });
}

void mul_backward(DType dtype, const cpu::MulGeom& g, const void* dy, const void* a, const void* b, void* da,
                  void* db, cudaStream_t stream, const std::string& where) {
  check_extents("mul_backward", g, where);
  if (g.map_elements() == 0 || (!da && !db)) return;
  need("mul_backward", where, {{dy, "dy"}, {a, "a"}, {b, "b"}});
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    const T* pdy = static_cast<const T*>(dy);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* pda = static_cast<T*>(da);
    T* pdb = static_cast<T*>(db);
    if (!g.gate)
      products<T>(pdy, pb, pda, pa, pdb, g.map_elements(), stream, where);
    else if (!db)
      gate_scale<T>(g, pdy, pb, pda, stream, where);
    else
      gate_backward<T>(g, pdy, pa, pb, pda, pdb, stream, where);
  });
}

}  // namespace kiln::cuda
