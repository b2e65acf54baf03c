#pragma once
// KILN_HOST_DEVICE marks a function that CPU kernels and CUDA kernels share (one definition of,
// say, the dropout randomness or the loss-scale rule): __host__ __device__ under nvcc, nothing
// for the host compiler.
#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
