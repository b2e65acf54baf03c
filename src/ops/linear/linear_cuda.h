#pragma once
// The fully connected layer on the GPU: its three GEMMs through cuBLASLt (linear_cuda.cpp) and the
// two bias kernels for problems where cuBLASLt offers no bias epilogue (linear_bias_cuda.cu).
//
// Tensors are row-major, as on the CPU (linear_cpu.h): x (n, in), w (out, in), y and dy (n, out),
// bias (out); all of one dtype, F32, F16 or BF16 (in mixed precision the layer hands over the
// fp16/bf16 copies of its weight and bias). Products accumulate in fp32 (fp32 runs without TF32,
// as the CPU does) and every result is rounded once to the dtype.
//
// Prepare functions run when an executable is built: they choose the cuBLASLt algorithm of each
// GEMM (once per problem, device, pointer alignment and limits for the whole process) and return
// the workspace bytes the run needs. Run functions only enqueue work on `stream`, with the limits
// their prepare had. Both throw kiln::Error naming `where` (the op and its layer), the problem and
// the failing status.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::cuda {

struct LinearShape {
  int64_t n;        // batch rows
  int64_t in, out;  // F and O
};

// What the algorithm search may use: CudaOptions::linear_workspace_mib (in bytes here) and
// CudaOptions::linear_candidates, as the backend holds them (KILN_* overrides applied). Part of
// each chosen plan's key: programs with other limits get plans of their own.
struct LinearLimits {
  uint64_t max_workspace_bytes = 32ull << 20;
  int candidates = 16;  // >= 1
};

// One op's device tensors; the ones it does not have are nullptr (bias and dbias without a bias,
// dx in a network's first layer).
struct LinearTensors {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* dy = nullptr;
  void* y = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
  void* dbias = nullptr;
};

// y = x w^T (+ bias). Uses x, w, bias, y.
size_t linear_forward_prepare(int device, const LinearShape& s, DType dtype, const LinearTensors& t,
                              const LinearLimits& limits, const std::string& where);
void linear_forward(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                    void* workspace, cudaStream_t stream, const std::string& where);

// dw = dy^T x, dbias = column sums of dy (when dbias is given), dx = dy w (when dx is given); the
// gradients are overwritten. Uses dy, x, w, dx, dw, dbias.
size_t linear_backward_prepare(int device, const LinearShape& s, DType dtype, const LinearTensors& t,
                               const LinearLimits& limits, const std::string& where);
void linear_backward(int device, const LinearShape& s, DType dtype, const LinearTensors& t, const LinearLimits& limits,
                     void* workspace, cudaStream_t stream, const std::string& where);

// One line per GEMM chosen so far in this process (device, role, shape, dtype, epilogue asked
// for and whether cuBLASLt offered it, split-K reduction, workspace): what the tests print.
std::vector<std::string> linear_plans();

// --- Bias kernels (linear_bias_cuda.cu), for GEMMs without the bias epilogue ---

// y[i, o] = bias[o] for every row i: the forward then adds x w^T with beta = 1 (one rounding).
void linear_broadcast_bias(DType dtype, const void* bias, int64_t n, int64_t out, void* y, cudaStream_t stream,
                           const std::string& where);
// dbias[o] = sum over rows i of dy[i, o], accumulated in fp32 in a fixed order (bitwise the same
// every run) and rounded once; no atomics.
void linear_bias_grad(DType dtype, const void* dy, int64_t n, int64_t out, void* dbias, cudaStream_t stream,
                      const std::string& where);

}  // namespace kiln::cuda
