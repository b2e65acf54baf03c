#pragma once
// The step's scalars (lr, step, seed) reach the device as the argument of a one-thread kernel,
// not by a copy out of host memory: a kernel's arguments are taken when it is launched, so the
// host never waits for an earlier step to have read them before it writes the next step's and
// queues that step. In a captured CUDA Graph the kernel is a node whose argument the backend
// replaces before each replay (cudaGraphExecKernelNodeSetParams).
#include <cuda_runtime.h>

namespace kiln::cuda {

// StepScalars (kiln/executable.h) as bytes: that header is not for CUDA sources.
struct StepScalarBytes {
  alignas(8) unsigned char bytes[24];
};

// Enqueues *dst = s on `stream` (under capture: adds the node).
void write_step_scalars(const StepScalarBytes& s, StepScalarBytes* dst, cudaStream_t stream);

// The kernel write_step_scalars launches: the function of the parameters the backend sets on its
// nodes in a captured graph.
const void* write_step_scalars_kernel();

}  // namespace kiln::cuda
