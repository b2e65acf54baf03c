// The plain convolution's bias kernels (conv_bias_cuda.h).
#include <algorithm>

#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/common/pack_cuda.cuh"
#include "ops/conv/conv_bias_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// Each thread adds the bias to VEC adjacent elements of one row (k is a multiple of VEC, so a
// pack never crosses a row): 16-byte loads and stores where the pointer allows.
template <class T, int VEC>
__global__ void add_bias_kernel(T* __restrict__ y, const float* __restrict__ bias, int64_t packs, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * VEC, c0 = e % k;
    Pack<T, VEC> v = load_pack<T, VEC>(y + e);
#pragma unroll
    for (int j = 0; j < VEC; ++j) v.v[j] = from_float<T>(to_float(v.v[j]) + bias[c0 + j]);
    store_pack(y + e, v);
  }
}

template <class T, int VEC>
void launch_add_bias(T* y, const float* bias, int64_t rows, int64_t k, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t packs = rows * k / VEC;
  // A grid-stride loop over at most 8192 blocks: several waves on any GPU, few enough that a
  // block's launch cost is amortized over many packs on the largest tensors.
  const int64_t blocks = std::min<int64_t>(ceil_div(packs, kThreads), 8192);
  add_bias_kernel<T, VEC><<<unsigned(blocks), kThreads, 0, stream>>>(y, bias, packs, k);
}

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

void check_args(const char* fn, int64_t rows, int64_t k, const void* in, const void* out, const std::string& where) {
  if (rows < 0 || k <= 0) fail("{}: {} got {} rows of {} channels", where, fn, rows, k);
  if (!in || !out) fail("{}: {} got a null tensor", where, fn);
}

}  // namespace

void conv_add_bias(DType io, const float* bias, int64_t rows, int64_t k, void* y, cudaStream_t stream,
                   const std::string& where) {
  check_args("conv_add_bias", rows, k, bias, y, where);
  if (rows == 0) return;
  dispatch_activation(io, "conv_add_bias", [&](auto zero) {
    using T = decltype(zero);
    constexpr int kVec = int(16 / sizeof(T));
    T* out = static_cast<T*>(y);
    if (k % kVec == 0 && all_aligned({y}, 16))
      launch_add_bias<T, kVec>(out, bias, rows, k, stream);
    else
      launch_add_bias<T, 1>(out, bias, rows, k, stream);
  });
  check_launch(where);
}

size_t conv_bias_grad_workspace_bytes(int64_t rows, int64_t k) {
  // The sums' partials, then the sums of squares channel_sums also writes (unused here).
  return align256(channel_sums_workspace_bytes(rows, k)) + align256(size_t(k) * sizeof(float));
}

void conv_bias_grad(DType io, const void* dy, int64_t rows, int64_t k, float* dbias, void* workspace,
                    size_t workspace_bytes, cudaStream_t stream, const std::string& where) {
  check_args("conv_bias_grad", rows, k, dy, dbias, where);
  const size_t need = conv_bias_grad_workspace_bytes(rows, k);
  if (workspace_bytes < need || workspace == nullptr)
    fail("{}: conv_bias_grad needs {} bytes of workspace for {} rows of {} channels but got {}", where, need, rows, k,
         workspace_bytes);
  const size_t partials = align256(channel_sums_workspace_bytes(rows, k));
  float* squares = reinterpret_cast<float*>(static_cast<char*>(workspace) + partials);
  channel_sums(io, dy, rows, k, dbias, squares, workspace, partials, stream, where);
}

}  // namespace kiln::cuda
