#pragma once
// Every CUDA, cuDNN and cuBLAS status becomes a kiln::Error that names the call and the op and
// layer it ran for (the `where` string, e.g. "CBR_FWD 'features.0'").
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "kiln/error.h"

namespace kiln::cuda {

inline void check(cudaError_t status, const char* call, const std::string& where) {
  if (status != cudaSuccess)
    fail("{}: CUDA call {} failed: {} ({})", where, call, cudaGetErrorString(status), int(status));
}

inline void check(cudnnStatus_t status, const char* call, const std::string& where) {
  if (status != CUDNN_STATUS_SUCCESS)
    fail("{}: cuDNN call {} failed: {} ({})", where, call, cudnnGetErrorString(status), int(status));
}

// After a kernel launch: launch-configuration errors surface here, not at a later call.
inline void check_launch(const std::string& where) { check(cudaGetLastError(), "kernel launch", where); }

}  // namespace kiln::cuda

#define KILN_CUDA(call, where) ::kiln::cuda::check((call), #call, (where))
