#include "runtime/cuda/step_scalars_cuda.h"

namespace kiln::cuda {
namespace {
__global__ void write_step_scalars_to(StepScalarBytes s, StepScalarBytes* dst) { *dst = s; }
}  // namespace

void write_step_scalars(const StepScalarBytes& s, StepScalarBytes* dst, cudaStream_t stream) {
  write_step_scalars_to<<<1, 1, 0, stream>>>(s, dst);
}

const void* write_step_scalars_kernel() { return reinterpret_cast<const void*>(&write_step_scalars_to); }

}  // namespace kiln::cuda
