// Every op kind of the one list (KILN_OP_KINDS, which the build collects from the families'
// src/ops/<family>/<family>_op_kinds.def into kiln/op_kinds.h) has a distinct name and a CPU
// kernel and a cost rule: a kind added to a family's list without its kernel, or a table that loses one,
// fails here by name, so the families' tests need no registration checks of their own. (The CUDA
// tables: src/runtime/cuda/cuda_op_kinds_test.cpp.)
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/error.h"
#include "kiln/program.h"
#include "runtime/op_call.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

TEST(OpKinds, EveryKindHasADistinctName) {
  std::set<std::string> names;
  for (int k = 0; k < kOpKindCount; ++k) {
    const std::string name = op_kind_name(OpKind(k));
    EXPECT_NE(name, "?") << "kind " << k;
    EXPECT_TRUE(names.insert(name).second) << name << " named twice";
  }
  EXPECT_EQ(int(names.size()), kOpKindCount);
  EXPECT_STREQ(op_kind_name(OpKind(kOpKindCount)), "?");  // past the list: no name
}

TEST(OpKinds, EveryKindHasACpuKernel) {
  // CAST only exists in mixed-precision programs, which run on the GPU: CPU programs are fp32.
  const std::set<OpKind> gpu_only = {OpKind::CAST};
  for (int k = 0; k < kOpKindCount; ++k) {
    if (gpu_only.count(OpKind(k))) {
      EXPECT_THROW(find_op(Device::CPU, OpKind(k)), Error) << op_kind_name(OpKind(k)) << " is no longer GPU-only";
      continue;
    }
    EXPECT_NO_THROW(find_op(Device::CPU, OpKind(k))) << op_kind_name(OpKind(k));
  }
  EXPECT_THROW(find_op(Device::CPU, OpKind(kOpKindCount)), Error);  // the lookup does fail for a missing one
}

TEST(OpKinds, EveryKindHasACostRule) {
  // src/ops/<family>/<family>_op_costs.cpp: kiln bench --profile's floors read them.
  for (int k = 0; k < kOpKindCount; ++k) EXPECT_NE(find_op_cost(OpKind(k)), nullptr) << op_kind_name(OpKind(k));
  EXPECT_EQ(find_op_cost(OpKind(kOpKindCount)), nullptr);  // the lookup does fail for a missing one
}

}  // namespace
}  // namespace kiln
