#include <mutex>

#include "runtime/op_call.h"

namespace kiln {

// One function per op family, defined next to its kernels in src/ops/<family>/.
void register_conv_cpu();
void register_linear_cpu();
void register_batchnorm_cpu();
void register_elementwise_cpu();
void register_pool_cpu();
void register_loss_cpu();
void register_cbr_cpu();
void register_optimizer_cpu();

void register_cpu_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_conv_cpu();
    register_linear_cpu();
    register_batchnorm_cpu();
    register_elementwise_cpu();
    register_pool_cpu();
    register_loss_cpu();
    register_cbr_cpu();
    register_optimizer_cpu();
  });
}

}  // namespace kiln
