// Expansion, shape inference, the fusion and first-layer passes, and errors on bad models.
#include <gtest/gtest.h>

#include <algorithm>

#include "ir/fused_layer_kinds.h"
#include "kiln/compile.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

CompileOptions options(int batch = 8) {
  CompileOptions o;
  o.batch = batch;
  return o;
}

using testing::expect_error;

TEST(Compile, ZooModelsHaveExpectedCbrCountsAndShapes) {
  EXPECT_EQ(compile(zoo::vgg16_bn(), options(2)).graph.count(LayerKind::CBR), 13);
  EXPECT_EQ(compile(zoo::vgg16_bn_cifar(), options(2)).graph.count(LayerKind::CBR), 13);
  // ResNet-50: the stem plus conv1 and conv2 of each of the 16 bottlenecks.
  const Program r50 = compile(zoo::resnet50(), options(2));
  EXPECT_EQ(r50.graph.count(LayerKind::CBR), 33);
  // Every bottleneck ends in one fused block end: conv3 + bn3 (and the 4 downsamples) become
  // conv_bn layers, the add and ReLU one bn_add_relu; no unfused Conv, BN, Add or ReLU is left.
  EXPECT_EQ(r50.graph.count(fused_layer::BnAddRelu), 16);
  EXPECT_EQ(r50.graph.count(fused_layer::ConvBN), 16 + 4);
  for (LayerKind k : {LayerKind::Conv, LayerKind::BatchNorm, LayerKind::Add, LayerKind::ReLU})
    EXPECT_EQ(r50.graph.count(k), 0) << layer_kind_name(k);
  EXPECT_EQ(r50.tensors[r50.logits].shape, (Shape{2, 1000}));
  const Program r18 = compile(zoo::resnet18_cifar(), options(2));
  EXPECT_EQ(r18.graph.count(LayerKind::CBR), 9);
  EXPECT_EQ(r18.graph.layers.back().out_shape, (Shape{2, 10}));
  // Parameter count of torchvision's resnet50 (25,557,032) less the 20 conv biases it lacks
  // anyway: identical, since torchvision ResNet convs have no bias.
  int64_t params = 0;
  for (int id : r50.params) params += numel(r50.tensors[id].shape);
  EXPECT_EQ(params, 25557032);
}

// A training program is fed fp32 batches by the data loader: in mixed precision the first op of
// forward and of inference casts them on the device into the copy the first layer reads. A
// block without a loss reads its input in the compute dtype, as a layer inside a network does.
TEST(Compile, MixedPrecisionTrainingCastsTheFp32BatchOnTheDevice) {
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    CompileOptions o = options(4);
    o.device = Device::CUDA, o.precision = p;
    const Program net = compile(zoo::digits_cnn(), o);
    const TensorSpec& input = net.tensors[net.input];
    EXPECT_EQ(input.dtype, DType::F32);
    const int copy = net.find("input:compute");
    ASSERT_GE(copy, 0);
    EXPECT_EQ(net.tensors[copy].dtype, p == Precision::FP16 ? DType::F16 : DType::BF16);
    for (const auto* list : {&net.forward, &net.inference}) {
      const auto cast = std::find_if(list->begin(), list->end(),
                                     [](const Op& op) { return op.kind == OpKind::CAST && op.layer == 0; });
      ASSERT_NE(cast, list->end());
      EXPECT_EQ(cast->in, std::vector<int>{net.input});
      EXPECT_EQ(cast->out, std::vector<int>{copy});
      // Every op that reads the batch reads the copy, except the cast itself.
      for (const Op& op : *list) {
        if (&op == &*cast) continue;
        EXPECT_EQ(std::count(op.in.begin(), op.in.end(), net.input), 0) << op_kind_name(op.kind);
      }
    }
    o.loss = false;
    const Program block = compile(zoo::digits_cnn(), o);
    EXPECT_EQ(block.tensors[block.input].dtype, p == Precision::FP16 ? DType::F16 : DType::BF16);
    EXPECT_LT(block.find("input:compute"), 0);
  }
  const Program fp32 = compile(zoo::digits_cnn(), options(4));
  EXPECT_LT(fp32.find("input:compute"), 0);
}

TEST(Compile, FusionPassTurnsConvBnReluIntoCbrAndKeepsTensorNames) {
  Blueprint m("m");
  m.input(8, 8, 3).conv(16, 3, 1, 1, false, "c").bn("b").relu("r").conv(16, 3, 1, 1, true, "biased").bn("b2").relu("r2");
  m.flatten().fc(10, true, "fc");
  const Program fused = compile(m, options());
  EXPECT_EQ(fused.graph.count(LayerKind::CBR), 1);    // the biased conv stays unfused
  EXPECT_EQ(fused.graph.count(LayerKind::Conv), 1);
  EXPECT_GE(fused.find("c.weight"), 0);
  EXPECT_GE(fused.find("b.running_var"), 0);
  CompileOptions off = options();
  off.fuse_cbr = false;
  const Program unfused = compile(m, off);
  EXPECT_EQ(unfused.graph.count(LayerKind::CBR), 0);
  EXPECT_EQ(unfused.graph.count(LayerKind::BatchNorm), 2);
  // Every parameter of one program exists in the other, with the same shape.
  for (int id : unfused.params) {
    const int other = fused.find(unfused.tensors[id].name);
    ASSERT_GE(other, 0) << unfused.tensors[id].name;
    EXPECT_EQ(fused.tensors[other].shape, unfused.tensors[id].shape);
  }
}

TEST(Compile, FusionSkipsBatchNormWithSeveralConsumers) {
  Blueprint body("body");
  body.relu("r");
  Blueprint m("m");
  m.input(8, 8, 3).conv(8, 3, 1, 1, false, "c").bn("b").residual(body, std::nullopt, false, "res");
  m.flatten().fc(10);
  EXPECT_EQ(compile(m, options()).graph.count(LayerKind::CBR), 0);
}

TEST(Compile, FirstLayerIsMarkedAndSkipsDgrad) {
  const Program p = compile(zoo::digits_cnn(), options());
  const Layer& first = p.graph.layers[1];
  EXPECT_EQ(first.kind, LayerKind::CBR);
  EXPECT_TRUE(first.marks.first_layer);
  EXPECT_FALSE(p.graph.layers[2].marks.first_layer);
  int first_bwd = 0, full_bwd = 0, dgrad = 0;
  for (const Op& op : p.backward) {
    first_bwd += op.kind == OpKind::CBR_BWD_FIRST;
    full_bwd += op.kind == OpKind::CBR_BWD;
    dgrad += op.kind == OpKind::CONV_DGRAD;
  }
  EXPECT_EQ(first_bwd, 1);
  EXPECT_EQ(full_bwd, 3);
  EXPECT_EQ(dgrad, 0);
}

TEST(Compile, ParametersGradientsAndStateAreContiguousAndAligned) {
  const Program p = compile(zoo::resnet18_cifar(), options(4));
  size_t expected = 0;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const TensorSpec& t = p.tensors[p.params[i]];
    EXPECT_EQ(t.alias_of, p.param_region);
    EXPECT_EQ(t.alias_offset, expected) << t.name;
    EXPECT_EQ(p.tensors[p.grads[i]].alias_offset, t.alias_offset);
    expected += (t.bytes() + 255) / 256 * 256;
  }
  EXPECT_EQ(p.tensors[p.param_region].bytes(), expected);
  ASSERT_EQ(p.opt_state_regions.size(), 1u);
  EXPECT_EQ(p.tensors[p.opt_state_regions[0]].bytes(), expected);
}

TEST(Compile, BadModelsGiveErrorsNamingTheLayer) {
  auto build = [](Blueprint m, int batch = 4) { return [m, batch] { compile(m, options(batch)); }; };
  Blueprint zero_kernel("m");
  zero_kernel.input(8, 8, 1).conv(4, 0, 1, 0, false, "bad_conv").flatten().fc(2);
  expect_error(build(zero_kernel), {"bad_conv", "kernel"});
  Blueprint zero_stride("m");
  zero_stride.input(8, 8, 1).cbr(8, 3, 0, 1, "bad_stride").flatten().fc(2);
  expect_error(build(zero_stride), {"bad_stride", "stride"});
  Blueprint negative_pad("m");
  negative_pad.input(8, 8, 1).conv(4, 3, 1, -1, false, "neg").flatten().fc(2);
  expect_error(build(negative_pad), {"neg", "padding"});
  Blueprint big_kernel("m");
  big_kernel.input(4, 4, 1).conv(4, 7, 1, 0, false, "huge").flatten().fc(2);
  expect_error(build(big_kernel), {"huge", "larger than its padded input"});
  Blueprint pool_pad("m");
  pool_pad.input(8, 8, 1).maxpool(2, 2, 2, "pp").flatten().fc(2);
  expect_error(build(pool_pad), {"pp", "padding"});
  // A convolution may pad more than half its kernel (with zeros), alone or fused into a CBR.
  Blueprint conv_pad("m");
  conv_pad.input(8, 8, 1).conv(4, 3, 1, 2, false, "wide").cbr(4, 3, 1, 2, "wide_cbr").flatten().fc(2);
  EXPECT_NO_THROW(compile(conv_pad, options(4)));
  Blueprint fc_on_map("m");
  fc_on_map.input(8, 8, 1).fc(10, true, "early_fc");
  expect_error(build(fc_on_map), {"early_fc", "flatten"});
  Blueprint bad_dropout("m");
  bad_dropout.input(8, 8, 1).flatten().dropout(1.5f, "d").fc(2);
  expect_error(build(bad_dropout), {"'d'", "[0, 1)"});
  Blueprint no_classifier("m");
  no_classifier.input(8, 8, 1).conv(4, 3);
  expect_error(build(no_classifier), {"fc()"});
  Blueprint dup("m");
  dup.input(8, 8, 1).conv(4, 3, 1, 1, false, "x").conv(4, 3, 1, 1, false, "x").flatten().fc(2);
  expect_error(build(dup), {"'x'", "twice"});
  expect_error(build(zoo::digits_cnn(), 0), {"batch size", "positive"});
  expect_error(build(zoo::digits_cnn(), -3), {"batch size"});
}

TEST(Compile, ResidualShapeMismatchNamesTheAdd) {
  Blueprint body("body");
  body.conv(8, 3, 2, 1, false, "conv1");  // halves H and W, doubles channels
  Blueprint m("m");
  m.input(8, 8, 4).residual(body, std::nullopt, true, "block").flatten().fc(2);
  expect_error([&] { compile(m, options()); }, {"block.add", "[8,4,4,8]", "[8,8,8,4]", "projection"});
}

TEST(Compile, UnknownModelAndTargetErrors) {
  expect_error([] { zoo::by_name("resnet1000"); }, {"resnet1000", "digits_cnn"});
  CompileOptions half = options();
  half.precision = Precision::FP16;
  expect_error([&] { compile(zoo::digits_cnn(), half); }, {"fp16", "fp32"});
}

// The CBR and conv_bn ops on the GPU in fp16 and bf16 move 8 channels at a time: a convolution of
// another count (ShuffleNetV2 1.0x's 58-channel branches) is no CBR there, written with cbr() or as
// three layers, but a conv_bn_act (which runs any count), under the same tensor names; in fp32, and
// on the CPU, it is a CBR.
TEST(Compile, ConvolutionsTheCbrCannotRunFuseAsConvBnAct) {
  auto kinds = [](const Program& p) {
    std::vector<std::string> out;
    for (const Layer& layer : p.graph.layers)
      if (layer.kind != LayerKind::Input) out.push_back(layer_kind_name(layer.kind));
    return out;
  };
  auto has_tensor = [](const Program& p, const std::string& name) { return p.find(name) >= 0; };
  Blueprint odd("m");
  odd.input(8, 8, 3).cbr(60, 3, 1, 1, "block3.conv2").flatten().fc(2);
  Blueprint even("m");
  even.input(8, 8, 3).cbr(64, 3, 1, 1, "block3.conv2").flatten().fc(2);
  Blueprint written("m");
  written.input(8, 8, 16).conv(60, 3, 1, 1, false, "conv").bn("bn").relu("relu").flatten().fc(2);
  CompileOptions gpu = options();
  gpu.device = Device::CUDA;
  for (Precision p : {Precision::FP16, Precision::BF16}) {
    gpu.precision = p;
    const Program split = compile(odd, gpu);
    EXPECT_EQ(kinds(split), (std::vector<std::string>{"conv_bn_act", "flatten", "fc"})) << precision_name(p);
    EXPECT_TRUE(has_tensor(split, "block3.conv2.conv.weight") && has_tensor(split, "block3.conv2.bn.running_var"))
        << precision_name(p);
    EXPECT_EQ(kinds(compile(even, gpu)), (std::vector<std::string>{"cbr", "flatten", "fc"})) << precision_name(p);
    EXPECT_EQ(kinds(compile(written, gpu)), (std::vector<std::string>{"conv_bn_act", "flatten", "fc"}))
        << precision_name(p);
  }
  gpu.precision = Precision::FP32;
  EXPECT_EQ(kinds(compile(odd, gpu)), (std::vector<std::string>{"cbr", "flatten", "fc"}));
  EXPECT_EQ(kinds(compile(written, gpu)), (std::vector<std::string>{"cbr", "flatten", "fc"}));
  EXPECT_EQ(kinds(compile(odd, options())), (std::vector<std::string>{"cbr", "flatten", "fc"}));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Options, DeviceSpecsAndPrecisionNamesParseOrNameTheFix) {
  EXPECT_EQ(parse_device_spec("cpu").device, Device::CPU);
  EXPECT_EQ(parse_device_spec("cuda").device, Device::CUDA);
  EXPECT_EQ(parse_device_spec("cuda").index, 0);
  const DeviceSpec second = parse_device_spec("cuda:1");
  EXPECT_EQ(second.device, Device::CUDA);
  EXPECT_EQ(second.index, 1);
  for (const char* bad : {"tpu", "cuda:", "cuda:x", "cpu:1", "cuda:-1", "cuda:99999"}) {
    try {
      parse_device_spec(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  // "auto" is the first GPU exactly when one is visible; other names parse as above.
  const DeviceSpec automatic = resolve_device("auto");
  EXPECT_EQ(automatic.device, cuda_device_count() > 0 ? Device::CUDA : Device::CPU);
  EXPECT_EQ(automatic.index, 0);
  EXPECT_EQ(resolve_device("cuda:1").index, 1);
  EXPECT_THROW(resolve_device("automatic"), Error);
  EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
  EXPECT_THROW(parse_precision("fp8"), Error);
}

}  // namespace
}  // namespace kiln
