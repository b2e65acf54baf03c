// A block end's gradient in two terms through whole programs on the CPU: where a block end's output
// feeds the next block's body and shortcut, its backward reads their two gradients and no GRAD_SUM
// writes their sum. The values are held elsewhere: the op's bits against GRAD_SUM's sum
// (ResblockOps.TwoGradientTermsGiveTheSummedGradientsBits) and whole training steps against the
// unfused blocks, whose GRAD_SUMs stay (ResidualFusion.TrainingStepsAndInferenceEqualTheUnfusedBlocks).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/compile.h"
#include "ops/resblock/resblock_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

// A stem, two identity blocks and a projection block: block1's and block2's outputs each feed a
// body and a shortcut (their sums can go), the stem's feeds block1 (its CBR backward reads the
// sum, which stays) and block3's feeds only the pool.
Blueprint three_blocks() {
  auto body = [](int channels, int stride) {
    Blueprint b("body");
    b.cbr(channels, 3, stride, 1, "conv1").conv(channels, 3, 1, 1, false, "conv2").bn("bn2");
    return b;
  };
  Blueprint proj("downsample");
  proj.conv(12, 1, 2, 0, false, "0").bn("1");
  Blueprint m("three_blocks");
  m.input(8, 8, 3).cbr(6, 3, 1, 1, "stem");
  m.residual(body(6, 1), std::nullopt, true, "block1").residual(body(6, 1), std::nullopt, true, "block2");
  m.residual(body(12, 2), proj, true, "block3").global_avgpool("pool").fc(4, true, "fc");
  return m;
}

CompileOptions options(bool fuse) {
  CompileOptions o;
  o.batch = 5, o.fuse_cbr = fuse;
  return o;
}

int count(const std::vector<Op>& ops, OpKind kind) {
  int n = 0;
  for (const Op& op : ops) n += op.kind == kind;
  return n;
}

bool has_tensor(const Program& p, const std::string& name) {
  for (const TensorSpec& t : p.tensors)
    if (t.name == name) return true;
  return false;
}

TEST(GradTerms, BlockEndsReadTheirOutputsTwoGradients) {
  const Program sums = compile(three_blocks(), options(false));  // unfused: every sum is a GRAD_SUM
  const Program terms = compile(three_blocks(), options(true));
  EXPECT_EQ(count(sums.backward, OpKind::GRAD_SUM), 3);
  EXPECT_EQ(count(terms.backward, OpKind::GRAD_SUM), 1);  // the stem's
  int two_terms = 0;
  for (const Op& op : terms.backward)
    if (op.kind == OpKind::BN_ADD_RELU_BWD) two_terms += op_fields<BnAddReluBackward>(op).dy2.present();
  EXPECT_EQ(two_terms, 2);
  // The summed gradients of block1's and block2's outputs are not tensors of the fused program; the
  // stem's is.
  for (const char* name : {"d:block1.relu", "d:block2.relu"}) {
    EXPECT_TRUE(has_tensor(sums, name)) << name;
    EXPECT_FALSE(has_tensor(terms, name)) << name;
  }
  EXPECT_TRUE(has_tensor(terms, "d:stem"));
}

}  // namespace
}  // namespace kiln
