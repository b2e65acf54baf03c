#pragma once
// The mul family's GPU kernels, the CPU's (mul_cpu.h) on the device: elements are F32, F16 or
// BF16, each product computed in fp32 from the two factors (exact for fp16 and bf16 factors) and
// rounded once on store, so y and the map gradients equal the CPU's correctly rounded products. A
// gate's gradient is summed in fp32 in an order fixed by the extents alone (the same bits on every
// run), rounded once. Only enqueues work on `stream` (no allocation, no host wait: a CUDA Graph can
// capture it); throws kiln::Error naming `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <string>

#include "kiln/dtype.h"
#include "ops/mul/mul_cpu.h"

namespace kiln::cuda {

// y = a * b (b broadcast over each image's rows for a gate). y may alias a.
void mul_forward(DType dtype, const cpu::MulGeom& g, const void* a, const void* b, void* y, cudaStream_t stream,
                 const std::string& where);

// da = dy * b where da is given, db = dy * a where db is given (a gate's summed over each image's
// rows). Outputs must not alias inputs.
void mul_backward(DType dtype, const cpu::MulGeom& g, const void* dy, const void* a, const void* b, void* da,
                  void* db, cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
