#include <mutex>

#include "runtime/op_call.h"

namespace kiln {

// One function per op family, defined next to its kernels in src/ops/<family>/*_cuda.cpp.
void register_conv_cuda();
void register_batchnorm_cuda();
void register_elementwise_cuda();
void register_cbr_cuda();
void register_optimizer_cuda();

void register_cuda_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_conv_cuda();
    register_batchnorm_cuda();
    register_elementwise_cuda();
    register_cbr_cuda();
    register_optimizer_cuda();
  });
}

}  // namespace kiln
