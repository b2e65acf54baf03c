// Every layer's backward, through the real compiled program in float64, against central
// finite differences of the training loss. Each model puts the layer under test between a
// first conv (so its dX is exercised through the conv's weight gradient) and the classifier.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ir/fused_layer_kinds.h"
#include "kiln/blueprint.h"
#include "support/activations.h"
#include "support/gradcheck.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

using testing::central_difference;
using testing::expect_gradient_matches;
using testing::fill_labels;
using testing::fill_normal;
using testing::GradError;
using testing::loss_of;

struct GradCase {
  std::string name;
  Blueprint model;
  Shape input_hwc;
  bool fuse = true;
  bool seams = false;  // CompileOptions::fuse_seams
};

// Checks d(loss)/d(every parameter element in a sample) and d(loss)/d(input) is not needed:
// the first layer never computes it. Dropout masks depend on (seed, step) only, so repeated
// forwards at the same step see the same mask.
void check_gradients(const GradCase& c) {
  CompileOptions o;
  o.precision = Precision::FP64;
  o.batch = 3;
  o.input_hwc = c.input_hwc;
  o.fuse_cbr = c.fuse;
  o.fuse_seams = c.seams;
  Executable exe(compile(c.model, o), 7);
  std::mt19937 rng(123);
  fill_normal(exe.tensor(exe.program().input), rng);
  const int64_t classes = exe.program().tensors[exe.program().logits].shape[1];
  fill_labels(exe.tensor(exe.program().label), int(classes), rng);
  const StepScalars s{0.f, 3, 11};
  exe.run_forward(s);
  exe.run_backward(s);

  const double eps = 1e-6;
  int checked = 0;
  auto loss = [&] {
    exe.run_forward(s);
    return loss_of(exe);
  };
  for (size_t k = 0; k < exe.program().params.size(); ++k) {
    HostTensor p = exe.tensor(exe.program().params[k]);
    HostTensor g = exe.tensor(exe.program().grads[k]);
    // Later forwards do not touch the analytic gradient.
    const int64_t n = p.numel();
    const int64_t stride = std::max<int64_t>(1, n / 7);
    std::vector<double> analytic, numeric;
    for (int64_t i = 0; i < n; i += stride) {
      numeric.push_back(central_difference(loss, p.as<double>()[i], eps));
      analytic.push_back(g.as<double>()[i]);
      ++checked;
    }
    expect_gradient_matches(analytic, numeric, 1e-6, GradError::PerElement, c.name + ": " + p.spec->name,
                            size_t(stride));
  }
  EXPECT_GT(checked, 0) << c.name;
}

Blueprint head(Blueprint m) { return m.flatten("flat").fc(4, true, "head"); }

TEST(GradCheck, Conv) {
  Blueprint m("conv");
  m.conv(4, 3, 1, 1, true, "c0").conv(5, 3, 2, 1, true, "c1");
  check_gradients({"conv", head(m), {7, 7, 3}});
}

// Convolutions in every window the Conv op runs: groups, depthwise with a channel multiplier,
// dilation, a rectangular kernel with its own strides and uneven padding; and a cbr() in a grouped
// window, which is its Conv, BatchNorm and ReLU unfused.
TEST(GradCheck, ConvWindows) {
  Blueprint m("conv_windows");
  m.conv(ConvAttrs{.out_channels = 6, .kernel_h = 3, .kernel_w = 3, .pad_top = 1, .pad_left = 1, .pad_bottom = 1,
                   .pad_right = 1, .groups = 3, .bias = true},
         "grouped");
  m.conv(ConvAttrs{.out_channels = 12, .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_top = 1,
                   .pad_left = 1, .pad_bottom = 1, .pad_right = 1, .groups = 6},
         "depthwise_x2");
  m.conv(ConvAttrs{.out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_top = 2, .pad_left = 2, .pad_bottom = 2,
                   .pad_right = 2, .dilation_h = 2, .dilation_w = 2, .bias = true},
         "dilated");
  m.conv(ConvAttrs{.out_channels = 4, .kernel_h = 1, .kernel_w = 3, .stride_h = 1, .stride_w = 2, .pad_left = 2,
                   .pad_right = 1},
         "rect");
  ConvBnAttrs grouped_cbr{ConvAttrs::square(4, 3, 1, 1), BatchNormAttrs{}};
  grouped_cbr.conv.groups = 2;
  m.cbr(grouped_cbr, "gcbr");
  check_gradients({"conv_windows", head(m), {8, 7, 3}});
}

TEST(GradCheck, BatchNorm) {
  Blueprint m("bn");
  m.conv(4, 3, 1, 1, false, "c0").bn("bn");
  check_gradients({"bn", head(m), {5, 5, 2}, false});
}

TEST(GradCheck, ReLU) {
  Blueprint m("relu");
  m.conv(4, 3, 1, 1, true, "c0").relu("r");
  check_gradients({"relu", head(m), {5, 5, 2}});
}

TEST(GradCheck, FusedCbrAndFirstLayerCbr) {
  Blueprint m("cbr");
  m.cbr(8, 3, 1, 1, "first").cbr(8, 1, 2, 0, "second");
  check_gradients({"cbr", head(m), {6, 5, 3}});
}

TEST(GradCheck, UnfusedConvBnRelu) {
  Blueprint m("unfused");
  m.conv(8, 3, 1, 1, false, "c0").bn("b0").relu("r0").conv(8, 3, 2, 1, false, "c1").bn("b1").relu("r1");
  check_gradients({"unfused", head(m), {6, 5, 3}, false});
}

TEST(GradCheck, EveryActivation) {
  for (auto [f, alpha] : testing::every_activation(false)) {
    Blueprint m(activation_name(f));
    // Twice, so the first one's dX is exercised through the second conv's weight gradient.
    m.conv(4, 3, 1, 1, true, "c0").activation(f, alpha, "act0").conv(4, 3, 1, 1, true, "c1").activation(f, alpha, "act1");
    check_gradients({activation_name(f), head(m), {5, 5, 2}});
  }
}

TEST(GradCheck, MaxPool) {
  Blueprint m("maxpool");
  m.conv(4, 3, 1, 1, true, "c0").maxpool(3, 2, 1, "pool");
  check_gradients({"maxpool", head(m), {7, 7, 2}});
}

TEST(GradCheck, AvgPool) {
  Blueprint m("avgpool");
  m.conv(4, 3, 1, 1, true, "c0").avgpool(3, 2, 1, "pool");
  check_gradients({"avgpool", head(m), {7, 7, 2}});
}

TEST(GradCheck, GlobalAvgPoolAndLinear) {
  Blueprint m("gap");
  m.conv(4, 3, 1, 1, true, "c0").global_avgpool("gap").fc(6, true, "fc1").fc(3, false, "fc2");
  check_gradients({"gap", m, {5, 5, 2}});
}

TEST(GradCheck, Dropout) {
  Blueprint m("dropout");
  m.conv(4, 3, 1, 1, true, "c0").dropout(0.3f, "drop");
  check_gradients({"dropout", head(m), {5, 5, 2}});
}

// ResNet blocks: identity and projection shortcuts, and a block on the data batch itself (its
// convolution computes no dX and its shortcut needs no gradient). Fused, the block ends run as
// conv_bn + bn_add_relu ops; unfused, as Conv, BN, Add and ReLU.
Blueprint residual_blocks() {
  Blueprint body0("body");
  body0.conv(2, 3, 1, 1, false, "conv1").bn("bn1");
  Blueprint body("body");
  body.cbr(4, 3, 1, 1, "conv1").conv(4, 3, 1, 1, false, "conv2").bn("bn2");
  Blueprint body2("body");
  body2.cbr(6, 3, 2, 1, "conv1").conv(6, 3, 1, 1, false, "conv2").bn("bn2");
  Blueprint proj("downsample");
  proj.conv(6, 1, 2, 0, false, "0").bn("1");
  Blueprint m("res");
  m.residual(body0, std::nullopt, true, "block0").cbr(4, 3, 1, 1, "stem");
  m.residual(body, std::nullopt, true, "block1").residual(body2, proj, true, "block2");
  return head(m);
}

TEST(GradCheck, FusedResidualBlockEnds) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {6, 6, 2};
  const Program p = compile(residual_blocks(), o);
  ASSERT_EQ(p.graph.count(fused_layer::BnAddRelu), 3);  // the fused ops are what is checked
  ASSERT_EQ(p.graph.count(fused_layer::ConvBN), 4);
  check_gradients({"residual fused", residual_blocks(), {6, 6, 2}});
}

// Fusion across layers: the producers' masks recomputed from scale and shift, the consumers' wgrad
// of the applied input and their dgrad into the producers' (never written) outputs, against finite
// differences: cbr -> cbr (three in a row), and in the residual blocks cbr -> conv_bn.
TEST(GradCheck, FusionAcrossLayers) {
  Blueprint m("cbr");
  m.cbr(8, 3, 1, 1, "first").cbr(8, 1, 2, 0, "second").cbr(6, 3, 1, 1, "third");
  check_gradients({"seams", head(m), {6, 5, 3}, true, true});
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {6, 6, 2}, o.fuse_seams = true;
  int seams = 0;
  for (const Layer& l : compile(residual_blocks(), o).graph.layers) seams += l.marks.seam_out;
  ASSERT_EQ(seams, 2);  // block1.conv1 -> conv2, block2.conv1 -> conv2; the stem is not (block1's add reads it)
  check_gradients({"residual seams", residual_blocks(), {6, 6, 2}, true, true});
}

TEST(GradCheck, UnfusedResidualBlocks) {
  check_gradients({"residual unfused", residual_blocks(), {6, 6, 2}, /*fuse=*/false});
}


// A graph written with handles (Blueprint::Ref): c0's output forks into two branches joined by
// add, one output is read twice by one add, a ResNet block's identity is a handle (fused, its
// conv_bn and bn_add_relu), and a branch reads the data batch itself. A fork's gradient is the sum
// of its consumers'.
Blueprint graph_with_forks() {
  Blueprint m("forks");
  m.conv(4, 3, 1, 1, true, "c0");
  const Blueprint::Ref fork = m.last();
  m.conv(4, 3, 1, 1, true, "a").tanh("a_act");
  const Blueprint::Ref a = m.last();
  m.from(fork).conv(4, 1, 1, 0, true, "b");
  m.add(a, m.last(), "join");
  m.add(m.last(), m.last(), "twice");
  const Blueprint::Ref x = m.last();
  m.conv(4, 3, 1, 1, false, "block.conv1").bn("block.bn1").relu("block.relu1");
  m.conv(4, 3, 1, 1, false, "block.conv2").bn("block.bn2");
  m.add(m.last(), x, "block.add").relu("block.relu");
  const Blueprint::Ref y = m.last();
  m.from(m.source()).conv(4, 3, 1, 1, true, "side");
  m.add(y, m.last(), "with_side");
  return head(m);
}

TEST(GradCheck, GraphWithForks) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {5, 6, 2};
  const Program p = compile(graph_with_forks(), o);
  ASSERT_EQ(p.graph.count(fused_layer::BnAddRelu), 1);  // the fused block end is what is checked
  ASSERT_EQ(p.graph.count(LayerKind::CBR), 1);
  ASSERT_EQ(p.graph.count(LayerKind::Add), 3);  // join, twice, with_side
  check_gradients({"graph fused", graph_with_forks(), {5, 6, 2}});
  check_gradients({"graph unfused", graph_with_forks(), {5, 6, 2}, /*fuse=*/false});
}

// Channel concatenation (torch.cat(xs, dim=1)): c0's output forks into branches of 3 and 2 channels
// joined with c0's own output by one concat (c0's gradient is then the sum of three: its slice and
// both branches'); a second concat reads the data batch itself beside a branch (that input wants no
// gradient) and one handle twice (its gradient the sum of two slices).
Blueprint graph_with_concat() {
  Blueprint m("concat");
  m.conv(4, 3, 1, 1, true, "c0");
  const Blueprint::Ref fork = m.last();
  m.conv(3, 3, 1, 1, true, "a").tanh("a_act");
  const Blueprint::Ref a = m.last();
  m.from(fork).conv(2, 1, 1, 0, true, "b");
  m.concat({a, m.last(), fork}, "cat");
  m.conv(4, 3, 1, 1, false, "after").bn("after_bn").relu("after_relu");
  const Blueprint::Ref after = m.last();
  m.concat({m.source(), after, after}, "cat_in");
  return head(m);
}

TEST(GradCheck, ConcatOfForks) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {5, 6, 2};
  const Program p = compile(graph_with_concat(), o);
  ASSERT_EQ(p.graph.count(LayerKind::Concat), 2);
  ASSERT_GE(p.find("cat"), 0);
  EXPECT_EQ(p.tensors[size_t(p.find("cat"))].shape, (Shape{3, 5, 6, 9}));
  ASSERT_GE(p.find("cat_in"), 0);
  EXPECT_EQ(p.tensors[size_t(p.find("cat_in"))].shape, (Shape{3, 5, 6, 10}));
  check_gradients({"concat fused", graph_with_concat(), {5, 6, 2}});
  check_gradients({"concat unfused", graph_with_concat(), {5, 6, 2}, /*fuse=*/false});
}

// Stochastic depth inside residual blocks (torchvision's EfficientNet and ConvNeXt: the body's
// output times mask[n] / (1 - p), then the shortcut added): the mask depends on the seed, the step
// and the layer's name only, so every forward of the differences draws the step's own. The check
// asserts that the mask keeps some of the 3 samples and drops others, so both paths are checked.
// A second block's p = 0 is the identity, its gradient passed through.
Blueprint stochastic_depth_blocks() {
  Blueprint body("body");
  body.conv(4, 3, 1, 1, false, "conv").bn("bn").stochastic_depth(0.5f, "sd");
  Blueprint plain("body");
  plain.conv(4, 3, 1, 1, true, "conv").stochastic_depth(0.f, "sd");
  Blueprint m("stochastic_depth");
  m.conv(4, 3, 1, 1, true, "c0").residual(body, std::nullopt, true, "block").residual(plain, std::nullopt, false, "b2");
  return head(m);
}

TEST(GradCheck, StochasticDepthInResidualBlocks) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {5, 5, 2};
  Executable exe(compile(stochastic_depth_blocks(), o), 7);
  const Program& p = exe.program();
  ASSERT_EQ(p.graph.count(LayerKind::StochasticDepth), 2);
  std::string mask;
  for (const Layer& l : p.graph.layers)
    if (l.kind == LayerKind::StochasticDepth && attrs_of<StochasticDepthAttrs>(l).p > 0) mask = l.name + ":mask";
  ASSERT_GE(p.find(mask), 0);
  exe.run_forward({0.f, 3, 11});  // check_gradients' step and seed
  const std::vector<uint8_t> kept = exe.read<uint8_t>(exe.id(mask));
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_NE(std::count(kept.begin(), kept.end(), 1), 0) << mask << ": no sample kept";
  EXPECT_NE(std::count(kept.begin(), kept.end(), 0), 0) << mask << ": no sample dropped";
  check_gradients({"stochastic depth fused", stochastic_depth_blocks(), {5, 5, 2}});
  check_gradients({"stochastic depth unfused", stochastic_depth_blocks(), {5, 5, 2}, /*fuse=*/false});
}

// Pooling windows in ceil mode: a max pool whose last window hangs over the edge (12 -> 6, floor 5);
// an average over those 6 rows (3/2, padding 1 -> 4) whose last window [5, 8) holds an input row, a
// padding row and a row past the padding, the padding not in its divisor (1 row); then one over the
// 4 rows (-> 3) whose last window [3, 6) is alike, the padding counted (2 rows: not what lies past).
TEST(GradCheck, PoolWindowsInCeilMode) {
  PoolAttrs hanging = PoolAttrs::square(3, 2, 0);
  hanging.ceil_mode = true;
  PoolAttrs uncounted = PoolAttrs::square(3, 2, 1);
  uncounted.ceil_mode = true, uncounted.count_include_pad = false;
  PoolAttrs counted = uncounted;
  counted.count_include_pad = true;
  Blueprint m("pool_windows");
  m.conv(4, 3, 1, 1, true, "c0").maxpool(hanging, "max").conv(4, 3, 1, 1, true, "c1").avgpool(uncounted, "avg");
  m.avgpool(counted, "avg_pad");
  check_gradients({"pool windows", head(m), {12, 12, 2}});
}

// Adaptive average pooling: 7 -> 3 (overlapping ranges), 3 -> 5x4 (growing), its own size (a view:
// the gradient passed through) and 1x1 (the GAP ops, a map a 1x1 convolution reads).
TEST(GradCheck, AdaptiveAvgPool) {
  Blueprint m("adaptive");
  m.conv(4, 3, 1, 1, true, "c0").adaptive_avgpool(3, 3, "shrink").conv(4, 3, 1, 1, true, "c1");
  m.adaptive_avgpool(5, 4, "grow").adaptive_avgpool(5, 4, "same").conv(4, 3, 1, 1, true, "c2");
  m.adaptive_avgpool(1, 1, "squeeze").conv(3, 1, 1, 0, true, "excite");
  check_gradients({"adaptive", head(m), {7, 7, 2}});
}

// Elementwise products (PyTorch's a * b): a gate of the map's own shape, x * sigmoid(conv(x)); and
// a squeeze-and-excitation block, conv -> bn -> relu, whose per-channel gate N x 1 x 1 x C (a 6x6
// average pool of the 6x6 map: the shape and values of adaptive_avgpool(1, 1)) passes through two
// biased 1x1 convolutions, scaling the map it was pooled from with the gate first, as torchvision
// writes it, and then once more with the gate second (the gate's gradient the sum of two).
Blueprint graph_with_mul() {
  Blueprint m("mul");
  m.conv(4, 3, 1, 1, true, "c0");
  const Blueprint::Ref x = m.last();
  m.conv(4, 3, 1, 1, true, "g").sigmoid("g_act");
  m.mul(x, m.last(), "gated");
  m.conv(4, 3, 1, 1, false, "se.conv").bn("se.bn").relu("se.relu");
  const Blueprint::Ref y = m.last();
  m.avgpool(6, 6, 0, "se.pool").conv(2, 1, 1, 0, true, "se.fc1").relu("se.fc1_relu");
  m.conv(4, 1, 1, 0, true, "se.fc2").sigmoid("se.gate");
  const Blueprint::Ref gate = m.last();
  m.mul(gate, y, "se.scale");
  m.mul(m.last(), gate, "se.again");
  return head(m);
}

TEST(GradCheck, MulOfMapsAndGates) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {6, 6, 2};
  const Program p = compile(graph_with_mul(), o);
  ASSERT_EQ(p.graph.count(LayerKind::Mul), 3);
  ASSERT_GE(p.find("se.gate"), 0);
  EXPECT_EQ(p.tensors[size_t(p.find("se.gate"))].shape, (Shape{3, 1, 1, 4}));
  check_gradients({"mul fused", graph_with_mul(), {6, 6, 2}});
  check_gradients({"mul unfused", graph_with_mul(), {6, 6, 2}, /*fuse=*/false});
}

// torchvision's squeeze-and-excitation (SqueezeExcitation: avgpool, fc1, ReLU, fc2, sigmoid, then
// scale * input) on a conv -> bn -> relu map: adaptive_avgpool(1, 1) gives the N x 1 x 1 x C gate
// that two biased 1x1 convolutions read, and mul(gate, x) broadcasts it over the map's 5x7 cells.
Blueprint squeeze_excitation() {
  Blueprint m("se");
  m.conv(6, 3, 1, 1, false, "conv").bn("bn").relu("relu");
  const Blueprint::Ref x = m.last();
  m.adaptive_avgpool(1, 1, "se.avgpool").conv(3, 1, 1, 0, true, "se.fc1").relu("se.activation");
  m.conv(6, 1, 1, 0, true, "se.fc2").sigmoid("se.scale_activation");
  m.mul(m.last(), x, "se");
  return head(m);
}

TEST(GradCheck, SqueezeExcitation) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {5, 7, 2};
  const Program p = compile(squeeze_excitation(), o);
  ASSERT_EQ(p.graph.count(LayerKind::Mul), 1);
  ASSERT_GE(p.find("se.scale_activation"), 0);
  EXPECT_EQ(p.tensors[size_t(p.find("se.scale_activation"))].shape, (Shape{3, 1, 1, 6}));
  check_gradients({"squeeze-excitation fused", squeeze_excitation(), {5, 7, 2}});
  check_gradients({"squeeze-excitation unfused", squeeze_excitation(), {5, 7, 2}, /*fuse=*/false});
}

}  // namespace
}  // namespace kiln
