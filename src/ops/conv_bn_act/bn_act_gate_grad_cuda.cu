// bn_act_gate_gradient: a squeeze-and-excitation gate's gradient from the conv_bn_act layer's own
// tensors, db[n, c] = sum over the image's rows of dy * y with y = act(x * scale + shift) recomputed
// and rounded to T as bn_act_apply stored it. The multiply's backward kernel's shape and order
// (mul_cuda.cu's gate_backward_kernel): a block of channel groups x row strands per image, strand t
// summing rows t, t + blockDim.y, ..., strand 0 adding the strands' partials in strand order, so the
// bits depend on the extents alone.
#include <algorithm>
#include <cstdint>

#include "ops/common/channels_cuda.cuh"
#include "ops/common/flat_cuda.cuh"
#include "ops/conv_bn_act/bn_act_cuda.h"
#include "ops/conv_bn_act/bn_act_functions.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

template <class F, class T, int V>
__global__ void __launch_bounds__(kThreads)
    gate_gradient_kernel(const T* dy, const T* x, const float* scale, const float* shift, float alpha, T* db,
                         int64_t n, int64_t hw, int64_t c) {
  extern __shared__ float partial[];  // [blockDim.y][blockDim.x][V]
  const int64_t groups = c / V;
  const int64_t cg = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = cg < groups;
  float* mine = partial + (threadIdx.y * blockDim.x + threadIdx.x) * V;
  float sc[V] = {}, sh[V] = {};
  if (active)
#pragma unroll
    for (int j = 0; j < V; ++j) sc[j] = scale[cg * V + j], sh[j] = shift[cg * V + j];
  for (int64_t img = blockIdx.y; img < n; img += gridDim.y) {
    float acc[V] = {};
    if (active) {
      for (int64_t r = threadIdx.y; r < hw; r += blockDim.y) {
        const int64_t at = (img * hw + r) * c + cg * V;
        float d[V], v[V];
        load_channels<V>(dy + at, d);
        load_channels<V>(x + at, v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float y = to_float(from_float<T>(F::value(fmaf(v[j], sc[j], sh[j]), alpha)));
          acc[j] += d[j] * y;
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

}  // namespace

void bn_act_gate_gradient(DType dtype, int activation, float alpha, const void* dy, const void* x, const float* scale,
                          const float* shift, int64_t n, int64_t hw, int64_t c, void* db, cudaStream_t stream,
                          const std::string& where) {
  if (n < 0 || hw < 1 || c < 1)
    fail("{}: bn_act_gate_gradient got n = {}, hw = {}, c = {}; it needs n >= 0, hw >= 1 and c >= 1", where, n, hw, c);
  if (n == 0) return;
  const void* pointers[] = {dy, x, scale, shift, db};
  for (const void* p : pointers)
    if (!p) fail("{}: bn_act_gate_gradient got a null device pointer", where);
  bn_act::visit(activation, [&](auto function) {
    using F = decltype(function);
    dispatch_activation(dtype, "bn_act_gate_gradient", [&](auto zero) {
      using T = decltype(zero);
      const auto run = [&](auto width) {
        constexpr int V = decltype(width)::value;
        const int64_t groups = c / V;
        // As many channel groups as fill a warp (fewer when C is small), the rest of the block
        // strands over the rows (never more strands than rows), as the multiply's kernel.
        const int bx = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(groups, 32)));
        const int by = static_cast<int>(std::min<int64_t>(kThreads / bx, hw));
        const dim3 grid(static_cast<unsigned>(ceil_div(groups, bx)), static_cast<unsigned>(std::min<int64_t>(n, 65535)));
        const size_t shared = size_t(bx) * by * V * sizeof(float);
        gate_gradient_kernel<F, T, V><<<grid, dim3(bx, by), shared, stream>>>(
            static_cast<const T*>(dy), static_cast<const T*>(x), scale, shift, alpha, static_cast<T*>(db), n, hw, c);
        check_launch(where);
      };
      if (c % kWide<T> == 0 && all_aligned({dy, x, db}, 16))
        run(std::integral_constant<int, kWide<T>>{});
      else
        run(std::integral_constant<int, 1>{});
    });
    return 0;
  });
}

}  // namespace kiln::cuda
