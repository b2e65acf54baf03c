#pragma once
// Loss-scaling kernels on the GPU; semantics match the CPU kernels (loss_scale_cpu.h) and the
// shared update rule (loss_scale_rule.h). Every value that decides anything (the scale, the flag,
// the count) stays in device memory and is read by the kernels there, so the calls can be
// captured into a CUDA Graph and replayed. Every function only enqueues work on `stream` and
// throws kiln::Error naming `where`.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"
#include "ops/loss_scale/loss_scale_rule.h"

namespace kiln::cuda {

// Mixed precision: the fp16/bf16 gradients checked beside the fp32 ones, in the same pass.
struct ComputeGrads {
  const void* data = nullptr;  // nullptr: none
  int64_t n = 0;               // a multiple of 8 (the kernel's group of elements) unless x is empty
  DType dtype = DType::F16;    // F16 or BF16
};

// *found = 1 when any of the fp32 x[0, n) or of compute.data[0, compute.n) is inf or NaN, else 0.
// Deterministic: blocks that find one all store the same 1 into the zeroed flag; nothing is summed.
void find_nonfinite(const float* x, int64_t n, int32_t* found, cudaStream_t stream, const std::string& where,
                    ComputeGrads compute = {});

// loss_scale::update on the device state (one thread).
void update_loss_scale(const int32_t* found, float* scale, int32_t* clean_steps, const loss_scale::Rule& rule,
                       cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
