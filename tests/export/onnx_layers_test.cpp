// ONNX export of every layer kind and activation, beyond the zoo's: a model with a biased
// convolution before BN, average and max pooling with padding, a residual add without ReLU, a
// projection block, a BatchNorm after an add and one on flat features, a flatten read by an
// activation (not a linear layer) and dropout, compiled fused and unfused; and each activation on its
// own. onnxruntime must give kiln's logits (the bound of onnx_export_test.cpp), and the export's
// refusals must name the culprit and change nothing.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/zoo.h"
#include "onnx_layer_check.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using testing::Case;
using testing::expect_onnxruntime_agrees;

Blueprint every_layer() {
  Blueprint m("every_layer");
  m.input(12, 10, 3);
  // BatchNorms with an epsilon of their own (a misread one moves the logits by about 1e-3 here).
  m.conv(8, 3, 1, 1, /*bias=*/true, "stem").bn("stem_bn", 0.05f).relu("stem_relu");  // a biased conv is never fused
  m.conv(8, 3, 1, 1, false, "cbr").bn("cbr_bn", 0.02f).relu("cbr_relu");  // fused into a CBR
  m.cbr(8, 3, 1, 1, "cbr2");
  m.avgpool(3, 1, 1, "avg");  // counts the padding, as PyTorch
  Blueprint body("body");
  body.conv(8, 3, 1, 1, false, "conv").bn("bn");
  m.residual(body, std::nullopt, /*relu_after=*/false, "plain_add");
  m.bn("bn_after_add");  // a BatchNorm after anything but a convolution stays one
  m.maxpool(3, 2, 1, "max");
  Blueprint block("block");
  block.cbr(16, 3, 2, 1, "conv1").conv(16, 3, 1, 1, false, "conv2").bn("bn2", 0.03f);
  Blueprint projection("downsample");
  projection.conv(16, 1, 2, 0, false, "0").bn("1", 0.04f);
  m.residual(block, projection, true, "block");
  m.flatten("flatten").leaky_relu(0.1f, "flat_act");  // a flatten read by an activation, not a linear layer
  // A layer named as the graph's output ("logits") before the last.
  m.bn("flat_bn").dropout(0.5f, "drop").fc(24, true, "logits").relu("fc1_relu").fc(5, false, "head");
  return m;
}

TEST(OnnxLayers, EveryLayerKindFusedAndUnfused) {
  // Fused: CBR, conv_bn and bn_add_relu layers; unfused: Conv, BatchNorm, ReLU and Add layers.
  for (bool fuse : {true, false}) {
    CompileOptions o;
    o.batch = 1, o.fuse_cbr = fuse;
    const Program p = compile(every_layer(), o);
    const bool fused_block = p.graph.count(LayerKind::CBR) > 0;
    EXPECT_EQ(fused_block, fuse);
  }
  expect_onnxruntime_agrees({{"fused", every_layer(), true}, {"unfused", every_layer(), false}});
}

// Convolutions in every window: grouped (with a BatchNorm that folds into it), depthwise with a
// channel multiplier, dilated, a rectangular kernel with its own strides and uneven padding, each
// written with ONNX's group, dilations, strides and pads.
TEST(OnnxLayers, ConvolutionWindows) {
  auto conv = [](int out, int kh, int kw, int sh, int sw, int top, int left, int bottom, int right, int dilation,
                 int groups, bool bias) {
    return ConvAttrs{.out_channels = out, .kernel_h = kh, .kernel_w = kw, .stride_h = sh, .stride_w = sw,
                     .pad_top = top, .pad_left = left, .pad_bottom = bottom, .pad_right = right,
                     .dilation_h = dilation, .dilation_w = dilation, .groups = groups, .bias = bias};
  };
  Blueprint m("conv_windows");
  m.input(11, 9, 4);
  m.conv(conv(8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, false), "grouped").bn("grouped_bn", 0.02f).relu6("grouped_act");
  m.conv(conv(16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 8, true), "depthwise_x2");
  m.conv(conv(8, 3, 3, 1, 1, 2, 2, 2, 2, 2, 1, false), "dilated").bn("dilated_bn");
  m.conv(conv(8, 1, 5, 1, 2, 0, 2, 1, 1, 1, 4, true), "rect");
  m.flatten("flatten").fc(5, true, "head");
  expect_onnxruntime_agrees({{"conv_windows", m, true}});
}

TEST(OnnxLayers, EveryActivation) {
  std::vector<Case> cases;
  for (int a = 0; a < kActivationCount; ++a) {
    const Activation act = Activation(a);
    Blueprint m(activation_name(act));
    // Inputs of both signs and of several sizes reach the activation: after a BN with random
    // statistics, and through a linear layer on the flattened map.
    m.input(6, 6, 2).cbr(4, 3, 1, 1, "cbr").conv(4, 3, 1, 1, false, "conv").bn("bn");
    m.activation(act, act == Activation::LeakyReLU ? 0.2f : (act == Activation::ELU ? 0.7f : 0.f), "act");
    m.flatten("flatten").fc(8, true, "fc1").activation(act, act == Activation::ELU ? 1.3f : 0.f, "act2").fc(3);
    cases.push_back({activation_name(act), m, true});
  }
  expect_onnxruntime_agrees(cases);
}

// Channel concatenation: ONNX Concat on axis 1 of the NCHW graph. A fork joined by one concat with
// branches of 3 and 5 channels and the fork itself (a BatchNorm after it that folds into nothing), and
// a concat of the data batch with a branch, read by a convolution.
TEST(OnnxLayers, Concat) {
  Blueprint m("concat");
  m.input(8, 7, 3).cbr(4, 3, 1, 1, "stem");
  const Blueprint::Ref fork = m.last();
  m.conv(3, 3, 1, 1, true, "a").relu("a_relu");
  const Blueprint::Ref a = m.last();
  m.from(fork).conv(5, 1, 1, 0, false, "b");
  m.concat({a, m.last(), fork}, "cat").bn("cat_bn");
  m.conv(3, 3, 2, 1, false, "down");
  const Blueprint::Ref down = m.last();
  m.from(m.source()).maxpool(3, 2, 1, "pool");
  m.concat({down, m.last()}, "cat2").conv(6, 3, 1, 1, true, "mix");
  m.flatten("flatten").fc(5, true, "head");
  expect_onnxruntime_agrees({{"concat_fused", m, true}, {"concat_unfused", m, false}});
}

// Elementwise products: ONNX Mul, whose broadcasting spreads an (N, C, 1, 1) gate over the map's
// height and width as PyTorch's does. A gate of the map's own shape, x * sigmoid(conv(x)); then a
// squeeze-and-excitation gate (a 6x6 average pool of the 6x6 map: adaptive_avgpool(1, 1)'s shape,
// through two biased 1x1 convolutions) scaling the map first and second, and a BatchNorm after it
// that folds into nothing.
TEST(OnnxLayers, Mul) {
  Blueprint m("mul");
  m.input(6, 6, 3).cbr(8, 3, 1, 1, "stem");
  const Blueprint::Ref x = m.last();
  m.conv(8, 3, 1, 1, true, "g").sigmoid("g_act");
  m.mul(x, m.last(), "gated");
  const Blueprint::Ref y = m.last();
  m.avgpool(6, 6, 0, "se.pool").conv(4, 1, 1, 0, true, "se.fc1").relu("se.relu");
  m.conv(8, 1, 1, 0, true, "se.fc2").sigmoid("se.gate");
  const Blueprint::Ref gate = m.last();
  m.mul(gate, y, "se.scale");
  m.mul(m.last(), gate, "se.again").bn("bn");
  m.flatten("flatten").fc(5, true, "head");
  expect_onnxruntime_agrees({{"mul_fused", m, true}, {"mul_unfused", m, false}});
}

// Linear layers over a feature map (ConvNeXt's pointwise nn.Linear on a channels-last map), exported
// as 1x1 Conv nodes holding the (out, in) matrix: biased and not, between a convolution and the head.
TEST(OnnxLayers, LinearOverAFeatureMap) {
  Blueprint m("pointwise");
  m.input(6, 5, 3).conv(8, 3, 1, 1, true, "stem");
  m.fc(16, true, "pw1").gelu().fc(8, false, "pw2");
  m.global_avgpool("pool").fc(5, true, "head");
  expect_onnxruntime_agrees({{"linear_over_map", m, true}});
}

// Stochastic depth is the identity in eval mode: an Identity node (listed in the metadata for the
// importer: tests/import/onnx_stochastic_depth_round_trip_test.cpp). In
// residual bodies (after a BatchNorm that folds into the convolution: EfficientNet's and ConvNeXt's
// place) with p = 0.2 and p = 0, and one on flat features before the linear layer.
TEST(OnnxLayers, StochasticDepth) {
  Blueprint body("body");
  body.conv(6, 3, 1, 1, false, "conv").bn("bn").stochastic_depth(0.2f, "stochastic_depth");
  Blueprint plain("body");
  plain.conv(6, 1, 1, 0, true, "conv").stochastic_depth(0.f, "stochastic_depth");
  Blueprint m("stochastic_depth");
  m.input(7, 6, 3).cbr(6, 3, 1, 1, "stem");
  m.residual(body, std::nullopt, false, "block1").residual(plain, std::nullopt, true, "block2");
  m.flatten("flatten").stochastic_depth(0.5f, "flat_sd").fc(5, true, "head");
  expect_onnxruntime_agrees({{"stochastic_depth_fused", m, true}, {"stochastic_depth_unfused", m, false}});
}

// Pooling in ceil mode and without the padding in the average's divisor (ONNX's ceil_mode and
// count_include_pad): a max pool whose last window hangs over the edge (12x10 -> 6x5); averages whose
// last window reaches past the padding, with the padding not counted (6x5 -> 4x3) and counted (4x3 ->
// 3x2, rows); and one where PyTorch's rule drops the window ceil mode would add (3 rows -> 2 with 2/2
// padding 1, not ONNX's 3: floor mode's windows, exported as such). Adaptive average pooling in each
// of its exports: AveragePool (14x12 -> 7x6, dividing), the two MatMuls (7x6 -> 3x4, overlapping;
// 3x4 -> 5x5, growing), Identity (its own size) and GlobalAveragePool (1x1, read by a 1x1
// convolution as squeeze-and-excitation reads it).
TEST(OnnxLayers, PoolWindowsAndAdaptivePool) {
  PoolAttrs hanging = PoolAttrs::square(3, 2, 0);
  hanging.ceil_mode = true;
  PoolAttrs uncounted = PoolAttrs::square(3, 2, 1);
  uncounted.ceil_mode = true, uncounted.count_include_pad = false;
  PoolAttrs counted = uncounted;
  counted.count_include_pad = true;
  PoolAttrs dropped = PoolAttrs::square(2, 2, 1);
  dropped.ceil_mode = true;
  Blueprint windows("pool_windows");
  windows.input(12, 10, 3).cbr(6, 3, 1, 1, "stem").maxpool(hanging, "max").avgpool(uncounted, "avg");
  windows.conv(6, 3, 1, 1, true, "mix").avgpool(counted, "avg_pad").avgpool(dropped, "avg_dropped");
  windows.flatten("flatten").fc(5, true, "head");
  Blueprint adaptive("adaptive_pool");
  adaptive.input(14, 12, 3).cbr(6, 3, 1, 1, "stem").adaptive_avgpool(7, 6, "dividing");
  adaptive.adaptive_avgpool(3, 4, "overlapping").conv(6, 3, 1, 1, true, "mix").adaptive_avgpool(5, 5, "growing");
  adaptive.adaptive_avgpool(5, 5, "same").conv(6, 1, 1, 0, true, "mix2").adaptive_avgpool(1, 1, "squeeze");
  adaptive.conv(4, 1, 1, 0, true, "excite").flatten("flatten").fc(5, true, "head");
  expect_onnxruntime_agrees({{"pool_windows", windows}, {"adaptive_pool", adaptive}});
}

// Ceil mode adding a window on one axis (6 rows, 3/3 padding 1 -> 3 windows, floor 2) while PyTorch's
// rule drops the one it would add on the other (5 columns -> 2, ONNX's ceil_mode 3): no ONNX form,
// refused naming the layer and its input, and nothing written.
TEST(OnnxExportErrors, CeilModeAddingAndDroppingWindowsIsRefused) {
  PoolAttrs mixed = PoolAttrs::square(3, 3, 1);
  mixed.ceil_mode = true;
  Blueprint m("mixed");
  m.input(6, 5, 2).maxpool(mixed, "pool").flatten("flatten").fc(3, true, "head");
  CompileOptions o;
  o.batch = 1;
  Executable exe(compile(m, o), 1);
  testing::TempDir dir;
  testing::expect_error([&] { export_onnx(exe, dir.file("mixed.onnx")); },
                        {"maxpool 'pool'", "6x5 input", "drops", "ceil_mode (opset 17)", "floor mode"});
  EXPECT_FALSE(std::filesystem::exists(dir.file("mixed.onnx")));
}

TEST(OnnxExportErrors, RefusalsNameTheCulpritAndWriteNothing) {
  testing::TempDir dir;
  CompileOptions o;
  o.batch = 1;
  Executable exe(compile(zoo::digits_cnn(), o), 1);
  const std::string file = dir.file("m.onnx");
  testing::write_bytes(file, {1, 2, 3});
  // An existing file is left as it was unless overwrite is set.
  try {
    export_onnx(exe, file);
    ADD_FAILURE() << "an existing file was replaced";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("OnnxExportOptions::overwrite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(testing::read_bytes(file), std::vector<uint8_t>({1, 2, 3}));
  OnnxExportOptions overwrite;
  overwrite.overwrite = true;
  EXPECT_GT(export_onnx(exe, file, overwrite).bytes, 100000);
  EXPECT_GT(std::filesystem::file_size(file), 100000u);

  // A folder that does not exist; class names that do not fit the outputs; a diverged model.
  EXPECT_THROW(
      {
        try {
          export_onnx(exe, dir.file("missing/m.onnx"));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  OnnxExportOptions names;
  names.info.class_names = {"zero", "one"};
  EXPECT_THROW(
      {
        try {
          export_onnx(exe, dir.file("names.onnx"), names);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("2 class names were given for a model of 10 outputs"),
                    std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  const int w = exe.id("fc2.bias");
  std::vector<float> bias = exe.read<float>(w);
  bias[3] = NAN;
  exe.write(w, bias.data(), bias.size() * sizeof(float));
  EXPECT_THROW(
      {
        try {
          export_onnx(exe, dir.file("nan.onnx"));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("'fc2.bias' holds 1 non-finite value (the first, nan, at index 3)"),
                    std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("names.onnx")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("nan.onnx")));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << "a temporary was left behind";
}

TEST(OnnxExportErrors, AModelWithoutLogitsIsRefused) {
  Blueprint m("backbone");
  m.input(8, 8, 3).cbr(4, 3, 1, 1, "cbr");
  CompileOptions o;
  o.batch = 1, o.loss = false;
  Executable exe(compile(m, o), 1);
  testing::TempDir dir;
  try {
    export_onnx(exe, dir.file("m.onnx"));
    ADD_FAILURE() << "a model without (N, classes) logits was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("last layer 'cbr' gives [1,8,8,4]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln
