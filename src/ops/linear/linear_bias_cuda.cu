// The linear layer's bias kernels (linear_cuda.h), used where cuBLASLt offers no bias epilogue
// for a problem: the forward's bias broadcast and the bias gradient's column sums.
#include <algorithm>

#include "ops/common/pack_cuda.cuh"
#include "ops/linear/linear_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

template <class T>
__global__ void broadcast_rows(const T* __restrict__ bias, int64_t n, int64_t out, T* __restrict__ y) {
  const int64_t total = n * out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bias[i % out];
}

// A block owns kColumns adjacent columns (a warp reads 32 adjacent elements of a row: coalesced)
// and kRowGroups threads per column; thread (c, g) sums rows g, g + kRowGroups, ... of its
// column, then the groups' partials are added in group order. The order depends on n only, so
// the result is the same every run.
constexpr int kColumns = 32, kRowGroups = 8;

template <class T>
__global__ void column_sums(const T* __restrict__ dy, int64_t n, int64_t out, T* __restrict__ dbias) {
  __shared__ float partial[kRowGroups][kColumns];
  const int64_t column = blockIdx.x * int64_t(kColumns) + threadIdx.x;
  float sum = 0.f;
  if (column < out)
    for (int64_t row = threadIdx.y; row < n; row += kRowGroups) sum += to_float(dy[row * out + column]);
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || column >= out) return;
  float total = 0.f;
#pragma unroll
  for (int g = 0; g < kRowGroups; ++g) total += partial[g][threadIdx.x];
  dbias[column] = from_float<T>(total);
}

void check_args(const char* fn, int64_t n, int64_t out, const void* in, const void* result, const std::string& where) {
  if (n <= 0 || out <= 0) fail("{}: {} got {} rows of {} columns", where, fn, n, out);
  if (!in || !result) fail("{}: {} got a null tensor", where, fn);
}

}  // namespace

void linear_broadcast_bias(DType dtype, const void* bias, int64_t n, int64_t out, void* y, cudaStream_t stream,
                           const std::string& where) {
  check_args("linear_broadcast_bias", n, out, bias, y, where);
  dispatch_activation(dtype, "linear_broadcast_bias", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((n * out + kThreads - 1) / kThreads, 4096);
    broadcast_rows<T><<<unsigned(blocks), kThreads, 0, stream>>>(static_cast<const T*>(bias), n, out, static_cast<T*>(y));
  });
  check_launch(where);
}

void linear_bias_grad(DType dtype, const void* dy, int64_t n, int64_t out, void* dbias, cudaStream_t stream,
                      const std::string& where) {
  check_args("linear_bias_grad", n, out, dy, dbias, where);
  dispatch_activation(dtype, "linear_bias_grad", [&](auto zero) {
    using T = decltype(zero);
    const dim3 block(kColumns, kRowGroups);
    const int64_t blocks = (out + kColumns - 1) / kColumns;
    column_sums<T><<<unsigned(blocks), block, 0, stream>>>(static_cast<const T*>(dy), n, out, static_cast<T*>(dbias));
  });
  check_launch(where);
}

}  // namespace kiln::cuda
