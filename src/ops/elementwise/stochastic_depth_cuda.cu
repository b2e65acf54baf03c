#include <algorithm>
#include <initializer_list>
#include <utility>

#include "core/random.h"
#include "ops/common/flat_cuda.cuh"
#include "ops/elementwise/elementwise_cpu.h"  // dropout_stream: the CPU's mask streams
#include "ops/elementwise/stochastic_depth_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

constexpr int kDrawThreads = 256;
constexpr int64_t kDrawMaxBlocks = 1024;  // a grid-stride loop covers the rest

// One thread per sample: the CPU's draw (core/random.h is host and device code). With
// `seed_on_device` set (a replayed CUDA Graph), the seed and the step are read there when the
// kernel runs and the stream is the layer's.
__global__ void __launch_bounds__(kDrawThreads)
    draw_sample_mask(uint8_t* mask, int64_t rows, float p, uint64_t seed, uint64_t random_stream,
                     const uint64_t* seed_on_device, const int64_t* step_on_device, uint64_t layer_key) {
  const uint64_t s = seed_on_device ? *seed_on_device : seed;
  const uint64_t stream = seed_on_device ? cpu::dropout_stream(layer_key, *step_on_device) : random_stream;
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x)
    mask[r] = random_uniform(s, stream, static_cast<uint64_t>(r)) >= p;
}

// dst = mask[row] ? src * scale : 0 for the 8 elements [i0, i0 + 8) clipped to n (flat_cuda.cuh):
// the forward's product and the backward. The group's first row comes from one division; the
// rows it crosses into follow by steps.
template <class T>
struct ScaleRows {
  const T* src;
  const uint8_t* mask;
  T* dst;
  int64_t row_size;
  float scale;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
    load8(src, i0, n, vec, v);
    int64_t row = i0 / row_size, next = (row + 1) * row_size;
    bool keep = mask[row];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (i0 + j == next && i0 + j < n) {
        ++row, next += row_size;
        keep = mask[row];
      }
      v[j] = keep ? v[j] * scale : 0.f;  // as dropout: 0 even where src holds an inf or a NaN
    }
    store8(dst, i0, n, vec, v);
  }
};

void check_sizes(const char* fn, int64_t rows, int64_t row_size, const std::string& where) {
  if (rows < 0 || row_size < 0)
    fail("{}: {} got {} samples of {} elements; both must be >= 0", where, fn, rows, row_size);
}

void check_p(const char* fn, float p, const std::string& where) {
  if (!(p >= 0.f && p <= 1.f))
    fail("{}: {} got the drop probability p = {}; it must lie in [0, 1]", where, fn, p);
}

void need(const char* fn, const std::string& where, std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [ptr, name] : pointers)
    if (!ptr) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

// 1 / (1 - p) in fp32, as dropout's (0 when p = 1).
float keep_scale(float p) { return p < 1.f ? static_cast<float>(1.0 / (1.0 - double(p))) : 0.f; }

void scale_rows(DType dtype, const void* src, const uint8_t* mask, int64_t rows, int64_t row_size, float scale,
                void* dst, cudaStream_t stream, const std::string& where, const char* fn) {
  dispatch_activation(dtype, fn, [&](auto zero) {
    using T = decltype(zero);
    ScaleRows<T> op{static_cast<const T*>(src), mask, static_cast<T*>(dst), row_size, scale};
    launch_flat(op, rows * row_size, flat_vectorizable({src, dst}), stream, where);
  });
}

void forward(DType dtype, const void* x, int64_t rows, int64_t row_size, float p, uint64_t seed, uint64_t random_stream,
             const uint64_t* seed_on_device, const int64_t* step_on_device, uint64_t layer_key, void* y,
             uint8_t* mask, cudaStream_t stream, const std::string& where) {
  const char* fn = "stochastic_depth_forward";
  check_sizes(fn, rows, row_size, where);
  check_p(fn, p, where);
  if (rows == 0) return;
  need(fn, where, {{x, "x"}, {y, "y"}, {mask, "mask"}});
  const int blocks = static_cast<int>(std::min<int64_t>(ceil_div(rows, int64_t{kDrawThreads}), kDrawMaxBlocks));
  draw_sample_mask<<<blocks, kDrawThreads, 0, stream>>>(mask, rows, p, seed, random_stream, seed_on_device,
                                                        step_on_device, layer_key);
  check_launch(where);
  if (row_size > 0) scale_rows(dtype, x, mask, rows, row_size, keep_scale(p), y, stream, where, fn);
}

}  // namespace

void stochastic_depth_forward(DType dtype, const void* x, int64_t rows, int64_t row_size, float p, uint64_t seed,
                              uint64_t random_stream, void* y, uint8_t* mask, cudaStream_t stream,
                              const std::string& where) {
  forward(dtype, x, rows, row_size, p, seed, random_stream, nullptr, nullptr, 0, y, mask, stream, where);
}

void stochastic_depth_forward(DType dtype, const void* x, int64_t rows, int64_t row_size, float p,
                              const uint64_t* seed, const int64_t* step, uint64_t layer_key, void* y, uint8_t* mask,
                              cudaStream_t stream, const std::string& where) {
  need("stochastic_depth_forward", where, {{seed, "seed"}, {step, "step"}});
  forward(dtype, x, rows, row_size, p, 0, 0, seed, step, layer_key, y, mask, stream, where);
}

void stochastic_depth_backward(DType dtype, const void* dy, const uint8_t* mask, int64_t rows, int64_t row_size,
                               float p, void* dx, cudaStream_t stream, const std::string& where) {
  const char* fn = "stochastic_depth_backward";
  check_sizes(fn, rows, row_size, where);
  check_p(fn, p, where);
  if (rows == 0 || row_size == 0) return;
  need(fn, where, {{dy, "dy"}, {mask, "mask"}, {dx, "dx"}});
  scale_rows(dtype, dy, mask, rows, row_size, keep_scale(p), dx, stream, where, fn);
}

}  // namespace kiln::cuda
