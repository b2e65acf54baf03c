#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kiln/error.h"
#include "ops/channel/channel_cuda.h"
#include "ops/common/channels_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
// The kernels loop when there are more items than threads; 2^16 blocks is far past what a GPU holds
// at once.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

int blocks_for(int64_t items) { return static_cast<int>(std::min<int64_t>(ceil_div(items, kThreads), kMaxBlocks)); }

// Calls f(Bits{}) with the unsigned integer of the element's size: every dtype of that size is
// moved by the same kernels, exactly.
template <class F>
void with_bits(DType dtype, const char* what, const std::string& where, F&& f) {
  if (dtype == DType::F32) return f(uint32_t{});
  if (dtype == DType::F16 || dtype == DType::BF16) return f(uint16_t{});
  fail("{}: {} runs F32, F16 and BF16 on the GPU, not {}", where, what, dtype_name(dtype));
}

// The widest pack (a power of two of elements, at most 16 bytes) that divides every extent and to
// whose size every pointer is aligned: 1 when none does.
template <class Bits>
int pack_width(std::initializer_list<int64_t> extents, std::initializer_list<const void*> ptrs) {
  for (int v = kWide<Bits>; v > 1; v /= 2) {
    bool fits = all_aligned(ptrs, size_t(v) * sizeof(Bits));
    for (int64_t e : extents) fits = fits && e % v == 0;
    if (fits) return v;
  }
  return 1;
}

// Calls f(std::integral_constant<int, V>) for the width v pack_width chose.
template <class Bits, class F>
void with_width(int v, F&& f) {
  if constexpr (kWide<Bits> >= 8)
    if (v == 8) return f(std::integral_constant<int, 8>{});
  if (v == 4) return f(std::integral_constant<int, 4>{});
  if (v == 2) return f(std::integral_constant<int, 2>{});
  f(std::integral_constant<int, 1>{});
}

// --- Runs of channels: a slice, a slice gradient's place in dx, zeros ---

// dst[r, dst_start + k] = src[r, src_start + k], or 0 without src; an item is V consecutive channels
// of one row.
template <class Bits, int V>
__global__ void __launch_bounds__(kThreads)
    copy_run_kernel(const Bits* src, int64_t src_channels, int64_t src_start, Bits* dst, int64_t dst_channels,
                    int64_t dst_start, int64_t packs_per_row, int64_t items) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < items; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / packs_per_row, k = (i - r * packs_per_row) * V;
    Pack<Bits, V> p;
    if (src) {
      p = load_pack<Bits, V>(src + r * src_channels + src_start + k);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) p.v[j] = 0;  // +0 in every float format
    }
    store_pack<Bits, V>(dst + r * dst_channels + dst_start + k, p);
  }
}

template <class Bits>
void copy_run(const void* src, int64_t src_channels, int64_t src_start, void* dst, int64_t dst_channels,
              int64_t dst_start, int64_t rows, int64_t count, cudaStream_t stream, const std::string& where) {
  if (rows == 0 || count == 0) return;
  const int v = pack_width<Bits>({src_channels, src_start, dst_channels, dst_start, count}, {src, dst});
  with_width<Bits>(v, [&](auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t items = rows * (count / V);
    copy_run_kernel<Bits, V><<<blocks_for(items), kThreads, 0, stream>>>(
        static_cast<const Bits*>(src), src_channels, src_start, static_cast<Bits*>(dst), dst_channels, dst_start,
        count / V, items);
  });
  check_launch(where);
}

// --- Shuffles ---

// A row's channels as a G x m matrix transposed, a tile of G x V elements per item (V consecutive
// columns j0..j0+V-1 of every row of the matrix), every access a pack of V. kGather, the shuffle
// with G groups: out[j * G + i] = in[i * m + j], the tile read as G packs along its rows and written
// as the G * V consecutive outputs j0 * G ... Otherwise its inverse (the shuffle with m groups):
// out[i * m + j] = in[j * G + i], the tile read from G * V consecutive inputs and written as G packs.
template <class Bits, int V, int G, bool kGather>
__global__ void __launch_bounds__(kThreads) shuffle_tile_kernel(const Bits* in, Bits* out, int64_t m, int64_t items) {
  const int64_t tiles = m / V, channels = m * G;
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < items; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = t / tiles, j0 = (t - r * tiles) * V;
    const Bits* row_in = in + r * channels;
    Bits* row_out = out + r * channels;
    Bits v[G][V];  // v[i][jj]: element (i, j0 + jj) of the G x m matrix
    if constexpr (kGather) {
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const Pack<Bits, V> p = load_pack<Bits, V>(row_in + i * m + j0);
#pragma unroll
        for (int jj = 0; jj < V; ++jj) v[i][jj] = p.v[jj];
      }
#pragma unroll
      for (int q = 0; q < G; ++q) {
        Pack<Bits, V> p;
#pragma unroll
        for (int k = 0; k < V; ++k) p.v[k] = v[(q * V + k) % G][(q * V + k) / G];
        store_pack<Bits, V>(row_out + j0 * G + q * V, p);
      }
    } else {
#pragma unroll
      for (int q = 0; q < G; ++q) {
        const Pack<Bits, V> p = load_pack<Bits, V>(row_in + j0 * G + q * V);
#pragma unroll
        for (int k = 0; k < V; ++k) v[(q * V + k) % G][(q * V + k) / G] = p.v[k];
      }
#pragma unroll
      for (int i = 0; i < G; ++i) {
        Pack<Bits, V> p;
#pragma unroll
        for (int jj = 0; jj < V; ++jj) p.v[jj] = v[i][jj];
        store_pack<Bits, V>(row_out + i * m + j0, p);
      }
    }
  }
}

// Any shuffle, one element per item: out[r, o] = in[r, (o % groups) * (channels / groups) + o / groups].
template <class Bits>
__global__ void __launch_bounds__(kThreads)
    shuffle_any_kernel(const Bits* in, Bits* out, int64_t channels, int64_t groups, int64_t items) {
  const int64_t per_group = channels / groups;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < items; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / channels, o = e - r * channels;
    out[e] = in[r * channels + (o % groups) * per_group + o / groups];
  }
}

template <class Bits, int G, bool kGather>
void launch_tiles(const void* in, void* out, int64_t rows, int64_t m, cudaStream_t stream) {
  const int v = pack_width<Bits>({m}, {in, out});
  with_width<Bits>(v, [&](auto width) {
    constexpr int V = decltype(width)::value;
    const int64_t items = rows * (m / V);
    shuffle_tile_kernel<Bits, V, G, kGather>
        <<<blocks_for(items), kThreads, 0, stream>>>(static_cast<const Bits*>(in), static_cast<Bits*>(out), m, items);
  });
}

// The tiled kernels for a matrix of 2, 3 or 4 rows (a thread holds G x V elements; ShuffleNetV2
// shuffles 2 groups); false for any other.
template <class Bits, bool kGather>
bool launch_small_matrix(int64_t g, const void* in, void* out, int64_t rows, int64_t m, cudaStream_t stream) {
  switch (g) {
    case 2: launch_tiles<Bits, 2, kGather>(in, out, rows, m, stream); return true;
    case 3: launch_tiles<Bits, 3, kGather>(in, out, rows, m, stream); return true;
    case 4: launch_tiles<Bits, 4, kGather>(in, out, rows, m, stream); return true;
    default: return false;
  }
}

template <class Bits>
void shuffle(const void* x, void* y, int64_t rows, int64_t channels, int64_t groups, cudaStream_t stream,
             const std::string& where) {
  const int64_t per_group = channels / groups;
  // A shuffle of few groups gathers tiles; one of few channels a group is the inverse of a shuffle of
  // few groups (a backward), which scatters them.
  if (!launch_small_matrix<Bits, true>(groups, x, y, rows, per_group, stream) &&
      !launch_small_matrix<Bits, false>(per_group, x, y, rows, groups, stream)) {
    const int64_t items = rows * channels;
    shuffle_any_kernel<Bits><<<blocks_for(items), kThreads, 0, stream>>>(static_cast<const Bits*>(x),
                                                                          static_cast<Bits*>(y), channels, groups, items);
  }
  check_launch(where);
}

void require_pointers(const std::string& where, const char* what, std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!p) fail("{}: {} needs device pointers for every tensor, got a null one", where, what);
}

}  // namespace

void shuffle_channels(DType dtype, const void* x, void* y, int64_t rows, int64_t channels, int64_t groups,
                      cudaStream_t stream, const std::string& where) {
  if (rows < 0 || channels < 1 || groups < 1 || channels % groups != 0)
    fail("{}: shuffle_channels got {} rows of {} channels in {} groups; the groups must divide the channels", where,
         rows, channels, groups);
  if (rows == 0) return;
  require_pointers(where, "shuffle_channels", {x, y});
  with_bits(dtype, "shuffle_channels", where,
            [&](auto bits) { shuffle<decltype(bits)>(x, y, rows, channels, groups, stream, where); });
}

void slice_channels(DType dtype, const void* x, int64_t in_channels, int64_t start, void* y, int64_t rows,
                    int64_t count, cudaStream_t stream, const std::string& where) {
  if (rows < 0 || count < 0 || start < 0 || start + count > in_channels)
    fail("{}: slice_channels got {} rows, channels [{}, {}) of {}; the slice must lie inside the rows", where, rows,
         start, start + count, in_channels);
  if (rows == 0 || count == 0) return;
  require_pointers(where, "slice_channels", {x, y});
  with_bits(dtype, "slice_channels", where, [&](auto bits) {
    copy_run<decltype(bits)>(x, in_channels, start, y, count, 0, rows, count, stream, where);
  });
}

void join_slice_gradients(DType dtype, const std::vector<SliceGradientPart>& parts, int64_t start, void* dx,
                          int64_t rows, int64_t channels, cudaStream_t stream, const std::string& where) {
  int64_t covered = 0;
  bool valid = rows >= 0 && start >= 0;
  for (const SliceGradientPart& part : parts) covered += part.channels, valid = valid && part.channels >= 0;
  valid = valid && start + covered <= channels;
  if (!valid)
    fail("{}: join_slice_gradients got {} rows of {} channels and {} parts covering {} channels from {}; the parts "
         "must lie inside the rows",
         where, rows, channels, parts.size(), covered, start);
  if (rows == 0 || channels == 0) return;
  require_pointers(where, "join_slice_gradients", {dx});
  for (const SliceGradientPart& part : parts) require_pointers(where, "join_slice_gradients", {part.dy});
  with_bits(dtype, "join_slice_gradients", where, [&](auto bits) {
    using Bits = decltype(bits);
    copy_run<Bits>(nullptr, 0, 0, dx, channels, 0, rows, start, stream, where);
    int64_t at = start;
    for (const SliceGradientPart& part : parts) {
      copy_run<Bits>(part.dy, part.channels, 0, dx, channels, at, rows, part.channels, stream, where);
      at += part.channels;
    }
    copy_run<Bits>(nullptr, 0, 0, dx, channels, at, rows, channels - at, stream, where);
  });
}

}  // namespace kiln::cuda
