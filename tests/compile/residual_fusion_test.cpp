// ResNet block ends fused (conv_bn + bn_add_relu, src/ops/resblock/) against the same blocks
// unfused (Conv, BN, Add, ReLU): the same parameters, the same training steps (parameters,
// running statistics, losses) and the same inference output. Float64 programs, so any
// difference beyond rounding is a wrong formula, not precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ir/fused_layer_kinds.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

using testing::fill_labels;
using testing::fill_normal;
using testing::host_values;

// Identity blocks (one on the data batch itself), a projection block and a stride-2 body.
Blueprint blocks() {
  Blueprint body0("body");
  body0.conv(3, 3, 1, 1, false, "conv1").bn("bn1");
  Blueprint body1("body");
  body1.cbr(8, 3, 1, 1, "conv1").conv(8, 3, 1, 1, false, "conv2").bn("bn2");
  Blueprint body2("body");
  body2.cbr(16, 3, 2, 1, "conv1").conv(16, 3, 1, 1, false, "conv2").bn("bn2");
  Blueprint proj("downsample");
  proj.conv(16, 1, 2, 0, false, "0").bn("1");
  Blueprint m("blocks");
  m.input(8, 8, 3);
  m.residual(body0, std::nullopt, true, "block0").cbr(8, 3, 1, 1, "stem");
  m.residual(body1, std::nullopt, true, "block1").residual(body2, proj, true, "block2");
  m.global_avgpool("pool").fc(5, true, "fc");
  return m;
}

CompileOptions fp64(bool fuse) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 6, o.fuse_cbr = fuse;
  o.optimizer.set("momentum", 0.9);
  return o;
}

// Largest |a - b| relative to the largest |a| (0 for two empty tensors).
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i])), scale = std::max(scale, std::abs(a[i]));
  return diff / scale;
}

TEST(ResidualFusion, BlockEndsAreFusedWithTheUnfusedParameters) {
  const Program fused = compile(blocks(), fp64(true));
  const Program unfused = compile(blocks(), fp64(false));
  EXPECT_EQ(fused.graph.count(fused_layer::BnAddRelu), 3);
  EXPECT_EQ(fused.graph.count(fused_layer::ConvBN), 4);
  EXPECT_EQ(fused.graph.count(LayerKind::Add), 0);
  ASSERT_EQ(fused.params.size(), unfused.params.size());
  for (size_t i = 0; i < fused.params.size(); ++i)
    EXPECT_EQ(fused.tensors[fused.params[i]].name, unfused.tensors[unfused.params[i]].name);
}

// An add without a ReLU after it, or a conv with a bias (fusing would drop it), stays unfused.
TEST(ResidualFusion, OnlyWholeBlockEndsFuse) {
  Blueprint body("body");
  body.conv(3, 3, 1, 1, false, "conv").bn("bn");
  Blueprint no_relu("no_relu");
  no_relu.input(6, 6, 3).residual(body, std::nullopt, /*relu_after=*/false, "block").global_avgpool("pool").fc(2);
  const Program p = compile(no_relu, fp64(true));
  EXPECT_EQ(p.graph.count(fused_layer::BnAddRelu), 0);
  EXPECT_EQ(p.graph.count(LayerKind::Add), 1);
  EXPECT_EQ(p.graph.count(LayerKind::Conv), 1);

  Blueprint biased_body("body");
  biased_body.conv(3, 3, 1, 1, /*bias=*/true, "conv").bn("bn");
  Blueprint biased("biased");
  biased.input(6, 6, 3).residual(biased_body, std::nullopt, true, "block").global_avgpool("pool").fc(2);
  const Program q = compile(biased, fp64(true));
  EXPECT_EQ(q.graph.count(fused_layer::BnAddRelu), 0);
  EXPECT_GE(q.find("block.conv.bias"), 0);
}

// A body that does not end in Conv -> BN beside a shortcut that does: the shortcut becomes the
// normalized branch and the body the identity input; the steps equal the unfused ones.
Blueprint swapped_block() {
  Blueprint body("body");
  body.cbr(8, 3, 2, 1, "conv1");
  Blueprint proj("downsample");
  proj.conv(8, 1, 2, 0, false, "0").bn("1");
  Blueprint m("swapped");
  m.input(8, 8, 4).cbr(4, 3, 1, 1, "stem").residual(body, proj, true, "block");
  m.global_avgpool("pool").fc(3, true, "fc");
  return m;
}

TEST(ResidualFusion, AShortcutConvBnBesideAnyBodyFuses) {
  const Program fused_program = compile(swapped_block(), fp64(true));
  ASSERT_EQ(fused_program.graph.count(fused_layer::BnAddRelu), 1);
  ASSERT_EQ(fused_program.graph.count(fused_layer::ConvBN), 1);
  Executable fused(compile(swapped_block(), fp64(true)), 9);
  Executable unfused(compile(swapped_block(), fp64(false)), 9);
  std::mt19937 rng(4);
  fill_normal(fused.tensor(fused.program().input), rng);
  fill_labels(fused.tensor(fused.program().label), 3, rng);
  for (int id : {fused.program().input, fused.program().label}) {
    const HostTensor t = fused.tensor(id);
    unfused.write(unfused.id(t.spec->name), t.data, t.spec->bytes());
  }
  for (int step = 0; step < 2; ++step)
    for (Executable* e : {&fused, &unfused}) e->run_step({0.05f, step, 1});
  EXPECT_NEAR(testing::loss_of(fused), testing::loss_of(unfused), 1e-12);
  for (int id : fused.program().params) {
    const std::string& name = fused.program().tensors[id].name;
    EXPECT_LT(max_rel_diff(host_values(fused.tensor(id)), host_values(unfused.tensor(unfused.id(name)))), 1e-10)
        << name;
  }
}

TEST(ResidualFusion, TrainingStepsAndInferenceEqualTheUnfusedBlocks) {
  Executable fused(compile(blocks(), fp64(true)), 5);
  Executable unfused(compile(blocks(), fp64(false)), 5);
  std::mt19937 rng(11);
  fill_normal(fused.tensor(fused.program().input), rng);
  fill_labels(fused.tensor(fused.program().label), 5, rng);
  unfused.write(unfused.program().input, fused.tensor(fused.program().input).data,
                fused.tensor(fused.program().input).spec->bytes());
  unfused.write(unfused.program().label, fused.tensor(fused.program().label).data,
                fused.tensor(fused.program().label).spec->bytes());
  for (int step = 0; step < 3; ++step) {
    const StepScalars s{0.05f, step, 1};
    for (Executable* e : {&fused, &unfused}) e->run_step(s);
    EXPECT_NEAR(testing::loss_of(fused), testing::loss_of(unfused), 1e-12) << "step " << step;
  }
  // After three steps every parameter and running statistic agrees to float64 rounding; a wrong
  // BN gradient in either branch would move them by far more (the steps change them by ~1e-2).
  const Program& p = fused.program();
  for (const std::vector<int>* ids : {&p.params, &p.buffers})
    for (int id : *ids) {
      const std::string& name = p.tensors[id].name;
      const std::vector<double> a = host_values(fused.tensor(id)), b = host_values(unfused.tensor(unfused.id(name)));
      ASSERT_EQ(a.size(), b.size()) << name;
      EXPECT_LT(max_rel_diff(a, b), 1e-10) << name;
    }
  fused.run_inference({0.f, 3, 1});
  unfused.run_inference({0.f, 3, 1});
  EXPECT_LT(max_rel_diff(host_values(fused.tensor(p.inference_logits)),
                         host_values(unfused.tensor(unfused.program().inference_logits))),
            1e-12);
}

// The zoo's ResNet-18 for CIFAR in fp32: the fused and unfused programs compute the same
// function (their initial parameters are keyed by name, so they are the same).
TEST(ResidualFusion, ZooResnetInferenceEqualsUnfused) {
  CompileOptions o;
  o.batch = 2;
  Executable fused(compile(zoo::resnet18_cifar(), o), 3);
  o.fuse_cbr = false;
  Executable unfused(compile(zoo::resnet18_cifar(), o), 3);
  ASSERT_EQ(fused.program().graph.count(fused_layer::BnAddRelu), 8);
  std::mt19937 rng(5);
  fill_normal(fused.tensor(fused.program().input), rng);
  unfused.write(unfused.program().input, fused.tensor(fused.program().input).data,
                fused.tensor(fused.program().input).spec->bytes());
  fused.run_inference({0.f, 0, 1});
  unfused.run_inference({0.f, 0, 1});
  EXPECT_LT(max_rel_diff(host_values(fused.tensor(fused.program().inference_logits)),
                         host_values(unfused.tensor(unfused.program().inference_logits))),
            1e-5);
}

}  // namespace
}  // namespace kiln
