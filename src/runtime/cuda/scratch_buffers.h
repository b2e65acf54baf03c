#pragma once
// Device buffers for work done at prepare, outside the memory plan (timing candidate kernels and
// cuDNN plans on scratch tensors): freed however that work ends.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {

class ScratchBuffers {
 public:
  ScratchBuffers() = default;
  ScratchBuffers(const ScratchBuffers&) = delete;
  ScratchBuffers& operator=(const ScratchBuffers&) = delete;
  ~ScratchBuffers() {
    for (void* p : buffers_) cudaFree(p);
  }
  // At least 256 bytes, 256-byte aligned (cudaMalloc's alignment).
  void* allocate(size_t bytes, const std::string& where) {
    void* p = nullptr;
    KILN_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)), where);
    buffers_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> buffers_;
};

}  // namespace kiln::cuda
