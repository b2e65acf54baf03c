#pragma once
// Pooling kernels on the GPU, NHWC, F32, F16 or BF16 activations: the CPU kernels' definitions
// (pool_cpu.h) exactly, with fp32 arithmetic rounded once on store.
//  - Max pooling: padding is -inf, ties keep the first element in raster order, NaN wins; argmax
//    (U8) is the winner's window index kh * kernel + kw, counted from the window's corner
//    (oh*s - p, ow*s - p), padding included; kernel <= kMaxPoolMaxKernel when argmax is given.
//  - Max-pool backward gathers: each dx element sums, in output raster order, the dy of the
//    outputs whose window covers it and whose argmax names its position in that window.
//    Average-pool backward gathers the same way. No atomics, so results are bitwise repeatable.
//  - Average pooling divides by cpu::avgpool_divisor (PyTorch's, count_include_pad or not); its
//    backward sums dy and divides once where every divisor is k*k, else adds each dy / divisor.
//  - Adaptive average pooling: the ranges of cpu::adaptive_start / adaptive_end (adaptive_pool_cpu.h);
//    its backward gathers dy / cells from the outputs whose ranges hold the element.
//  - Global average pooling: (N, H*W, C) -> (N, C) mean, and dx = dy / (H*W) broadcast.
// Geometry is cpu::PoolGeom, built and checked by the op wrapper (pool_ops_cuda.cpp). Threads run
// along channels; 16-byte accesses (8 halves or 4 floats) when C allows and pointers are 16-byte
// aligned, else one element at a time. Every function only enqueues work on `stream` and throws
// kiln::Error naming `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"
#include "ops/pool/adaptive_pool_cpu.h"
#include "ops/pool/pool_cpu.h"

namespace kiln::cuda {

// argmax may be nullptr (inference).
void maxpool_forward(DType dtype, const cpu::PoolGeom& g, const void* x, void* y, uint8_t* argmax,
                     cudaStream_t stream, const std::string& where);
// argmax must come from maxpool_forward on the same geometry.
void maxpool_backward(DType dtype, const cpu::PoolGeom& g, const void* dy, const uint8_t* argmax, void* dx,
                      cudaStream_t stream, const std::string& where);

void avgpool_forward(DType dtype, const cpu::PoolGeom& g, bool count_include_pad, const void* x, void* y,
                     cudaStream_t stream, const std::string& where);
void avgpool_backward(DType dtype, const cpu::PoolGeom& g, bool count_include_pad, const void* dy, void* dx,
                      cudaStream_t stream, const std::string& where);

void adaptive_avgpool_forward(DType dtype, const cpu::AdaptivePoolGeom& g, const void* x, void* y, cudaStream_t stream,
                              const std::string& where);
void adaptive_avgpool_backward(DType dtype, const cpu::AdaptivePoolGeom& g, const void* dy, void* dx,
                               cudaStream_t stream, const std::string& where);

// x (n, hw, c) -> y (n, c).
void gap_forward(DType dtype, const void* x, int64_t n, int64_t hw, int64_t c, void* y, cudaStream_t stream,
                 const std::string& where);
// dy (n, c) -> dx (n, hw, c).
void gap_backward(DType dtype, const void* dy, int64_t n, int64_t hw, int64_t c, void* dx, cudaStream_t stream,
                  const std::string& where);

}  // namespace kiln::cuda
