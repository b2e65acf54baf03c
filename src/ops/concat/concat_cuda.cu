#include <algorithm>

#include "kiln/error.h"
#include "ops/concat/concat_cuda.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // a grid-stride loop covers the rest

// One thread per element of the copied slice; Bits is an unsigned integer of the element's size,
// so every dtype of that size takes the same kernel and is copied exactly.
template <class Bits>
__global__ void __launch_bounds__(kThreads)
    copy_channels_kernel(const Bits* src, int64_t src_channels, int64_t src_offset, Bits* dst, int64_t dst_channels,
                         int64_t dst_offset, int64_t channels, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / channels, c = i - r * channels;
    dst[r * dst_channels + dst_offset + c] = src[r * src_channels + src_offset + c];
  }
}

template <class Bits>
void launch(const void* src, int64_t src_channels, int64_t src_offset, void* dst, int64_t dst_channels,
            int64_t dst_offset, int64_t channels, int64_t total, cudaStream_t stream, const std::string& where) {
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks));
  copy_channels_kernel<Bits><<<blocks, kThreads, 0, stream>>>(static_cast<const Bits*>(src), src_channels, src_offset,
                                                             static_cast<Bits*>(dst), dst_channels, dst_offset,
                                                             channels, total);
  check_launch(where);
}

}  // namespace

void copy_channels(DType dtype, const void* src, int64_t src_channels, int64_t src_offset, void* dst,
                   int64_t dst_channels, int64_t dst_offset, int64_t rows, int64_t channels, cudaStream_t stream,
                   const std::string& where) {
  if (rows < 0 || channels < 0 || src_offset < 0 || dst_offset < 0 || src_offset + channels > src_channels ||
      dst_offset + channels > dst_channels)
    fail("{}: copy_channels got rows {}, channels [{}, {}) of {} into [{}, {}) of {}; the slices must lie inside "
         "their rows",
         where, rows, src_offset, src_offset + channels, src_channels, dst_offset, dst_offset + channels,
         dst_channels);
  const int64_t total = rows * channels;
  if (total == 0) return;
  if (!src || !dst) fail("{}: copy_channels needs device pointers, got src {} and dst {}", where, src, dst);
  if (dtype == DType::F32)
    return launch<uint32_t>(src, src_channels, src_offset, dst, dst_channels, dst_offset, channels, total, stream,
                            where);
  if (dtype == DType::F16 || dtype == DType::BF16)
    return launch<uint16_t>(src, src_channels, src_offset, dst, dst_channels, dst_offset, channels, total, stream,
                            where);
  fail("{}: copy_channels runs F32, F16 and BF16 on the GPU, not {}", where, dtype_name(dtype));
}

}  // namespace kiln::cuda
