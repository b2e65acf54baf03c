#pragma once
// The tensor checks the CPU and CUDA pooling ops share (pool_ops_cpu.cpp, pool_ops_cuda.cpp).
#include <cstdint>

#include "kiln/error.h"
#include "ops/pool/pool_cpu.h"
#include "runtime/op_call.h"

namespace kiln::pool {

// The saved argmax of MAXPOOL_FWD / MAXPOOL_BWD: one U8 window index per element of y
// (pool_cpu.h), which only a window of at most 256 positions fits.
inline uint8_t* maxpool_argmax(const OpCall& call, const TensorArg& argmax, const cpu::PoolGeom& g) {
  if (g.kernel > kMaxPoolMaxKernel)
    fail("{}: kernel {} has {} window positions, more than its U8 argmax can index; use a kernel of at most {}",
         call.where(), g.kernel, g.kernel * g.kernel, kMaxPoolMaxKernel);
  if (argmax.dtype() != DType::U8 || argmax.numel() != numel(g.out_shape()))
    fail("{}: argmax '{}' is {} {} but must hold one U8 window index per element of y {}; recompile the program",
         call.where(), argmax.spec->name, dtype_name(argmax.dtype()), shape_str(argmax.shape()),
         shape_str(g.out_shape()));
  return argmax.as<uint8_t>();
}

}  // namespace kiln::pool
