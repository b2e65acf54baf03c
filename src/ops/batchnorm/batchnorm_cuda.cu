#include <algorithm>
#include <array>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/batchnorm/bn_backward_kernels_cuda.cuh"
#include "ops/batchnorm/bn_tile_parts_cuda.cuh"
#include "ops/batchnorm/tile_cuda.cuh"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

using namespace bn_parts;

// ---------------------------------------------------------------------------------------------
// Kernels. Tiled ones: each thread owns VEC consecutive channels of a fixed column and walks
// the rows of its block's tile (see tile_cuda.cuh), so per-channel parameters live in registers
// and per-channel sums accumulate in registers. The row splits, the masked backward loads and the
// branch coefficients are in bn_tile_parts_cuda.cuh (resblock_cuda.cu builds on them too).

template <class T, int VEC>
__global__ void __launch_bounds__(kTileThreads)
    channel_sums_kernel(const T* x, TileGrid g, float* part_sum, float* part_sqsum) {
  constexpr int U = kTileUnroll<T, VEC>;
  const TileThread p = tile_thread<RowSplit::kRoundRobin>(g, U);
  float s[VEC] = {}, q[VEC] = {};
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    Pack<T, VEC> xs[U];
    load_rows</*STREAMING=*/false>(xs, x, g, p, row);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (row + int64_t{u} * g.rows >= p.end) break;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float v = to_float(xs[u].v[j]);
        s[j] += v;
        q[j] += v * v;
      }
    }
  }
  write_block_partials<VEC>(g, p, s, q, part_sum, part_sqsum);
}

// Both branches of a block end with a normalized shortcut from one pass over its masked gradient
// (dy, plus dy2 with TERMS2) and the mask: the sum of g, the same for both branches, once, and the
// sum of g * xhat for each of x and x_b. Four tensors a row (five with dy2), so one row per thread
// at a time, as the block end's two-term apply (kTripleUnroll). Its registers (ptxas, sm_90: 88-92
// for fp16 and bf16 with 8 channels a thread) allow 2 blocks per SM; bounding it to 3 spilled
// 12-24 bytes a thread.
template <class T, int VEC, bool TERMS2>
__global__ void __launch_bounds__(kTileThreads)
    bn_backward_reduce_pair_kernel(const T* dy, const T* dy2, const uint8_t* bits, const T* x, const float* mean,
                                   const float* inv_std, const T* x_b, const float* mean_b,
                                   const float* inv_std_b, TileGrid g, float* part_dy, float* part_dy_xhat,
                                   float* part_dy_xhat_b) {
  constexpr int U = kTripleUnroll;
  const TileThread p = tile_thread<kReduceSplit>(g, U);
  float sums[3][VEC] = {};
  SavedStats<VEC> stats, stats_b;
  stats.load(mean, inv_std, p);
  stats_b.load(mean_b, inv_std_b, p);
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    MaskedRows<T, VEC, U, /*STREAMING=*/true> in;
    in.load(dy, bits, x, g, p, row);
    Pack<T, VEC> xb[U];
    load_rows</*STREAMING=*/true>(xb, x_b, g, p, row);
    if constexpr (TERMS2) in.add_term(dy2, g, p, row);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (row + int64_t{u} * g.rows >= p.end) break;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float gj = in.masked_dy(u, j);
        sums[0][j] += gj;
        sums[1][j] += gj * stats.xhat(in.x[u].v[j], j);
        sums[2][j] += gj * stats_b.xhat(xb[u].v[j], j);
      }
    }
  }
  float* const parts[3] = {part_dy, part_dy_xhat, part_dy_xhat_b};
  write_block_partials<VEC, 3>(g, p, sums, parts);
}

// y = x * scale + shift (then ReLU); bit mask only with VEC == 8 (one whole byte per thread).
template <class T, int VEC, bool RELU>
__global__ void __launch_bounds__(kTileThreads)
    bn_apply_kernel(const T* x, const float* scale, const float* shift, TileGrid g, T* y,
                    uint8_t* bitmask, uint8_t* bytemask) {
  constexpr int U = kTileUnroll<T, VEC>;
  const TileThread p = tile_thread<kApplySplit>(g, U);
  if (!p.active) return;
  float sc[VEC], sh[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    sc[j] = scale[p.c0 + j];
    sh[j] = shift[p.c0 + j];
  }
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    Pack<T, VEC> xs[U];
    load_rows</*STREAMING=*/false>(xs, x, g, p, row);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = row + int64_t{u} * g.rows;
      if (r >= p.end) break;
      const int64_t f = r * g.c + p.c0;
      Pack<T, VEC> out;
      Pack<uint8_t, VEC> pass;
      unsigned bits = 0;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float v = fmaf(to_float(xs[u].v[j]), sc[j], sh[j]);
        if constexpr (RELU) {
          const bool on = v > 0.f;  // NaN fails: y = 0, bit 0 (as the CPU kernel)
          out.v[j] = from_float<T>(on ? v : 0.f);
          pass.v[j] = on;
          bits |= unsigned{on} << j;
        } else {
          out.v[j] = from_float<T>(v);
        }
      }
      store_pack<T, VEC>(y + f, out);
      if constexpr (RELU) {
        if constexpr (VEC == 8) {
          if (bitmask) bitmask[f >> 3] = static_cast<uint8_t>(bits);
        }
        if (bytemask) store_pack<uint8_t, VEC>(bytemask + f, pass);
      }
    }
  }
}

// Fallback for a bit mask when c is not a multiple of 8 (or pointers are misaligned): each
// thread owns one mask byte, i.e. 8 consecutive flat elements, whatever their channels.
template <class T>
__global__ void bn_apply_relu_flat_kernel(const T* x, const float* scale, const float* shift,
                                          int64_t n, int64_t c, T* y, uint8_t* bitmask,
                                          uint8_t* bytemask) {
  const int64_t groups = (n + 7) / 8;
  for (int64_t grp = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; grp < groups;
       grp += int64_t{gridDim.x} * blockDim.x) {
    int64_t ch = (grp * 8) % c;
    unsigned bits = 0;
    for (int j = 0; j < 8; ++j) {
      const int64_t i = grp * 8 + j;
      if (i >= n) break;
      const float v = fmaf(to_float(x[i]), scale[ch], shift[ch]);
      const bool on = v > 0.f;
      y[i] = from_float<T>(on ? v : 0.f);
      if (bytemask) bytemask[i] = on;
      bits |= unsigned{on} << j;
      if (++ch == c) ch = 0;
    }
    if (bitmask) bitmask[grp] = static_cast<uint8_t>(bits);  // bits past n stay 0
  }
}

__global__ void bn_finalize_kernel(const float* sum, const float* sqsum, double count,
                                   double unbias, const float* gamma, const float* beta, double eps,
                                   double momentum, float* running_mean, float* running_var,
                                   float* saved_mean, float* saved_inv_std, float* scale,
                                   float* shift, int64_t c) {
  const int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (ch >= c) return;
  const double mean = sum[ch] / count;
  const double var = fmax(sqsum[ch] / count - mean * mean, 0.0);  // rounding can go below 0
  const double inv_std = 1.0 / sqrt(var + eps);
  const double sc = double{gamma[ch]} * inv_std;
  saved_mean[ch] = static_cast<float>(mean);
  saved_inv_std[ch] = static_cast<float>(inv_std);
  scale[ch] = static_cast<float>(sc);
  shift[ch] = static_cast<float>(double{beta[ch]} - mean * sc);
  if (running_mean) {
    running_mean[ch] = static_cast<float>((1.0 - momentum) * running_mean[ch] + momentum * mean);
    running_var[ch] =
        static_cast<float>((1.0 - momentum) * running_var[ch] + momentum * var * unbias);
  }
}

__global__ void bn_inference_scale_shift_kernel(const float* gamma, const float* beta,
                                                const float* running_mean, const float* running_var,
                                                double eps, int64_t c, float* scale, float* shift) {
  const int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (ch >= c) return;
  const double sc = double{gamma[ch]} / sqrt(double{running_var[ch]} + eps);
  scale[ch] = static_cast<float>(sc);
  shift[ch] = static_cast<float>(double{beta[ch]} - double{running_mean[ch]} * sc);
}

// ---------------------------------------------------------------------------------------------
// Host side.

// A recomputed mask needs both of its per-channel arrays, and replaces a bit mask.
void check_mask(const char* fn, const ReluMask& mask, const std::string& where) {
  if (bool(mask.scale) != bool(mask.shift) || (mask.scale && mask.bits))
    fail("{}: {} got a ReLU mask with {}; give a bit mask, or scale and shift to recompute it from, or neither",
         where, fn, mask.bits ? "a bit mask and scale / shift" : "only one of scale / shift");
}

void zero_sums(float* out0, float* out1, int64_t c, cudaStream_t stream, const std::string& where) {
  KILN_CUDA(cudaMemsetAsync(out0, 0, c * sizeof(float), stream), where);
  KILN_CUDA(cudaMemsetAsync(out1, 0, c * sizeof(float), stream), where);
}

}  // namespace

size_t channel_sums_workspace_bytes(int64_t m, int64_t c) {
  return reduction_workspace_bytes(m, c);
}
size_t bn_backward_reduce_workspace_bytes(int64_t m, int64_t c) {
  return reduction_workspace_bytes(m, c);
}
size_t bn_backward_reduce_pair_workspace_bytes(int64_t m, int64_t c) {
  return reduction_workspace_bytes(m, c, 3);
}

void channel_sums(DType dtype, const void* x, int64_t m, int64_t c, float* sum, float* sqsum,
                  void* workspace, size_t workspace_bytes, cudaStream_t stream,
                  const std::string& where) {
  check_shape("channel_sums", m, c, where);
  need("channel_sums", where, {{sum, "sum"}, {sqsum, "sqsum"}});
  if (m == 0) return zero_sums(sum, sqsum, c, stream, where);
  need("channel_sums", where, {{x, "x"}});
  with_tile_types(dtype, "channel_sums", c, {x}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    auto* kernel = channel_sums_kernel<T, V>;
    const TileGrid g = grid_for<V>(kernel, m, c, kTileUnroll<T, V>, RowSplit::kRoundRobin, where);
    const auto parts = partials("channel_sums", g, workspace, workspace_bytes, where);
    launch_tiles(kernel, g, stream, static_cast<const T*>(x), g, parts.first, parts.second);
    combine(g, parts, sum, sqsum, stream, where);
  });
}

void bn_finalize(const float* sum, const float* sqsum, int64_t count, const float* gamma,
                 const float* beta, double eps, double momentum, float* running_mean,
                 float* running_var, float* saved_mean, float* saved_inv_std, float* scale,
                 float* shift, int64_t c, cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_finalize";
  check_shape(fn, 0, c, where);
  if (count < 1)
    fail("{}: {} got count = {}; it needs at least one value per channel", where, fn, count);
  if (!(eps > 0)) fail("{}: {} got eps = {}; it must be > 0", where, fn, eps);
  if ((running_mean == nullptr) != (running_var == nullptr))
    fail("{}: {} got only one of running_mean / running_var; pass both or neither", where, fn);
  need(fn, where,
       {{sum, "sum"},
        {sqsum, "sqsum"},
        {gamma, "gamma"},
        {beta, "beta"},
        {saved_mean, "saved_mean"},
        {saved_inv_std, "saved_inv_std"},
        {scale, "scale"},
        {shift, "shift"}});
  const double unbias = count > 1 ? double(count) / double(count - 1) : 1.0;
  bn_finalize_kernel<<<ceil_div(c, 128), 128, 0, stream>>>(
      sum, sqsum, double(count), unbias, gamma, beta, eps, momentum, running_mean, running_var,
      saved_mean, saved_inv_std, scale, shift, c);
  check_launch(where);
}

void bn_inference_scale_shift(const float* gamma, const float* beta, const float* running_mean,
                              const float* running_var, double eps, int64_t c, float* scale,
                              float* shift, cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_inference_scale_shift";
  check_shape(fn, 0, c, where);
  if (!(eps > 0)) fail("{}: {} got eps = {}; it must be > 0", where, fn, eps);
  need(fn, where,
       {{gamma, "gamma"},
        {beta, "beta"},
        {running_mean, "running_mean"},
        {running_var, "running_var"},
        {scale, "scale"},
        {shift, "shift"}});
  bn_inference_scale_shift_kernel<<<ceil_div(c, 128), 128, 0, stream>>>(
      gamma, beta, running_mean, running_var, eps, c, scale, shift);
  check_launch(where);
}

void bn_apply(DType dtype, const void* x, const float* scale, const float* shift, int64_t m,
              int64_t c, bool relu, void* y, uint8_t* bitmask, uint8_t* bytemask,
              cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_apply";
  check_shape(fn, m, c, where);
  if ((bitmask || bytemask) && !relu)
    fail("{}: {} was given a ReLU mask output but relu = false; masks record the ReLU", where, fn);
  if (m == 0) return;
  need(fn, where, {{x, "x"}, {scale, "scale"}, {shift, "shift"}, {y, "y"}});
  dispatch_activation(dtype, fn, [&](auto zero) {
    using T = decltype(zero);
    // A bit mask needs 8 channels per thread (one whole mask byte), even in fp32.
    const int vec = choose_vec(c, sizeof(T), {x, y}, {bytemask}, bitmask ? 8 : 0);
    if (bitmask && vec != 8) {
      const int64_t groups = ceil_div(m * c, 8);
      auto* kernel = bn_apply_relu_flat_kernel<T>;
      const int resident = resident_blocks(reinterpret_cast<const void*>(kernel), 256, where);
      const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(groups, 256), resident));
      kernel<<<blocks, 256, 0, stream>>>(static_cast<const T*>(x), scale, shift, m * c, c,
                                         static_cast<T*>(y), bitmask, bytemask);
      check_launch(where);
      return;
    }
    dispatch_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      auto* kernel = relu ? bn_apply_kernel<T, V, true> : bn_apply_kernel<T, V, false>;
      const TileGrid g = grid_for<V>(kernel, m, c, kTileUnroll<T, V>, kApplySplit, where);
      launch_tiles(kernel, g, stream, static_cast<const T*>(x), scale, shift, g, static_cast<T*>(y), bitmask,
                   bytemask);
    });
    check_launch(where);
  });
}

void bn_backward_reduce(DType dtype, const void* dy, const void* dy2, ReluMask relu_mask, const void* x,
                        const float* saved_mean, const float* saved_inv_std, int64_t m, int64_t c,
                        float* sum_dy, float* sum_dy_xhat, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_backward_reduce";
  check_shape(fn, m, c, where);
  if (dy2 && relu_mask.recomputed())
    fail("{}: {} takes a second gradient term with a stored mask only (a block end's); this one recomputes its "
         "mask",
         where, fn);
  need(fn, where,
       {{saved_mean, "saved_mean"},
        {saved_inv_std, "saved_inv_std"},
        {sum_dy, "sum_dy"},
        {sum_dy_xhat, "sum_dy_xhat"}});
  if (m == 0) return zero_sums(sum_dy, sum_dy_xhat, c, stream, where);
  need(fn, where, {{dy, "dy"}, {x, "x"}});
  check_mask(fn, relu_mask, where);
  with_tile_types(dtype, fn, c, {dy, dy2, x}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    const auto* dy_t = static_cast<const T*>(dy);
    const auto* dy2_t = static_cast<const T*>(dy2);
    const auto* x_t = static_cast<const T*>(x);
    if (relu_mask.recomputed())
      launch_bn_backward_reduce<T, V>(fn, dy_t, dy2_t, RecomputedReluGate<V>{relu_mask.scale, relu_mask.shift}, x_t,
                                      saved_mean, saved_inv_std, m, c, sum_dy, sum_dy_xhat, workspace,
                                      workspace_bytes, stream, where);
    else
      launch_bn_backward_reduce<T, V>(fn, dy_t, dy2_t, StoredMaskGate<V>{relu_mask.bits}, x_t, saved_mean,
                                      saved_inv_std, m, c, sum_dy, sum_dy_xhat, workspace, workspace_bytes, stream,
                                      where);
  });
}

void bn_backward_reduce_pair(DType dtype, const void* dy, const void* dy2, const uint8_t* bitmask,
                             const BnReduceBranch& a, const BnReduceBranch& b, int64_t m, int64_t c, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_backward_reduce_pair";
  check_shape(fn, m, c, where);
  for (const BnReduceBranch* branch : {&a, &b})
    need(fn, where,
         {{branch->saved_mean, "saved_mean"},
          {branch->saved_inv_std, "saved_inv_std"},
          {branch->sum_dy, "sum_dy"},
          {branch->sum_dy_xhat, "sum_dy_xhat"}});
  if (m == 0) {
    zero_sums(a.sum_dy, a.sum_dy_xhat, c, stream, where);
    return zero_sums(b.sum_dy, b.sum_dy_xhat, c, stream, where);
  }
  need(fn, where, {{dy, "dy"}, {bitmask, "bitmask"}, {a.x, "x"}, {b.x, "x_b"}});
  with_tile_types(dtype, fn, c, {dy, dy2, a.x, b.x}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    auto* kernel = dy2 ? bn_backward_reduce_pair_kernel<T, V, true> : bn_backward_reduce_pair_kernel<T, V, false>;
    const TileGrid g = grid_for<V>(kernel, m, c, kTripleUnroll, kReduceSplit, where);
    const auto parts = partial_arrays<3>(fn, g, workspace, workspace_bytes, where);
    launch_tiles(kernel, g, stream, static_cast<const T*>(dy), static_cast<const T*>(dy2), bitmask,
                 static_cast<const T*>(a.x), a.saved_mean, a.saved_inv_std, static_cast<const T*>(b.x), b.saved_mean,
                 b.saved_inv_std, g, parts[0], parts[1], parts[2]);
    // The sum of g from the same partials for both branches: the same bits.
    combine(g, {parts[0], parts[1]}, a.sum_dy, a.sum_dy_xhat, stream, where);
    combine(g, {parts[0], parts[2]}, b.sum_dy, b.sum_dy_xhat, stream, where);
  });
}

void bn_backward_apply(DType dtype, const void* dy, ReluMask relu_mask, const void* x,
                       const float* gamma, const float* saved_mean, const float* saved_inv_std,
                       const float* sum_dy, const float* sum_dy_xhat, int64_t m, int64_t c,
                       int64_t count, void* dx, cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_backward_apply";
  check_shape(fn, m, c, where);
  if (count < m)
    fail("{}: {} got count = {} for {} rows; count (values per channel in the sums) must be >= m",
         where, fn, count, m);
  if (m == 0) return;
  need(fn, where,
       {{dy, "dy"},
        {x, "x"},
        {gamma, "gamma"},
        {saved_mean, "saved_mean"},
        {saved_inv_std, "saved_inv_std"},
        {sum_dy, "sum_dy"},
        {sum_dy_xhat, "sum_dy_xhat"},
        {dx, "dx"}});
  check_mask(fn, relu_mask, where);
  with_tile_types(dtype, fn, c, {dy, x, dx}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    const auto* dy_t = static_cast<const T*>(dy);
    const auto* x_t = static_cast<const T*>(x);
    auto* dx_t = static_cast<T*>(dx);
    if (relu_mask.recomputed())
      launch_bn_backward_apply<T, V>(dy_t, RecomputedReluGate<V>{relu_mask.scale, relu_mask.shift}, x_t, gamma,
                                     saved_mean, saved_inv_std, sum_dy, sum_dy_xhat, m, c, count, dx_t, stream, where);
    else
      launch_bn_backward_apply<T, V>(dy_t, StoredMaskGate<V>{relu_mask.bits}, x_t, gamma, saved_mean, saved_inv_std,
                                     sum_dy, sum_dy_xhat, m, c, count, dx_t, stream, where);
  });
}

}  // namespace kiln::cuda
