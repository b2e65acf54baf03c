// The DSL as a graph (issue 49, item 2): handles to nodes' outputs (Blueprint::Ref), from() to
// branch off any earlier output, add() to join two. The compiler resolves them to layer inputs,
// refuses handles that cannot work, and fuses a ResNet block written with handles exactly as
// the residual() one.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/fused_layer_kinds.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/layer_graph.h"
#include "kiln/memory_plan.h"
#include "kiln/zoo.h"
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

size_t index_of(const Program& p, const std::string& name) {
  for (size_t i = 0; i < p.graph.layers.size(); ++i)
    if (p.graph.layers[i].name == name) return i;
  throw std::runtime_error("no layer " + name);
}

const Layer& layer(const Program& p, const std::string& name) { return p.graph.layers[index_of(p, name)]; }

// The names of the layers `name` reads, in order.
std::vector<std::string> inputs_of(const Program& p, const std::string& name) {
  std::vector<std::string> names;
  for (int i : layer(p, name).inputs) names.push_back(p.graph.layers[size_t(i)].name);
  return names;
}

const BlueprintNode& node(const Blueprint& b, const std::string& name) {
  for (const BlueprintNode& n : b.nodes())
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

using Names = std::vector<std::string>;

TEST(BlueprintGraph, HandlesNameNodesOfTheirBlueprint) {
  Blueprint m("m");
  EXPECT_TRUE(m.last().is_source());  // no node yet: the last output is the input
  EXPECT_EQ(m.last().node(), -1);
  EXPECT_EQ(m.source().node(), -1);
  m.conv(4, 3, 1, 1, true, "c0");
  EXPECT_EQ(m.last().node(), 0);
  EXPECT_FALSE(m.last().is_source());
  const Blueprint::Ref x = m.last();
  m.relu("r").from(x).conv(4, 1, 1, 0, true, "b").add(m.last(), x, "join").relu("after");
  EXPECT_EQ(m.last().node(), 4);
  EXPECT_TRUE(node(m, "c0").inputs.empty());     // the chained form: the node before
  EXPECT_TRUE(node(m, "r").inputs.empty());
  EXPECT_EQ(node(m, "b").inputs, std::vector<int>{0});  // from(x)
  EXPECT_EQ(node(m, "join").inputs, (std::vector<int>{2, 0}));
  EXPECT_TRUE(node(m, "after").inputs.empty());  // from() holds for one node only
  EXPECT_EQ(node(m, "join").kind, LayerKind::Add);
  EXPECT_FALSE(m.pending_from().has_value());
}

// Two branches from one handle joined by add, a branch from the model's input joined later:
// every layer reads what its handles name, with PyTorch's shapes.
TEST(BlueprintGraph, BranchesAndJoinsResolveToLayerInputs) {
  Blueprint m("branchy");
  m.input(8, 8, 3);
  m.conv(4, 3, 1, 1, true, "stem");
  const Blueprint::Ref x = m.last();
  m.conv(4, 3, 1, 1, true, "a1").relu("a2");
  const Blueprint::Ref a = m.last();
  m.from(x).conv(4, 1, 1, 0, true, "b1");
  m.add(a, m.last(), "join");
  m.maxpool(2, 2, 0, "pool");
  const Blueprint::Ref pooled = m.last();
  m.from(m.source()).conv(4, 3, 2, 1, true, "skip");  // the data batch, stride 2: 4x4
  m.add(pooled, m.last(), "join2").global_avgpool("gap").fc(3, true, "fc");

  const Program p = compile(m, options());
  EXPECT_EQ(inputs_of(p, "stem"), Names{"input"});
  EXPECT_EQ(inputs_of(p, "a1"), Names{"stem"});
  EXPECT_EQ(inputs_of(p, "a2"), Names{"a1"});
  EXPECT_EQ(inputs_of(p, "b1"), Names{"stem"});
  EXPECT_EQ(inputs_of(p, "join"), (Names{"a2", "b1"}));
  EXPECT_EQ(inputs_of(p, "pool"), Names{"join"});
  EXPECT_EQ(inputs_of(p, "skip"), Names{"input"});
  EXPECT_EQ(inputs_of(p, "join2"), (Names{"pool", "skip"}));
  EXPECT_EQ(inputs_of(p, "gap"), Names{"join2"});
  EXPECT_EQ(layer(p, "join").kind, LayerKind::Add);
  EXPECT_EQ(layer(p, "join").out_shape, (Shape{2, 8, 8, 4}));
  EXPECT_EQ(layer(p, "pool").out_shape, (Shape{2, 4, 4, 4}));
  EXPECT_EQ(layer(p, "skip").out_shape, (Shape{2, 4, 4, 4}));
  EXPECT_EQ(layer(p, "join2").out_shape, (Shape{2, 4, 4, 4}));
  EXPECT_EQ(layer(p, "fc").out_shape, (Shape{2, 3}));
  EXPECT_EQ(p.graph.consumers()[index_of(p, "stem")].size(), 2u);  // a1 and b1
  EXPECT_TRUE(layer(p, "skip").marks.first_layer);  // it reads the data batch: no dX
  EXPECT_EQ(p.graph.count(LayerKind::Add), 2);
  EXPECT_EQ(p.graph.layers.size(), 11u);  // input + 10 nodes
}

// Inside seq() and residual() bodies handles index the inner blueprint: its source() is what the
// seq() or residual() node reads; outside, the seq() or residual() node is one node.
TEST(BlueprintGraph, NestedBlueprintsHaveTheirOwnHandles) {
  Blueprint inner("inner");
  inner.conv(4, 3, 1, 1, true, "c").relu("r");
  inner.add(inner.last(), inner.source(), "sum");
  Blueprint m("nested");
  m.input(6, 6, 4);
  m.conv(4, 1, 1, 0, true, "stem").seq(inner, "blk");
  const Blueprint::Ref blk = m.last();
  m.relu("after").add(m.last(), blk, "outer");
  m.residual(inner, std::nullopt, /*relu_after=*/false, "res");
  m.global_avgpool("gap").fc(2, true, "fc");

  const Program p = compile(m, options());
  EXPECT_EQ(inputs_of(p, "blk.c"), Names{"stem"});
  EXPECT_EQ(inputs_of(p, "blk.sum"), (Names{"blk.r", "stem"}));
  EXPECT_EQ(inputs_of(p, "after"), Names{"blk.sum"});
  EXPECT_EQ(inputs_of(p, "outer"), (Names{"after", "blk.sum"}));
  EXPECT_EQ(inputs_of(p, "res.c"), Names{"outer"});
  EXPECT_EQ(inputs_of(p, "res.sum"), (Names{"res.r", "outer"}));
  EXPECT_EQ(inputs_of(p, "res.add"), (Names{"res.sum", "outer"}));  // residual()'s own join
  EXPECT_EQ(inputs_of(p, "gap"), Names{"res.add"});
}

// The chained form's defaults hold for nodes without names: a join is numbered by its position.
TEST(BlueprintGraph, UnnamedJoinsAreNumberedByPosition) {
  Blueprint m("unnamed");
  m.input(4, 4, 2).conv(2, 3, 1, 1, true);
  m.add(m.last(), m.source()).global_avgpool().fc(2);
  const Program p = compile(m, options());
  EXPECT_EQ(inputs_of(p, "1"), (Names{"0", "input"}));
  EXPECT_EQ(layer(p, "1").kind, LayerKind::Add);
}

TEST(BlueprintGraph, RefusesHandlesOfAnotherBlueprint) {
  Blueprint other("other");
  other.conv(4, 3, 1, 1, true, "c");
  Blueprint m("m");
  m.conv(4, 3, 1, 1, true, "c0");
  expect_error([&] { m.from(other.last()); }, {"blueprint 'm'", "from()", "another blueprint", "at node 1"});
  expect_error([&] { m.add(m.last(), other.last()); }, {"blueprint 'm'", "add()", "another blueprint"});
  // An inner blueprint's handle is not the seq() node's: the outer one's last() is.
  Blueprint inner("inner");
  inner.conv(4, 3, 1, 1, true, "c");
  m.seq(inner, "blk");
  expect_error([&] { m.add(inner.last(), m.last()); }, {"blueprint 'm'", "another blueprint"});
  EXPECT_EQ(m.nodes().size(), 2u);  // nothing was added by the refused calls
}

// A copy keeps its blueprint's handles (its nodes are the same), so a handle to a node the copy
// does not have before the reader is refused by the compiler, naming the reader and the node.
TEST(BlueprintGraph, RefusesAForwardReference) {
  Blueprint a("a");
  a.input(6, 6, 3).conv(4, 3, 1, 1, true, "c0");
  Blueprint b = a;
  a.conv(4, 3, 1, 1, true, "c1").conv(4, 3, 1, 1, true, "c2").conv(4, 3, 1, 1, true, "c3");
  const Blueprint::Ref late = a.last();  // node 3
  b.add(late, b.last(), "join").relu("r1").relu("r2").global_avgpool("gap").fc(2, true, "fc");
  expect_error([&] { compile(b, options()); },
               {"add 'join'", "node 3 ('r2')", "blueprint 'a'", "not written before it", "last()"});
  // In a nested blueprint the name is the full one.
  Blueprint m("m");
  m.input(6, 6, 3).seq(b, "blk").global_avgpool("gap").fc(2, true, "fc");
  expect_error([&] { compile(m, options()); }, {"add 'blk.join'", "node 3 ('blk.r2')"});
}

TEST(BlueprintGraph, RefusesAddOfDifferentShapes) {
  Blueprint m("m");
  m.input(8, 8, 3).conv(4, 3, 1, 1, true, "c0");
  const Blueprint::Ref x = m.last();
  m.conv(4, 3, 2, 1, true, "down");  // 4x4
  m.add(m.last(), x, "join").global_avgpool("gap").fc(2, true, "fc");
  expect_error([&] { compile(m, options()); }, {"add 'join'", "shapes differ", "[2,4,4,4]", "[2,8,8,4]"});
  Blueprint channels("channels");
  channels.input(8, 8, 3).conv(4, 3, 1, 1, true, "c0");
  channels.add(channels.last(), channels.source(), "join").global_avgpool("gap").fc(2, true, "fc");
  expect_error([&] { compile(channels, options()); }, {"add 'join'", "[2,8,8,4]", "[2,8,8,3]"});
}

TEST(BlueprintGraph, RefusesABranchNothingReads) {
  Blueprint m("m");
  m.input(6, 6, 3).conv(4, 3, 1, 1, true, "c0");
  const Blueprint::Ref x = m.last();
  m.conv(4, 3, 1, 1, true, "forgotten");
  m.from(x).global_avgpool("gap").fc(2, true, "fc");
  expect_error([&] { compile(m, options()); },
               {"model 'm'", "conv 'forgotten' is read by no layer", "'fc'", "add(handle, last())"});
}

TEST(BlueprintGraph, RefusesFromThatNoNodeReads) {
  Blueprint m("m");
  m.input(6, 6, 3).conv(4, 3, 1, 1, true, "c0").global_avgpool("gap").fc(2, true, "fc");
  m.from(m.source());
  ASSERT_TRUE(m.pending_from().has_value());
  expect_error([&] { compile(m, options()); }, {"blueprint 'm' ends with from()", "its input"});
  Blueprint inner("inner");
  inner.conv(4, 3, 1, 1, true, "c");
  inner.from(inner.last());
  Blueprint outer("outer");
  outer.input(6, 6, 3).seq(inner, "blk").global_avgpool("gap").fc(2, true, "fc");
  expect_error([&] { compile(outer, options()); }, {"blueprint 'inner' ends with from()", "node 0 ('blk.c')"});

  Blueprint twice("twice");
  twice.conv(4, 3, 1, 1, true, "c0");
  twice.from(twice.source());
  expect_error([&] { twice.from(twice.last()); }, {"blueprint 'twice'", "from() twice before node 1"});
  expect_error([&] { twice.add(twice.last(), twice.source()); }, {"from() before add()", "drop the from()"});
}

// torchvision's BasicBlock as its forward() writes it: identity = x; out = bn2(conv2(relu(bn1(
// conv1(x))))); out += identity; relu(out). Handles name the identity and the two branches.
void handle_block(Blueprint& m, const std::string& name, int planes, int stride, bool downsample) {
  const Blueprint::Ref x = m.last();
  m.conv(planes, 3, stride, 1, false, name + ".conv1").bn(name + ".bn1").relu(name + ".relu1");
  m.conv(planes, 3, 1, 1, false, name + ".conv2").bn(name + ".bn2");
  const Blueprint::Ref out = m.last();
  Blueprint::Ref identity = x;
  if (downsample) {
    m.from(x).conv(planes, 1, stride, 0, false, name + ".downsample.0").bn(name + ".downsample.1");
    identity = m.last();
  }
  m.add(out, identity, name + ".add").relu(name + ".relu");
}

// The same block through residual(): the names its nesting gives are the ones above.
void residual_block(Blueprint& m, const std::string& name, int planes, int stride, bool downsample) {
  Blueprint body("body");
  body.conv(planes, 3, stride, 1, false, "conv1").bn("bn1").relu("relu1");
  body.conv(planes, 3, 1, 1, false, "conv2").bn("bn2");
  std::optional<Blueprint> shortcut;
  if (downsample) {
    shortcut = Blueprint("downsample");
    shortcut->conv(planes, 1, stride, 0, false, "0").bn("1");
  }
  m.residual(body, shortcut, true, name);
}

template <class Block>
Blueprint small_resnet(Block block) {
  Blueprint m("small_resnet");
  m.input(16, 16, 3).conv(8, 3, 1, 1, false, "conv1").bn("bn1").relu("relu");
  block(m, "layer1.0", 8, 1, false);
  block(m, "layer2.0", 16, 2, true);
  block(m, "layer2.1", 16, 1, false);
  m.global_avgpool("avgpool").fc(10, true, "fc");
  return m;
}

// Layer by layer: kind, name, the fused layers' source names, inputs and shape.
void expect_same_graph(const LayerGraph& a, const LayerGraph& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const Layer& x = a.layers[i];
    const Layer& y = b.layers[i];
    EXPECT_EQ(x.kind, y.kind) << x.name;
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.conv_name, y.conv_name) << x.name;
    EXPECT_EQ(x.bn_name, y.bn_name) << x.name;
    EXPECT_EQ(x.inputs, y.inputs) << x.name;
    EXPECT_EQ(x.out_shape, y.out_shape) << x.name;
  }
}

TEST(BlueprintGraph, AHandleWrittenBlockFusesAsResidualDoes) {
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    const Program handles = compile(small_resnet(handle_block), options(fuse));
    const Program residual = compile(small_resnet(residual_block), options(fuse));
    expect_same_graph(handles.graph, residual.graph);
    EXPECT_EQ(format_plan(handles, handles.memory), format_plan(residual, residual.memory));
    if (fuse) {
      EXPECT_EQ(handles.graph.count(LayerKind::CBR), 4);  // the stem and each block's conv1
      EXPECT_EQ(handles.graph.count(fused_layer::ConvBN), 4);  // each conv2, the downsample
      EXPECT_EQ(handles.graph.count(fused_layer::BnAddRelu), 3);
      EXPECT_EQ(handles.graph.count(LayerKind::Add), 0);
      EXPECT_EQ(inputs_of(handles, "layer2.0.relu"), (Names{"layer2.0.conv2", "layer2.0.downsample.0"}));
    } else {
      EXPECT_EQ(handles.graph.count(LayerKind::Add), 3);
      EXPECT_EQ(inputs_of(handles, "layer2.0.add"), (Names{"layer2.0.bn2", "layer2.0.downsample.1"}));
    }
  }
}

// torchvision's resnet18 written as its forward() is, with handles, is the zoo's resnet18 (made
// with residual()): the same `kiln plan`, byte for byte.
Blueprint resnet18_with_handles() {
  Blueprint m("resnet18");
  m.input(224, 224, 3);
  m.cbr(64, 7, 2, 3, "conv1").maxpool(3, 2, 1, "maxpool");
  int in_ch = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int planes = 64 << stage;
    for (int b = 0; b < 2; ++b) {
      const int stride = (stage > 0 && b == 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
      const Blueprint::Ref x = m.last();
      m.cbr(planes, 3, stride, 1, name + ".conv1").conv(planes, 3, 1, 1, false, name + ".conv2").bn(name + ".bn2");
      const Blueprint::Ref out = m.last();
      Blueprint::Ref identity = x;
      if (stride != 1 || in_ch != planes) {
        m.from(x).conv(planes, 1, stride, 0, false, name + ".downsample.0").bn(name + ".downsample.1");
        identity = m.last();
      }
      m.add(out, identity, name + ".add").relu(name + ".relu");
      in_ch = planes;
    }
  }
  m.global_avgpool("avgpool").fc(1000, true, "fc");
  return m;
}

TEST(BlueprintGraph, ResNet18WithHandlesIsTheZoosPlan) {
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "unfused");
    const Program handles = compile(resnet18_with_handles(), options(fuse));
    const Program zoo = compile(zoo::by_name("resnet18"), options(fuse));
    expect_same_graph(handles.graph, zoo.graph);
    EXPECT_EQ(format_plan(handles, handles.memory), format_plan(zoo, zoo.memory));
  }
}

}  // namespace
}  // namespace kiln
