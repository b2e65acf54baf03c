#include <math_constants.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/common/channels_cuda.cuh"
#include "ops/pool/pool_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
// The sliding-window kernels give each thread one (pixel, channel group) item and loop when
// there are more items than threads; 2^16 blocks (16M threads) is far past what a GPU holds at
// once, and keeps a 32-bit item index from wrapping on its last step.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// The geometry in the ints the kernels index with (window_of checks that every extent fits), and
// average pooling's divisor rule: include_pad, PyTorch's count_include_pad; one_divisor, every
// output's divisor is k*k (cpu::avgpool_divisor_is_window).
struct Window {
  int h, w, c, ho, wo, k, s, p;
  bool include_pad = true, one_divisor = true;
};

// An adaptive pooling's sizes: input h x w, output ho x wo, c channels.
struct AdaptiveWindow {
  int h, w, c, ho, wo;
};

// V consecutive U8 window indices (max pooling's argmax) <-> ints: one V-byte access, aligned
// whenever the activations' V-element access is (same element offset, 16-byte aligned bases).
template <int V>
__device__ __forceinline__ void load_indices(const uint8_t* p, int (&out)[V]) {
  const Pack<uint8_t, V> pk = load_pack<uint8_t, V>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = pk.v[j];
}

template <int V>
__device__ __forceinline__ void store_indices(uint8_t* p, const int (&v)[V]) {
  Pack<uint8_t, V> pk;
#pragma unroll
  for (int j = 0; j < V; ++j) pk.v[j] = static_cast<uint8_t>(v[j]);  // < k*k <= 256 (checked on the host)
  store_pack<uint8_t, V>(p, pk);
}

// Item i of a sliding-window kernel: one pixel (n, row, col) of a rows x cols map and its
// channel group [c0, c0 + V). Items run channel group fastest, so a warp reads along C and the
// item's element offset is i * V.
struct Item {
  int n, row, col, c0;
};

template <int V, class I>
__device__ __forceinline__ Item item_at(I i, int groups, int rows, int cols) {
  I pixel = i / I(groups);
  Item t;
  t.c0 = static_cast<int>(i - pixel * I(groups)) * V;
  t.col = static_cast<int>(pixel % I(cols));
  pixel /= I(cols);
  t.row = static_cast<int>(pixel % I(rows));
  t.n = static_cast<int>(pixel / I(rows));
  return t;
}

// Element offset of channel 0 of pixel (n, row, col) in an (N, rows, cols, c) tensor.
template <class I>
__device__ __forceinline__ I pixel_offset(int n, int row, int col, int rows, int cols, int c) {
  return ((I(n) * I(rows) + I(row)) * I(cols) + I(col)) * I(c);
}

// The outputs [lo, hi) along one axis whose windows [o*s - p, o*s - p + k) hold input i: the
// gathers' replacement for a scatter (pool_cpu.cpp's avgpool_backward uses the same range).
__device__ __forceinline__ void covering(int i, const Window& g, int outs, int& lo, int& hi) {
  const int a = i + g.p - g.k + 1;
  lo = a <= 0 ? 0 : (a + g.s - 1) / g.s;
  hi = min(outs, (i + g.p) / g.s + 1);
}

// The part of output pixel o's window inside the map: input rows [h_lo, h_hi) and columns
// [w_lo, w_hi); (h0, w0) is the window's corner, padding included.
struct WindowSpan {
  int h0, w0, h_lo, h_hi, w_lo, w_hi;
};
__device__ __forceinline__ WindowSpan window_span(const Item& o, const Window& g) {
  WindowSpan s;
  s.h0 = o.row * g.s - g.p, s.w0 = o.col * g.s - g.p;
  s.h_lo = max(s.h0, 0), s.h_hi = min(s.h0 + g.k, g.h);
  s.w_lo = max(s.w0, 0), s.w_hi = min(s.w0 + g.k, g.w);
  return s;
}

// The outputs whose windows hold input pixel in: rows [h_lo, h_hi) and columns [w_lo, w_hi).
struct CoveringSpan {
  int h_lo, h_hi, w_lo, w_hi;
};
__device__ __forceinline__ CoveringSpan covering_span(const Item& in, const Window& g) {
  CoveringSpan s;
  covering(in.row, g, g.ho, s.h_lo, s.h_hi);
  covering(in.col, g, g.wo, s.w_lo, s.w_hi);
  return s;
}

// Average pooling's gather, forward and backward: acc += channel group c0 of the pixels
// [r_lo, r_hi) x [q_lo, q_hi) of image n of t (an (N, rows, cols, c) tensor), in raster order.
template <int V, class I, class T>
__device__ __forceinline__ void add_pixels(const T* t, int n, int rows, int cols, int c, int c0, int r_lo, int r_hi,
                                           int q_lo, int q_hi, float (&acc)[V]) {
  for (int r = r_lo; r < r_hi; ++r)
    for (int q = q_lo; q < q_hi; ++q) {
      float v[V];
      load_channels<V>(t + pixel_offset<I>(n, r, q, rows, cols, c) + c0, v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] += v[j];
    }
}

// cpu::avgpool_extent on the device: the cells along one axis that the divisor of the window
// starting at `start` counts.
__device__ __forceinline__ int avgpool_extent(int start, int k, int size, int p, bool include_pad) {
  const int end = min(start + k, size + p);
  return include_pad ? end - start : min(end, size) - max(start, 0);
}

// cpu::avgpool_divisor: output (oh, ow)'s divisor.
__device__ __forceinline__ float avgpool_divisor(const Window& g, int oh, int ow) {
  return static_cast<float>(avgpool_extent(oh * g.s - g.p, g.k, g.h, g.p, g.include_pad) *
                            avgpool_extent(ow * g.s - g.p, g.k, g.w, g.p, g.include_pad));
}

// acc / divisor stored at `at`: a division, not a multiplication by 1/divisor, correctly rounded
// as the CPU's.
template <int V, class T>
__device__ __forceinline__ void store_quotient(T* at, float (&acc)[V], float divisor) {
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] /= divisor;
  store_channels<V>(at, acc);
}

// The CPU's comparison (pool_cpu.cpp): a larger value wins, and a NaN wins over a number (then
// stays), so a NaN is not silently hidden. `v != v` is the NaN test (no fast-math here).
__device__ __forceinline__ bool takes_max(float v, float best) { return v > best || (v != v && best == best); }

template <class I>
__device__ __forceinline__ I first_item() {
  return I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
}
template <class I>
__device__ __forceinline__ I item_stride() {
  return I(gridDim.x) * I(blockDim.x);
}

template <class T, int V, class I, bool kArgmax>
__global__ void __launch_bounds__(kThreads)
    maxpool_forward_kernel(const T* x, T* y, uint8_t* argmax, Window g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item o = item_at<V>(i, groups, g.ho, g.wo);
    const WindowSpan win = window_span(o, g);
    // -inf with the first real element's index is the CPU's "the first element starts the max":
    // that element replaces -inf unless it is -inf itself, and then the index is already its.
    // Window indices count from the window's corner (h0, w0), padding included.
    float best[V];
    int arg[V];
#pragma unroll
    for (int j = 0; j < V; ++j) best[j] = -CUDART_INF_F, arg[j] = (win.h_lo - win.h0) * g.k + (win.w_lo - win.w0);
    for (int ih = win.h_lo; ih < win.h_hi; ++ih)
      for (int iw = win.w_lo; iw < win.w_hi; ++iw) {
        float v[V];
        load_channels<V>(x + pixel_offset<I>(o.n, ih, iw, g.h, g.w, g.c) + o.c0, v);
        const int idx = (ih - win.h0) * g.k + (iw - win.w0);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (takes_max(v[j], best[j])) best[j] = v[j], arg[j] = idx;  // strict: ties keep the first
      }
    store_channels<V>(y + i * V, best);  // exact: best is one of the inputs
    if constexpr (kArgmax) store_indices<V>(argmax + i * V, arg);
  }
}

// One thread per input element group: sums, in output raster order, dy of the covering outputs
// whose argmax is this element's position in their window, so each dx is written once and in a
// fixed order (fp32, the CPU's order: bitwise its fp32 result before the one rounding to T).
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_kernel(const T* dy, const uint8_t* argmax, T* dx, Window g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item in = item_at<V>(i, groups, g.h, g.w);
    const CoveringSpan outs = covering_span(in, g);
    float acc[V] = {};
    for (int oh = outs.h_lo; oh < outs.h_hi; ++oh) {
      const int kh = in.row - (oh * g.s - g.p);  // this element's row in window oh: [0, k)
      for (int ow = outs.w_lo; ow < outs.w_hi; ++ow) {
        const int idx = kh * g.k + (in.col - (ow * g.s - g.p));  // its window index in (oh, ow)
        const I o = pixel_offset<I>(in.n, oh, ow, g.ho, g.wo, g.c) + I(in.c0);
        float d[V];
        int a[V];
        load_channels<V>(dy + o, d);
        load_indices<V>(argmax + o, a);
#pragma unroll
        for (int j = 0; j < V; ++j)
          if (a[j] == idx) acc[j] += d[j];
      }
    }
    store_channels<V>(dx + i * V, acc);
  }
}

// The same result when the windows tile the input exactly (kernel == stride, no padding, the
// size a multiple of the kernel: VGG's 2x2/2): every input element lies in one window, so one
// thread per output group reads its dy and argmax once and writes its whole window (dy at the
// argmax, 0 elsewhere), instead of k*k input threads each re-reading them.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads)
    maxpool_backward_tiled_kernel(const T* dy, const uint8_t* argmax, T* dx, Window g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item o = item_at<V>(i, groups, g.ho, g.wo);
    float d[V];
    int a[V];
    load_channels<V>(dy + i * V, d);
    load_indices<V>(argmax + i * V, a);
    for (int r = 0; r < g.k; ++r)
      for (int q = 0; q < g.k; ++q) {
        const int ih = o.row * g.k + r, iw = o.col * g.k + q;
        const int idx = r * g.k + q;  // no padding: the window starts at (row * k, col * k)
        float out[V];
#pragma unroll
        for (int j = 0; j < V; ++j) out[j] = a[j] == idx ? d[j] : 0.f;
        store_channels<V>(dx + pixel_offset<I>(o.n, ih, iw, g.h, g.w, g.c) + o.c0, out);
      }
  }
}

template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) avgpool_forward_kernel(const T* x, T* y, Window g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item o = item_at<V>(i, groups, g.ho, g.wo);
    const WindowSpan win = window_span(o, g);
    float acc[V] = {};
    add_pixels<V, I>(x, o.n, g.h, g.w, g.c, o.c0, win.h_lo, win.h_hi, win.w_lo, win.w_hi, acc);
    store_quotient<V>(y + i * V, acc, avgpool_divisor(g, o.row, o.col));
  }
}

// The gather of avgpool_forward_kernel's transpose: every covering output adds dy / its divisor;
// where every divisor is k*k (g.one_divisor), the sum of the dy divided once, as the CPU does.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) avgpool_backward_kernel(const T* dy, T* dx, Window g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item in = item_at<V>(i, groups, g.h, g.w);
    const CoveringSpan outs = covering_span(in, g);
    float acc[V] = {};
    if (g.one_divisor) {
      add_pixels<V, I>(dy, in.n, g.ho, g.wo, g.c, in.c0, outs.h_lo, outs.h_hi, outs.w_lo, outs.w_hi, acc);
      store_quotient<V>(dx + i * V, acc, static_cast<float>(g.k * g.k));
      continue;
    }
    for (int oh = outs.h_lo; oh < outs.h_hi; ++oh)
      for (int ow = outs.w_lo; ow < outs.w_hi; ++ow) {
        const float divisor = avgpool_divisor(g, oh, ow);
        float d[V];
        load_channels<V>(dy + pixel_offset<I>(in.n, oh, ow, g.ho, g.wo, g.c) + in.c0, d);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += d[j] / divisor;
      }
    store_channels<V>(dx + i * V, acc);
  }
}

// The first and one past the last input cell of output cell i (cpu::adaptive_start / _end; with
// in and out swapped, the outputs whose ranges hold input cell i). 64-bit products: i * in may
// pass 2^31.
__device__ __forceinline__ int adaptive_start(int i, int in, int out) {
  return static_cast<int>(int64_t{i} * in / out);
}
__device__ __forceinline__ int adaptive_end(int i, int in, int out) {
  return static_cast<int>(((int64_t{i} + 1) * in + out - 1) / out);
}

// Adaptive average pooling, one thread per output (pixel, channel group): the mean of its range.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads)
    adaptive_avgpool_forward_kernel(const T* x, T* y, AdaptiveWindow g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item o = item_at<V>(i, groups, g.ho, g.wo);
    const int h_lo = adaptive_start(o.row, g.h, g.ho), h_hi = adaptive_end(o.row, g.h, g.ho);
    const int w_lo = adaptive_start(o.col, g.w, g.wo), w_hi = adaptive_end(o.col, g.w, g.wo);
    float acc[V] = {};
    add_pixels<V, I>(x, o.n, g.h, g.w, g.c, o.c0, h_lo, h_hi, w_lo, w_hi, acc);
    store_quotient<V>(y + i * V, acc, static_cast<float>((h_hi - h_lo) * (w_hi - w_lo)));
  }
}

// Its gradient, one thread per input (pixel, channel group): the sum, in output raster order, of
// dy / (cells) over the outputs whose ranges hold the pixel.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads)
    adaptive_avgpool_backward_kernel(const T* dy, T* dx, AdaptiveWindow g, I items) {
  const int groups = g.c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const Item in = item_at<V>(i, groups, g.h, g.w);
    const int oh_lo = adaptive_start(in.row, g.ho, g.h), oh_hi = adaptive_end(in.row, g.ho, g.h);
    const int ow_lo = adaptive_start(in.col, g.wo, g.w), ow_hi = adaptive_end(in.col, g.wo, g.w);
    float acc[V] = {};
    for (int oh = oh_lo; oh < oh_hi; ++oh) {
      const int rows = adaptive_end(oh, g.h, g.ho) - adaptive_start(oh, g.h, g.ho);
      for (int ow = ow_lo; ow < ow_hi; ++ow) {
        const float cells = static_cast<float>(rows * (adaptive_end(ow, g.w, g.wo) - adaptive_start(ow, g.w, g.wo)));
        float d[V];
        load_channels<V>(dy + pixel_offset<I>(in.n, oh, ow, g.ho, g.wo, g.c) + in.c0, d);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += d[j] / cells;
      }
    }
    store_channels<V>(dx + i * V, acc);
  }
}

// Block (blockDim.x channel groups) x (blockDim.y row strands) per image: strand t sums rows t,
// t + blockDim.y, ... of its channels, then strand 0 adds the strands' partials in strand order.
// The order depends only on the launch shape, so the result is the same on every run; splitting
// H*W over strands gives a 7x7 map enough threads to hide load latency.
template <class T, int V>
__global__ void __launch_bounds__(kThreads) gap_forward_kernel(const T* x, T* y, int64_t n, int hw, int c) {
  extern __shared__ float partial[];  // [blockDim.y][blockDim.x][V]
  const int groups = c / V;
  const int cg = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const bool active = cg < groups;
  float* mine = partial + (threadIdx.y * blockDim.x + threadIdx.x) * V;
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    float acc[V] = {};
    if (active)
      for (int r = static_cast<int>(threadIdx.y); r < hw; r += static_cast<int>(blockDim.y)) {
        float v[V];
        load_channels<V>(x + (img * hw + r) * c + int64_t{cg} * V, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j];
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
      store_quotient<V>(y + img * c + int64_t{cg} * V, acc, static_cast<float>(hw));
    }
    __syncthreads();  // the partials are rewritten for the next image
  }
}

// dx[n, r, c] = dy[n, c] / hw. A division, not a multiplication by 1/hw: correctly rounded, as
// the CPU's, so fp32 results equal the CPU's bit for bit.
template <class T, int V, class I>
__global__ void __launch_bounds__(kThreads) gap_backward_kernel(const T* dy, T* dx, int hw, int c, I items) {
  const int groups = c / V;
  for (I i = first_item<I>(); i < items; i += item_stride<I>()) {
    const I row = i / I(groups);
    const int c0 = static_cast<int>(i - row * I(groups)) * V;
    float d[V];
    load_channels<V>(dy + (row / I(hw)) * I(c) + I(c0), d);
    store_quotient<V>(dx + i * V, d, static_cast<float>(hw));
  }
}

// --- Host side ---

void need(const char* fn, const std::string& where,
          std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

Window window_of(const cpu::PoolGeom& g, const char* fn, const std::string& where) {
  for (int64_t extent : {g.n, g.h, g.w, g.c, g.ho, g.wo, g.kernel})
    if (extent < 0 || extent > INT_MAX)
      fail("{}: {} got extent {} of the pooled map; the GPU kernels index each dimension with 32 bits", where,
           fn, extent);
  return {int(g.h), int(g.w), int(g.c), int(g.ho), int(g.wo), int(g.kernel), int(g.stride), int(g.pad)};
}

// Max pooling's argmax is a U8 window index: a window of at most 256 positions.
void check_window_index(const cpu::PoolGeom& g, const char* fn, const std::string& where) {
  if (g.kernel > kMaxPoolMaxKernel)
    fail("{}: {} got kernel {}, too large for U8 argmax window indices; use a kernel of at most {}", where, fn,
         g.kernel, kMaxPoolMaxKernel);
}

int blocks_for(int64_t items) { return static_cast<int>(std::min(ceil_div(items, kThreads), kMaxBlocks)); }

// Calls f(std::integral_constant<int, V>) with the channel group the tensors allow: 16 bytes
// when C is a multiple of it and every pointer is 16-byte aligned, else one element.
template <class T, class F>
void with_width(int64_t c, std::initializer_list<const void*> pointers, F&& f) {
  if (c % kWide<T> == 0 && all_aligned(pointers, 16))
    f(std::integral_constant<int, kWide<T>>{});
  else
    f(std::integral_constant<int, 1>{});
}

// Calls f(I{}) with the item index type: 32 bits when every element offset of the op's tensors
// (`largest` elements) fits, since 32-bit division costs a fraction of 64-bit's; else 64 bits.
template <class F>
void with_index(int64_t largest, F&& f) {
  if (largest <= INT32_MAX)
    f(uint32_t{});
  else
    f(int64_t{});
}

// The choices every pooling launch makes, in one place: calls f(T{}, width) with the activation
// type T of `dtype` and the channel group with_width<T> allows.
template <class F>
void with_type_and_width(DType dtype, int64_t c, std::initializer_list<const void*> pointers,
                         const std::string& where, F&& f) {
  dispatch_activation(dtype, where.c_str(), [&](auto zero) {
    using T = decltype(zero);
    with_width<T>(c, pointers, [&](auto width) { f(zero, width); });
  });
}

// ... and for the item-per-thread kernels, the item index type I too (with_index, for tensors of
// at most `largest` elements): f(T{}, width, items), with items = `elements` / V as an I.
template <class F>
void with_items(DType dtype, int64_t c, std::initializer_list<const void*> pointers, int64_t largest,
                int64_t elements, const std::string& where, F&& f) {
  with_type_and_width(dtype, c, pointers, where, [&](auto zero, auto width) {
    with_index(largest, [&](auto index) {
      using I = decltype(index);
      f(zero, width, static_cast<I>(elements / decltype(width)::value));
    });
  });
}

// One item-per-thread kernel over `items` items: blocks_for(items) blocks of kThreads, checked.
template <class I, class... Params, class... Args>
void launch_items(void (*kernel)(Params...), I items, cudaStream_t stream, const std::string& where, Args... args) {
  kernel<<<blocks_for(items), kThreads, 0, stream>>>(args..., items);
  check_launch(where);
}

void check_sizes(const char* fn, int64_t n, int64_t hw, int64_t c, const std::string& where) {
  if (n < 0 || hw < 1 || c < 0 || hw > INT_MAX || c > INT_MAX)
    fail("{}: {} got n = {}, hw = {}, c = {}; need n >= 0, 1 <= hw and c < 2^31", where, fn, n, hw, c);
}

AdaptiveWindow adaptive_window_of(const cpu::AdaptivePoolGeom& g, const char* fn, const std::string& where) {
  for (int64_t extent : {g.n, g.h, g.w, g.c, g.ho, g.wo})
    if (extent < 0 || extent > INT_MAX)
      fail("{}: {} got extent {} of the pooled map; the GPU kernels index each dimension with 32 bits", where,
           fn, extent);
  return {int(g.h), int(g.w), int(g.c), int(g.ho), int(g.wo)};
}

// Average pooling's window: the geometry and its divisor rule.
Window avg_window_of(const cpu::PoolGeom& g, bool count_include_pad, const char* fn, const std::string& where) {
  Window w = window_of(g, fn, where);
  w.include_pad = count_include_pad;
  w.one_divisor = cpu::avgpool_divisor_is_window(g, count_include_pad);
  return w;
}

}  // namespace

void maxpool_forward(DType dtype, const cpu::PoolGeom& g, const void* x, void* y, uint8_t* argmax,
                     cudaStream_t stream, const std::string& where) {
  const Window w = window_of(g, "maxpool_forward", where);
  if (argmax) check_window_index(g, "maxpool_forward", where);
  const int64_t outs = g.n * g.ho * g.wo * g.c;
  if (outs == 0) return;
  need("maxpool_forward", where, {{x, "x"}, {y, "y"}});
  with_items(dtype, g.c, {x, y, argmax}, std::max(outs, g.n * g.h * g.w * g.c), outs, where,
             [&](auto zero, auto width, auto items) {
               using T = decltype(zero);
               constexpr int V = decltype(width)::value;
               using I = decltype(items);
               if (argmax)
                 launch_items(maxpool_forward_kernel<T, V, I, true>, items, stream, where, static_cast<const T*>(x),
                              static_cast<T*>(y), argmax, w);
               else
                 launch_items(maxpool_forward_kernel<T, V, I, false>, items, stream, where, static_cast<const T*>(x),
                              static_cast<T*>(y), nullptr, w);
             });
}

void maxpool_backward(DType dtype, const cpu::PoolGeom& g, const void* dy, const uint8_t* argmax, void* dx,
                      cudaStream_t stream, const std::string& where) {
  const Window w = window_of(g, "maxpool_backward", where);
  check_window_index(g, "maxpool_backward", where);
  const int64_t ins = g.n * g.h * g.w * g.c, outs = g.n * g.ho * g.wo * g.c;
  if (ins == 0) return;
  need("maxpool_backward", where, {{dy, "dy"}, {argmax, "argmax"}, {dx, "dx"}});
  // The tiled kernel runs a thread per output group, the general one a thread per input group.
  const bool tiled = w.k == w.s && w.p == 0 && w.h == w.ho * w.k && w.w == w.wo * w.k;
  with_items(dtype, g.c, {dy, argmax, dx}, std::max(ins, outs), tiled ? outs : ins, where,
             [&](auto zero, auto width, auto items) {
               using T = decltype(zero);
               constexpr int V = decltype(width)::value;
               using I = decltype(items);
               if (tiled)
                 launch_items(maxpool_backward_tiled_kernel<T, V, I>, items, stream, where, static_cast<const T*>(dy),
                              argmax, static_cast<T*>(dx), w);
               else
                 launch_items(maxpool_backward_kernel<T, V, I>, items, stream, where, static_cast<const T*>(dy), argmax,
                              static_cast<T*>(dx), w);
             });
}

void avgpool_forward(DType dtype, const cpu::PoolGeom& g, bool count_include_pad, const void* x, void* y,
                     cudaStream_t stream, const std::string& where) {
  const Window w = avg_window_of(g, count_include_pad, "avgpool_forward", where);
  const int64_t outs = g.n * g.ho * g.wo * g.c;
  if (outs == 0) return;
  need("avgpool_forward", where, {{x, "x"}, {y, "y"}});
  with_items(dtype, g.c, {x, y}, std::max(outs, g.n * g.h * g.w * g.c), outs, where,
             [&](auto zero, auto width, auto items) {
               using T = decltype(zero);
               launch_items(avgpool_forward_kernel<T, decltype(width)::value, decltype(items)>, items, stream, where,
                            static_cast<const T*>(x), static_cast<T*>(y), w);
             });
}

void avgpool_backward(DType dtype, const cpu::PoolGeom& g, bool count_include_pad, const void* dy, void* dx,
                      cudaStream_t stream, const std::string& where) {
  const Window w = avg_window_of(g, count_include_pad, "avgpool_backward", where);
  const int64_t ins = g.n * g.h * g.w * g.c;
  if (ins == 0) return;
  need("avgpool_backward", where, {{dy, "dy"}, {dx, "dx"}});
  with_items(dtype, g.c, {dy, dx}, std::max(ins, g.n * g.ho * g.wo * g.c), ins, where,
             [&](auto zero, auto width, auto items) {
               using T = decltype(zero);
               launch_items(avgpool_backward_kernel<T, decltype(width)::value, decltype(items)>, items, stream, where,
                            static_cast<const T*>(dy), static_cast<T*>(dx), w);
             });
}

void gap_forward(DType dtype, const void* x, int64_t n, int64_t hw, int64_t c, void* y, cudaStream_t stream,
                 const std::string& where) {
  check_sizes("gap_forward", n, hw, c, where);
  if (n * c == 0) return;
  need("gap_forward", where, {{x, "x"}, {y, "y"}});
  with_type_and_width(dtype, c, {x, y}, where, [&](auto zero, auto width) {
    using T = decltype(zero);
    constexpr int V = decltype(width)::value;
    const int64_t groups = c / V;
    // As many channel groups as fill a warp (fewer when C is small), the rest of the block
    // strands over H*W (never more strands than rows).
    const int bx = static_cast<int>(std::min<int64_t>(groups, 32));
    const int by = static_cast<int>(std::min<int64_t>(kThreads / bx, hw));
    const dim3 grid(static_cast<unsigned>(ceil_div(groups, bx)), static_cast<unsigned>(std::min<int64_t>(n, 65535)));
    const size_t shared = size_t(bx) * by * V * sizeof(float);
    gap_forward_kernel<T, V><<<grid, dim3(bx, by), shared, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n,
                                                                      static_cast<int>(hw), static_cast<int>(c));
    check_launch(where);
  });
}

void gap_backward(DType dtype, const void* dy, int64_t n, int64_t hw, int64_t c, void* dx, cudaStream_t stream,
                  const std::string& where) {
  check_sizes("gap_backward", n, hw, c, where);
  const int64_t ins = n * hw * c;
  if (ins == 0) return;
  need("gap_backward", where, {{dy, "dy"}, {dx, "dx"}});
  with_items(dtype, c, {dy, dx}, ins, ins, where, [&](auto zero, auto width, auto items) {
    using T = decltype(zero);
    launch_items(gap_backward_kernel<T, decltype(width)::value, decltype(items)>, items, stream, where,
                 static_cast<const T*>(dy), static_cast<T*>(dx), static_cast<int>(hw), static_cast<int>(c));
  });
}

void adaptive_avgpool_forward(DType dtype, const cpu::AdaptivePoolGeom& g, const void* x, void* y, cudaStream_t stream,
                              const std::string& where) {
  const AdaptiveWindow w = adaptive_window_of(g, "adaptive_avgpool_forward", where);
  const int64_t ins = g.n * g.h * g.w * g.c, outs = g.n * g.ho * g.wo * g.c;
  if (outs == 0) return;
  need("adaptive_avgpool_forward", where, {{x, "x"}, {y, "y"}});
  with_items(dtype, g.c, {x, y}, std::max(ins, outs), outs, where, [&](auto zero, auto width, auto items) {
    using T = decltype(zero);
    launch_items(adaptive_avgpool_forward_kernel<T, decltype(width)::value, decltype(items)>, items, stream, where,
                 static_cast<const T*>(x), static_cast<T*>(y), w);
  });
}

void adaptive_avgpool_backward(DType dtype, const cpu::AdaptivePoolGeom& g, const void* dy, void* dx,
                               cudaStream_t stream, const std::string& where) {
  const AdaptiveWindow w = adaptive_window_of(g, "adaptive_avgpool_backward", where);
  const int64_t ins = g.n * g.h * g.w * g.c, outs = g.n * g.ho * g.wo * g.c;
  if (ins == 0) return;
  need("adaptive_avgpool_backward", where, {{dy, "dy"}, {dx, "dx"}});
  with_items(dtype, g.c, {dy, dx}, std::max(ins, outs), ins, where, [&](auto zero, auto width, auto items) {
    using T = decltype(zero);
    launch_items(adaptive_avgpool_backward_kernel<T, decltype(width)::value, decltype(items)>, items, stream, where,
                 static_cast<const T*>(dy), static_cast<T*>(dx), w);
  });
}

}  // namespace kiln::cuda
