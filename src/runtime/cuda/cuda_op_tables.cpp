// Registers the CUDA op tables the build collected (cmake/op_tables.cmake).
#include <mutex>

#include "runtime/op_call.h"

namespace kiln {

const std::vector<const OpTable*>& cuda_op_tables();

void register_cuda_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const OpTable* t : cuda_op_tables()) register_table(*t);
  });
}

}  // namespace kiln
