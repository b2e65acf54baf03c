// Every op kind has a CUDA kernel in a CUDA build (no GPU needed: the tables are looked up, not
// run), so a GPU program never meets a kind its backend lacks.
#include <gtest/gtest.h>

#include "kiln/error.h"
#include "kiln/program.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

TEST(CudaOpKinds, EveryKindHasACudaKernel) {
  register_cuda_ops();
  for (int k = 0; k < kOpKindCount; ++k)
    EXPECT_NO_THROW(find_op(Device::CUDA, OpKind(k))) << op_kind_name(OpKind(k));
  EXPECT_THROW(find_op(Device::CUDA, OpKind(kOpKindCount)), Error);
}

}  // namespace
}  // namespace kiln
