// The conv_bn_act layer against the unfused Conv, BatchNorm and activation layers it replaces (whose
// steps the WholeNetwork tests hold to PyTorch's): the same network compiled with fusion and with
// --no-fuse, the same weights, one training step and one inference on the CPU. In float64 the two
// compute the same expressions in the same order but for the fused backward's (the activation's
// derivative and BatchNorm's backward in one op), so they agree to rounding; a wrong derivative,
// statistic or window moves them by O(1), which the last test shows the bound catches.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "ops/conv_bn_act/conv_bn_act_contract.h"
#include "runtime/op_cost.h"
#include "support/conv_bn_act_network.h"

namespace kiln {
namespace {

using testing::conv_bn_act::activations;
using testing::conv_bn_act::ActivationCase;
using testing::conv_bn_act::expect_within;
using testing::conv_bn_act::gaps;
using testing::conv_bn_act::Gaps;
using testing::conv_bn_act::kBatch;
using testing::conv_bn_act::kSide;
using testing::conv_bn_act::kChannels;
using testing::conv_bn_act::network;
using testing::conv_bn_act::NetworkRun;
using testing::conv_bn_act::run;
using testing::conv_bn_act::window;

// Float64: the fused step is the unfused step to rounding (measured: at most 1.4e-15 of the largest
// value, hard-swish's and GELU's gradients; the bound leaves three orders of room and sits eleven
// below another activation's gap, TheBoundCatchesAnotherActivation).
TEST(ConvBnAct, EveryActivationAndWindowTrainsAsTheUnfusedLayers) {
  for (const ActivationCase& a : activations()) {
    const Blueprint bp = network(a.add);
    const NetworkRun fused = run(bp, true, Precision::FP64), unfused = run(bp, false, Precision::FP64);
    // The stem's square, ungrouped window with ReLU is a CBR's; every other chain is conv_bn_act's.
    EXPECT_EQ(fused.fused_layers, a.name == "relu" ? 4 : 5) << a.name;
    EXPECT_EQ(unfused.fused_layers, 0);
    expect_within(gaps(fused, unfused), 1e-12, a.name + " float64");
  }
}

// fp32: the same, to fp32's rounding through five layers (measured: at most 6.2e-7, GELU's
// gradients; another activation lies 0.35 away).
TEST(ConvBnAct, Fp32TrainsAsTheUnfusedLayers) {
  for (const ActivationCase& a : activations()) {
    const Blueprint bp = network(a.add);
    expect_within(gaps(run(bp, true, Precision::FP32), run(bp, false, Precision::FP32)), 1e-4, a.name + " fp32");
  }
}

// What stays unfused: a biased convolution (fusing would drop its bias), a BatchNorm read by two
// layers, an activation that is not the BatchNorm's only reader.
TEST(ConvBnAct, FusesOnlyChainsOfSoleConsumers) {
  Blueprint b("unfused");
  b.input(kSide, kSide, 3);
  b.conv(kChannels, 3, 1, 1, /*bias=*/true, "biased").bn("biased_bn").silu();
  b.conv(window(kChannels, 3, 3, 1, 1, 1, 1, 1, 1, 1, kChannels), "dw").bn("dw_bn");
  const Blueprint::Ref normalized = b.last();
  b.silu("act");
  b.add(b.last(), normalized, "join");
  b.global_avgpool().flatten().fc(5);
  CompileOptions o;
  o.batch = kBatch, o.precision = Precision::FP64, o.input_hwc = {kSide, kSide, 3};
  const Program p = compile(b, o);
  EXPECT_EQ(p.graph.count(fused_layer::ConvBnAct), 0);
  EXPECT_EQ(p.graph.count(LayerKind::BatchNorm), 2);
}

// The squeeze-and-excitation block after the depthwise layer: its pool's backward (GAP_BWD), the
// GRAD_SUM that added its gradient to the gated multiply's, and the multiply's backward (MUL_BWD) are
// gone from the fused program; BN_ACT_BWD reads the multiply's gradient, the gate and the pool's
// N x C gradient, BN_ACT_GATE_GRAD sums the gate's, and no backward op reads the layer's output
// (the step's numbers: the tests above).
// A program for the GPU (compiled here without one); the CPU's keeps the unfused ops.
TEST(ConvBnAct, ASqueezeExcitationBlocksBackwardFoldsIntoTheLayers) {
  const auto count = [](const Program& p, OpKind kind) {
    return std::count_if(p.backward.begin(), p.backward.end(), [&](const Op& op) { return op.kind == kind; });
  };
  CompileOptions o;
  o.device = Device::CUDA, o.batch = kBatch, o.precision = Precision::FP32, o.input_hwc = {kSide, kSide, 3};
  const Blueprint bp = network([](Blueprint& b) { b.hardswish(); });
  o.fuse_cbr = false;
  const Program unfused = compile(bp, o);
  o.fuse_cbr = true;
  const Program fused = compile(bp, o);
  EXPECT_EQ(count(fused, OpKind::GAP_BWD), count(unfused, OpKind::GAP_BWD) - 1);  // the head's pool stays
  EXPECT_EQ(count(fused, OpKind::GRAD_SUM), count(unfused, OpKind::GRAD_SUM) - 1);
  EXPECT_EQ(count(fused, OpKind::MUL_BWD), 0);
  EXPECT_EQ(count(fused, OpKind::BN_ACT_GATE_GRAD), 1);
  int folded = 0;
  for (const Op& op : fused.backward) {
    if (op.kind != OpKind::BN_ACT_BWD || !op_fields<BnActBackward>(op).dy_pooled.present()) continue;
    ++folded;
    const BnActBackward<TensorId> b = op_fields<BnActBackward>(op);
    const Shape per_sample{kBatch, 1, 1, kChannels};
    EXPECT_EQ(fused.tensors[size_t(b.dy_pooled.id)].shape, per_sample);
    ASSERT_TRUE(b.gate.present());
    EXPECT_EQ(fused.tensors[size_t(b.gate.id)].shape, per_sample);
  }
  EXPECT_EQ(folded, 1);
  o.device = Device::CPU;
  EXPECT_EQ(count(compile(bp, o), OpKind::BN_ACT_GATE_GRAD), 0);
  // The depthwise layer's output: the BN_ACT_FWD's whose convolution output the gate's gradient reads.
  int y = -1;
  for (const Op& g : fused.backward)
    if (g.kind == OpKind::BN_ACT_GATE_GRAD)
      for (const Op& f : fused.forward)
        if (f.kind == OpKind::BN_ACT_FWD && op_fields<BnActForward>(f).x == op_fields<BnActGateGrad>(g).x)
          y = op_fields<BnActForward>(f).y;
  ASSERT_GE(y, 0);
  for (const Op& op : fused.backward)
    EXPECT_EQ(std::count(op.in.begin(), op.in.end(), y), 0) << op_kind_name(op.kind) << " reads the layer's output";
}

// The bound catches a wrong step: the fused network against an unfused one whose activation is
// another function (SiLU for hard-swish, ReLU6 for ReLU) is O(1) away.
TEST(ConvBnAct, TheBoundCatchesAnotherActivation) {
  const NetworkRun hardswish = run(network([](Blueprint& b) { b.hardswish(); }), true, Precision::FP64);
  const NetworkRun silu = run(network([](Blueprint& b) { b.silu(); }), false, Precision::FP64);
  const Gaps g = gaps(hardswish, silu);
  std::printf("hard-swish fused vs SiLU unfused: logits %.2e, worst gradient %.2e\n", g.step.logits,
              g.step.worst_gradient);
  EXPECT_GT(g.step.worst_gradient, 1e6 * 1e-12);
  EXPECT_GT(g.step.logits, 1e6 * 1e-12);
}

}  // namespace
}  // namespace kiln
