// The CUDA entry points of a library without the CUDA backend: kiln_engine where nvcc, cuDNN or
// cudnn-frontend were not found (or KILN_WITH_CUDA=OFF), and always kiln_engine_cpu (kiln::cpu of
// the installed package, which links no CUDA library). With the backend, src/runtime/cuda/ defines them.
#include "kiln/device.h"
#include "kiln/error.h"
#include "runtime/backend.h"
#include "runtime/op_call.h"

namespace kiln {

void register_cuda_ops() {}

int cuda_device_count() { return 0; }

size_t cuda_memory_in_use(int) { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int, const CudaOptions&) {
  fail("this kiln build has no CUDA backend (nvcc, cuDNN or cudnn-frontend were not found when it was "
       "built, or the program links kiln::cpu); use --device cpu, or rebuild on a machine with them "
       "(scripts/setup.sh)");
}

}  // namespace kiln
