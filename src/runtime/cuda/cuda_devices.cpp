// The GPUs the process sees (kiln/device.h), asked of the CUDA runtime.
#include <cuda_runtime.h>

#include "kiln/device.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return count;
}

size_t cuda_memory_in_use(int index) {
  if (index < 0 || index >= cuda_device_count()) return 0;
  int current = 0;
  KILN_CUDA(cudaGetDevice(&current), "device memory");
  KILN_CUDA(cudaSetDevice(index), "device memory");
  size_t free = 0, total = 0;
  KILN_CUDA(cudaMemGetInfo(&free, &total), "device memory");
  KILN_CUDA(cudaSetDevice(current), "device memory");
  return total - free;
}

}  // namespace kiln
