// Typed layer attributes (kiln/layer_attrs.h, kiln/layer_kind_attrs.h): each layer holds its kind's
// struct, readers get it back typed or an error naming the layer; each struct's check refuses a
// value that cannot work as the layer enters the graph, and what the kernels do not run yet
// (a pooling window other than a square one) is refused before a program is built.
#include <gtest/gtest.h>

#include <string>

#include "ir/fused_layer_kinds.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/layer_graph.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::expect_error;

CompileOptions options(bool fuse = true) {
  CompileOptions o;
  o.batch = 2;
  o.fuse_cbr = fuse;
  return o;
}

const BlueprintNode& node(const Blueprint& b, const std::string& name) {
  for (const BlueprintNode& n : b.nodes())
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

const Layer& layer(const Program& p, const std::string& name) {
  for (const Layer& l : p.graph.layers)
    if (l.name == name) return l;
  throw std::runtime_error("no layer " + name);
}

TEST(LayerAttrs, TheDslsCallsHoldTheirKindsStruct) {
  Blueprint m("m");
  m.input(8, 8, 3)
      .conv(8, 3, 2, 1, true, "c")
      .bn("n", 1e-3f, 0.25f)
      .cbr(16, 5, 1, 2, "cbr")
      .maxpool(2, 2, 1, "mp")
      .avgpool(3, 1, 1, "ap")
      .leaky_relu(0.2f, "act")
      .relu("r")
      .flatten("f")
      .dropout(0.3f, "d")
      .fc(10, false, "fc", 0.01f);
  const ConvAttrs& c = node(m, "c").attrs.get<ConvAttrs>("c");
  EXPECT_EQ(c.out_channels, 8);
  EXPECT_EQ(c.kernel_h, 3);
  EXPECT_EQ(c.kernel_w, 3);
  EXPECT_EQ(c.stride_h, 2);
  EXPECT_EQ(c.stride_w, 2);
  EXPECT_EQ(c.pad_top, 1);
  EXPECT_EQ(c.pad_left, 1);
  EXPECT_EQ(c.pad_bottom, 1);
  EXPECT_EQ(c.pad_right, 1);
  EXPECT_EQ(c.dilation_h, 1);
  EXPECT_EQ(c.dilation_w, 1);
  EXPECT_EQ(c.groups, 1);
  EXPECT_TRUE(c.bias);
  const BatchNormAttrs& n = node(m, "n").attrs.get<BatchNormAttrs>("n");
  EXPECT_FLOAT_EQ(n.eps, 1e-3f);
  EXPECT_FLOAT_EQ(n.momentum, 0.25f);
  const ConvBnAttrs& cbr = node(m, "cbr").attrs.get<ConvBnAttrs>("cbr");
  EXPECT_EQ(cbr.conv.out_channels, 16);
  EXPECT_EQ(cbr.conv.kernel_w, 5);
  EXPECT_EQ(cbr.conv.pad_right, 2);
  EXPECT_FALSE(cbr.conv.bias);
  EXPECT_FLOAT_EQ(cbr.bn.eps, 1e-5f);
  EXPECT_FLOAT_EQ(cbr.bn.momentum, 0.1f);
  const PoolAttrs& mp = node(m, "mp").attrs.get<PoolAttrs>("mp");
  EXPECT_EQ(mp.kernel_h, 2);
  EXPECT_EQ(mp.stride_w, 2);
  EXPECT_EQ(mp.pad_bottom, 1);
  EXPECT_EQ(node(m, "ap").attrs.get<PoolAttrs>("ap").kernel_w, 3);
  const ActivationAttrs& act = node(m, "act").attrs.get<ActivationAttrs>("act");
  EXPECT_EQ(act.activation, Activation::LeakyReLU);
  EXPECT_FLOAT_EQ(act.alpha, 0.2f);
  EXPECT_TRUE(node(m, "r").attrs.empty());
  EXPECT_TRUE(node(m, "f").attrs.empty());
  EXPECT_FLOAT_EQ(node(m, "d").attrs.get<DropoutAttrs>("d").p, 0.3f);
  const LinearAttrs& fc = node(m, "fc").attrs.get<LinearAttrs>("fc");
  EXPECT_EQ(fc.out_features, 10);
  EXPECT_FALSE(fc.bias);
  EXPECT_EQ(fc.init, WeightInit::normal(0.01f));
  EXPECT_EQ(fc.bias_init, BiasInit::Zeros);

  Blueprint body("body");
  body.conv(3, 3, 1, 1);
  Blueprint r("r");
  r.residual(body, std::nullopt, false, "block");
  EXPECT_FALSE(node(r, "block").attrs.get<ResidualAttrs>("block").relu_after);
}

// The struct overloads build the same program as the square calls, and the compiled layers hold
// what was written.
TEST(LayerAttrs, StructOverloadsMatchTheSquareCalls) {
  Blueprint square("m"), typed("m");
  square.input(12, 12, 3).conv(8, 3, 1, 1, true, "c").cbr(8, 3, 2, 1, "cbr").maxpool(2, 2, 0, "mp");
  square.avgpool(3, 1, 1, "ap").flatten("f").fc(4, true, "fc");
  typed.input(12, 12, 3)
      .conv(ConvAttrs{.out_channels = 8, .kernel_h = 3, .kernel_w = 3, .pad_top = 1, .pad_left = 1, .pad_bottom = 1,
                      .pad_right = 1, .bias = true},
            "c")
      .cbr(ConvBnAttrs{ConvAttrs::square(8, 3, 2, 1), BatchNormAttrs{}}, "cbr")
      .maxpool(PoolAttrs{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2}, "mp")
      .avgpool(PoolAttrs::square(3, 1, 1), "ap")
      .flatten("f")
      .fc(LinearAttrs{.out_features = 4}, "fc");
  const Program a = compile(square, options()), b = compile(typed, options());
  ASSERT_EQ(a.graph.layers.size(), b.graph.layers.size());
  for (size_t i = 0; i < a.graph.layers.size(); ++i) {
    EXPECT_EQ(a.graph.layers[i].name, b.graph.layers[i].name);
    EXPECT_EQ(a.graph.layers[i].out_shape, b.graph.layers[i].out_shape) << a.graph.layers[i].name;
  }
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape) << a.tensors[i].name;
  }
  EXPECT_EQ(layer(b, "c").out_shape, (Shape{2, 12, 12, 8}));
  EXPECT_EQ(layer(b, "cbr").out_shape, (Shape{2, 6, 6, 8}));
  EXPECT_EQ(b.tensors[b.find("c.weight")].shape, (Shape{8, 3, 3, 3}));
  EXPECT_TRUE(attrs_of<ConvAttrs>(layer(b, "c")).bias);
  EXPECT_EQ(attrs_of<LinearAttrs>(layer(b, "fc")).out_features, 4);
}

TEST(LayerAttrs, AskingForAnotherStructNamesTheLayerAndBothStructs) {
  Blueprint m("m");
  m.input(8, 8, 3).conv(4, 3, 1, 1, false, "c").relu("r").flatten().fc(2);
  const Program p = compile(m, options(false));
  expect_error([&] { attrs_of<PoolAttrs>(layer(p, "c")); }, {"conv 'c'", "ConvAttrs", "PoolAttrs"});
  expect_error([&] { attrs_of<ConvAttrs>(layer(p, "r")); }, {"relu 'r'", "no attributes", "ConvAttrs"});
  EXPECT_EQ(layer(p, "c").attrs.find<PoolAttrs>(), nullptr);
  EXPECT_EQ(layer(p, "r").attrs.find<ConvAttrs>(), nullptr);
}

// A fused layer holds the conv's and the BatchNorm's attributes; get<> finds each part.
TEST(LayerAttrs, FusedLayersHoldTheirPartsAttributes) {
  Blueprint m("m");
  m.input(8, 8, 4).conv(8, 3, 2, 1, false, "c").bn("n", 2e-5f, 0.3f).relu("r").flatten().fc(2);
  const Program p = compile(m, options());
  const Layer& cbr = layer(p, "c");
  ASSERT_EQ(cbr.kind, LayerKind::CBR);
  EXPECT_EQ(attrs_of<ConvAttrs>(cbr).out_channels, 8);
  EXPECT_EQ(attrs_of<ConvAttrs>(cbr).stride_h, 2);
  EXPECT_FLOAT_EQ(attrs_of<BatchNormAttrs>(cbr).eps, 2e-5f);
  EXPECT_FLOAT_EQ(attrs_of<ConvBnAttrs>(cbr).bn.momentum, 0.3f);

  Blueprint body("body");
  body.cbr(4, 3, 1, 1, "a").conv(4, 3, 1, 1, false, "b").bn("bn", 3e-5f);
  Blueprint r("r");
  r.input(8, 8, 4).residual(body, std::nullopt, true, "block").flatten().fc(2);
  const Program q = compile(r, options());
  const Layer& conv_bn = layer(q, "block.b");
  ASSERT_EQ(conv_bn.kind, fused_layer::ConvBN);
  EXPECT_EQ(attrs_of<ConvAttrs>(conv_bn).kernel_w, 3);
  EXPECT_FLOAT_EQ(attrs_of<BatchNormAttrs>(conv_bn).eps, 3e-5f);
}

TEST(LayerAttrs, CopiesAreValuesAndEditCopiesOnWrite) {
  LayerAttrs a = ConvAttrs::square(8, 3);
  LayerAttrs b = a;
  b.edit<ConvAttrs>("conv 'b'").out_channels = 5;
  EXPECT_EQ(a.get<ConvAttrs>("conv 'a'").out_channels, 8);
  EXPECT_EQ(b.get<ConvAttrs>("conv 'b'").out_channels, 5);
  LayerAttrs fused = ConvBnAttrs{ConvAttrs::square(8, 3), BatchNormAttrs{}};
  LayerAttrs shared = fused;
  fused.edit<BatchNormAttrs>("cbr 'x'").eps = 1e-3f;  // a part, edited in place
  EXPECT_FLOAT_EQ(fused.get<ConvBnAttrs>("cbr 'x'").bn.eps, 1e-3f);
  EXPECT_FLOAT_EQ(shared.get<ConvBnAttrs>("cbr 'x'").bn.eps, 1e-5f);
  expect_error([&] { b.edit<PoolAttrs>("conv 'b'"); }, {"conv 'b'", "ConvAttrs", "PoolAttrs"});
  EXPECT_STREQ(LayerAttrs().type_name(), "no attributes");
  EXPECT_STREQ(a.type_name(), "ConvAttrs");
}

// A model whose layer `name` is `add`ed after a 3-channel 8x8 input; compile runs the checks.
template <class Add>
void expect_refused(Add add, const std::vector<std::string>& parts, bool fuse = true) {
  Blueprint m("m");
  m.input(8, 8, 3);
  add(m);
  m.flatten("flat").fc(2, true, "head");
  expect_error([&] { compile(m, options(fuse)); }, parts);
}

ConvAttrs conv_with(void (*change)(ConvAttrs&)) {
  ConvAttrs a = ConvAttrs::square(4, 3, 1, 1);
  change(a);
  return a;
}

TEST(LayerAttrs, EachCheckRefusesAValueThatCannotWorkNamingTheLayer) {
  using B = Blueprint;
  expect_refused([](B& m) { m.conv(4, 0, 1, 0, false, "k0"); }, {"conv 'k0'", "kernel size must be positive"});
  expect_refused([](B& m) { m.conv(4, 3, 0, 1, false, "s0"); }, {"conv 's0'", "stride must be positive"});
  expect_refused([](B& m) { m.conv(4, 3, 1, -1, false, "neg"); }, {"conv 'neg'", "padding must be >= 0"});
  expect_refused([](B& m) { m.conv(0, 3, 1, 1, false, "c0"); }, {"conv 'c0'", "output channels must be positive"});
  expect_refused([](B& m) { m.conv(conv_with([](ConvAttrs& a) { a.pad_left = -2; }), "left"); },
                 {"conv 'left'", "padding must be >= 0", "-2"});
  expect_refused([](B& m) { m.conv(conv_with([](ConvAttrs& a) { a.kernel_w = 0; }), "kw"); },
                 {"conv 'kw'", "kernel size must be positive", "3x0"});
  expect_refused([](B& m) { m.conv(conv_with([](ConvAttrs& a) { a.dilation_h = 0; }), "dil"); },
                 {"conv 'dil'", "dilation must be >= 1"});
  expect_refused([](B& m) { m.conv(conv_with([](ConvAttrs& a) { a.groups = 0; }), "g0"); },
                 {"conv 'g0'", "groups must be >= 1"});
  expect_refused([](B& m) { m.conv(conv_with([](ConvAttrs& a) { a.out_channels = 6, a.groups = 4; }), "g4"); },
                 {"conv 'g4'", "groups 4 does not divide its 6 output channels"});
  expect_refused([](B& m) { m.conv(conv_with([](ConvAttrs& a) { a.groups = 2; }), "gin"); },  // 3 input channels
                 {"conv 'gin'", "groups 2 does not divide its 3 input channels"});
  expect_refused([](B& m) { m.bn("bn0", 0.f); }, {"bn 'bn0'", "eps must be positive"});
  expect_refused([](B& m) { m.bn("bnm", 1e-5f, 1.5f); }, {"bn 'bnm'", "momentum must be in [0, 1]"});
  expect_refused([](B& m) { m.cbr(ConvBnAttrs{ConvAttrs::square(4, 3, 1, 1, true), BatchNormAttrs{}}, "cb"); },
                 {"cbr 'cb'", "no bias"});
  // Unfused, a cbr() is still checked whole, as it entered the graph.
  expect_refused([](B& m) { m.cbr(ConvBnAttrs{ConvAttrs::square(4, 3, 1, 1, true), BatchNormAttrs{}}, "cb"); },
                 {"cbr 'cb'", "no bias"}, false);
  expect_refused([](B& m) { m.cbr(ConvBnAttrs{ConvAttrs::square(4, 3, 1, 1), BatchNormAttrs{-1.f}}, "ce"); },
                 {"cbr 'ce'", "eps must be positive"}, false);
  expect_refused([](B& m) { m.maxpool(2, 2, 2, "pp"); }, {"maxpool 'pp'", "exceeds half the kernel 2"});
  expect_refused([](B& m) { m.avgpool(PoolAttrs{.kernel_h = 3, .kernel_w = 3, .pad_right = 2}, "apr"); },
                 {"avgpool 'apr'", "padding 2 (right) exceeds half the kernel 3"});
  expect_refused([](B& m) { m.avgpool(0, 1, 0, "ap0"); }, {"avgpool 'ap0'", "kernel size must be positive"});
  expect_refused([](B& m) { m.dropout(1.f, "d1"); }, {"dropout 'd1'", "[0, 1)"});
  expect_refused([](B& m) { m.dropout(-0.1f, "dn"); }, {"dropout 'dn'", "[0, 1)"});
  expect_refused([](B& m) { m.activation(static_cast<Activation>(200), 0.f, "act"); },
                 {"activation 'act'", "200 is not a kiln::Activation"});
  expect_refused([](B& m) { m.flatten("f0").fc(LinearAttrs{.out_features = 0}, "fc0"); },
                 {"fc 'fc0'", "output features must be positive"});
  expect_refused(
      [](B& m) { m.flatten("f1").fc(LinearAttrs{.out_features = 3, .init = WeightInit::normal(-1.0)}, "fcs"); },
      {"fc 'fcs'", "gain", "-1"});
  expect_refused([](B& m) { m.conv(ConvAttrs{.out_channels = 3, .kernel_h = 1, .kernel_w = 1,
                                             .init = WeightInit::uniform(std::nan(""))}, "cn"); },
                 {"conv 'cn'", "gain"});
  expect_refused([](B& m) { m.adaptive_avgpool(0, 7, "ap"); }, {"adaptive_avgpool 'ap'", "0x7"});
  expect_refused([](B& m) { m.stochastic_depth(1.f, "sd"); }, {"stochastic_depth 'sd'", "[0, 1)"});
}

// What the pooling kernels do not run yet is refused as the program is built, naming the layer,
// the attribute and what is supported, fused or not.
TEST(LayerAttrs, WhatThePoolingKernelsDoNotRunIsRefusedBeforeAnythingRuns) {
  using B = Blueprint;
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    expect_refused([](B& m) { m.maxpool(PoolAttrs{.kernel_h = 2, .kernel_w = 3, .stride_h = 2, .stride_w = 2}, "mr"); },
                   {"maxpool 'mr'", "kernel 2x3", "square kernels only"}, fuse);
    expect_refused([](B& m) { m.avgpool(PoolAttrs{.kernel_h = 3, .kernel_w = 3, .pad_top = 1}, "ap"); },
                   {"avgpool 'ap'", "padding (top, left, bottom, right) 1, 0, 0, 0"}, fuse);
  }
}

// Every convolution window compiles (the Conv op runs any), each output the size PyTorch's
// nn.Conv2d gives; only a square kernel in a square window without dilation or groups fuses with
// its BatchNorm and ReLU into a CBR, and any other, written as three layers or as a cbr(), into a
// conv_bn_act layer named as its activation (the cbr()'s name), under the names the unfused layers give
// their tensors.
TEST(LayerAttrs, AnyConvolutionWindowCompilesAndOnlySquareOnesFuseIntoCbr) {
  struct Case {
    const char* name;
    ConvAttrs conv;
    int64_t ho, wo;  // from an 8x8 map: floor((size + pads - dilation x (taps - 1) - 1) / stride) + 1
  };
  const Case cases[] = {
      {"grouped", ConvAttrs{.out_channels = 8, .kernel_h = 3, .kernel_w = 3, .pad_top = 1, .pad_left = 1,
                            .pad_bottom = 1, .pad_right = 1, .groups = 2},
       8, 8},
      {"depthwise", ConvAttrs{.out_channels = 4, .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2,
                              .pad_top = 1, .pad_left = 1, .pad_bottom = 1, .pad_right = 1, .groups = 4},
       4, 4},
      {"rect", ConvAttrs{.out_channels = 4, .kernel_h = 1, .kernel_w = 7, .pad_left = 3, .pad_right = 3}, 8, 8},
      {"strides", ConvAttrs{.out_channels = 4, .kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 1}, 3, 6},
      {"uneven", ConvAttrs{.out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_top = 1, .pad_right = 2}, 7, 8},
      {"dilated", ConvAttrs{.out_channels = 4, .kernel_h = 3, .kernel_w = 3, .pad_top = 2, .pad_left = 2,
                            .pad_bottom = 2, .pad_right = 2, .dilation_h = 2, .dilation_w = 2},
       8, 8},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Blueprint m("m");
    m.input(8, 8, 4).conv(c.conv, "conv").bn("bn").relu("relu");
    ConvBnAttrs cbr{c.conv, BatchNormAttrs{}};
    m.cbr(cbr, "cbr").flatten("flat").fc(2, true, "head");
    const Program p = compile(m, options());
    EXPECT_EQ(layer(p, "relu").kind, fused_layer::ConvBnAct) << "only square windows fuse into a CBR";
    EXPECT_EQ(layer(p, "relu").out_shape, (Shape{2, c.ho, c.wo, c.conv.out_channels}));
    EXPECT_EQ(layer(p, "cbr").kind, fused_layer::ConvBnAct);
    EXPECT_EQ(p.graph.count(LayerKind::CBR), 0);
    EXPECT_EQ(p.graph.count(LayerKind::BatchNorm), 0);
    // The filter holds C / groups channels (PyTorch's (K, C/groups, R, S), KRSC here).
    const int conv_w = p.find("conv.weight");
    ASSERT_GE(conv_w, 0);
    EXPECT_EQ(p.tensors[size_t(conv_w)].shape,
              (Shape{c.conv.out_channels, c.conv.kernel_h, c.conv.kernel_w, 4 / c.conv.groups}));
    EXPECT_GE(p.find("cbr.conv.weight"), 0);
    EXPECT_GE(p.find("cbr.bn.running_var"), 0);
  }
  // The same layers in a square window fuse, as before.
  Blueprint m("m");
  m.input(8, 8, 4).conv(4, 3, 1, 1, false, "conv").bn("bn").relu("relu").cbr(4, 3, 2, 1, "cbr");
  m.flatten("flat").fc(2, true, "head");
  const Program p = compile(m, options());
  EXPECT_EQ(p.graph.count(LayerKind::CBR), 2);
}

}  // namespace
}  // namespace kiln
