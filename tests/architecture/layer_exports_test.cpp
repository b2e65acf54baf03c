// Every layer kind a program can hold has exactly one export (`extern const LayerExport k<Name>Export`
// in its family's *_export.cpp, collected by cmake/layer_exports.cmake): the model language's kinds
// less the composites that expansion removes, and every fused kind, since the exporters read
// programs compiled with the fusions on (`kiln export` compiles with the default CompileOptions) and
// the fused layers stay fused in them. A kind declared without its export fails here by name, not
// when a user first exports a model holding it. And the tensors the kinds' exports hand PyTorch are
// exactly those kiln::torch_names names (which load_torch_weights reads), in the program's order,
// for models holding every kind.
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "export/layer_export.h"
#include "ir/fused_layer_kinds.h"
#include "kiln/compile.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

// The kinds a compiled program's layer graph may hold (as tests/architecture/layer_kinds_test.cpp
// lists them for the lowerings).
std::vector<LayerKind> exported_kinds() {
  std::vector<LayerKind> kinds;
  for (int k = 0; k < static_cast<int>(LayerKind::Sequence); ++k) kinds.push_back(static_cast<LayerKind>(k));
  for (int i = 0; i < fused_layer::kCount; ++i) kinds.push_back(fused_layer::kind_at(i));
  return kinds;
}

TEST(LayerExports, EveryKindAProgramCanHoldHasExactlyOneExport) {
  std::map<LayerKind, int> exports;
  for (const LayerExport* e : all_layer_exports()) {
    ++exports[e->kind];
    EXPECT_NE(e->onnx, nullptr) << layer_kind_name(e->kind) << ": an export without its ONNX nodes";
  }
  for (LayerKind kind : exported_kinds()) {
    EXPECT_EQ(exports[kind], 1) << layer_kind_name(kind)
                                << ": define `extern const LayerExport k<Name>Export{...}` in its family's "
                                   "src/ops/<family>/<name>_export.cpp (src/export/layer_export.h)";
    EXPECT_NE(find_layer_export(kind), nullptr) << layer_kind_name(kind);
  }
  EXPECT_EQ(exports.size(), exported_kinds().size()) << "an export for a kind no program holds";
  EXPECT_EQ(find_layer_export(LayerKind::Sequence), nullptr);  // expanded before lowering
  EXPECT_EQ(find_layer_export(LayerKind::Residual), nullptr);
}

// One of every kind the model language writes: a biased convolution before BN, Conv -> BN -> ReLU
// (a CBR when fused), a cbr(), average and max pooling, a residual add without ReLU (an Add layer)
// and a projection block (conv_bn and bn_add_relu when fused), a flatten read by an activation and
// by a linear layer, dropout, the catalogue's layers; the zoo's ResNets add global average pooling.
Blueprint every_kind() {
  Blueprint m("every_kind");
  m.input(12, 10, 3);
  m.conv(8, 3, 1, 1, /*bias=*/true, "stem").bn("stem_bn").relu("stem_relu");
  m.conv(8, 3, 1, 1, false, "conv").bn("bn").relu("relu");
  m.cbr(8, 3, 1, 1, "cbr").avgpool(3, 1, 1, "avg");
  Blueprint body("body");
  body.conv(8, 3, 1, 1, false, "conv").bn("bn");
  m.residual(body, std::nullopt, /*relu_after=*/false, "plain_add");
  m.maxpool(3, 2, 1, "max").stochastic_depth(0.2f, "sd").adaptive_avgpool(4, 4, "adaptive");
  const Blueprint::Ref pooled = m.last();
  m.conv(4, 1, 1, 0, false, "branch").concat({pooled, m.last()}, "cat");
  const Blueprint::Ref cat = m.last();
  m.sigmoid("cat_gate");
  m.mul(m.last(), cat, "gated");
  // ConvNeXt's and ShuffleNetV2's layers on the 12-channel map: LayerNorm over the channels, a
  // linear layer at every position, a layer scale, GroupNorm, a shuffle and a slice.
  m.layer_norm(1e-6f, "ln").fc(12, true, "pointwise").layer_scale(0.5f, "scaled").group_norm(4, 1e-5f, "gn");
  m.channel_shuffle(3, "shuffle").channel_slice(2, 8, "slice");
  Blueprint block("block");
  block.cbr(16, 3, 2, 1, "conv1").conv(16, 3, 1, 1, false, "conv2").bn("bn2");
  Blueprint projection("downsample");
  projection.conv(16, 1, 2, 0, false, "0").bn("1");
  m.residual(block, projection, true, "block");
  m.flatten("flatten").silu("act").dropout(0.5f, "drop").fc(24, true, "fc1").fc(5, false, "head");
  return m;
}

TEST(LayerExports, TheExportedTensorsAreTheStateDictsInTheProgramsOrder) {
  std::vector<std::pair<std::string, Blueprint>> models = {{"every_kind", every_kind()}};
  for (const std::string& name : zoo::names()) models.emplace_back(name, zoo::by_name(name, 10));
  std::set<LayerKind> seen;
  for (const auto& [name, model] : models) {
    for (bool fuse : {true, false}) {
      CompileOptions o;
      o.batch = 1, o.fuse_cbr = fuse;
      // 64x64 where the model takes it (its layers are the same at any size), else its smallest.
      const int64_t side = std::max<int64_t>(64, min_input_side(model, o));
      if (model.input_hwc()->at(0) > side) o.input_hwc = {side, side, model.input_hwc()->at(2)};
      const Program p = compile(model, o);
      const ExportedGraph graph(p.graph);
      std::vector<std::string> exported;
      for (size_t i = 0; i < graph.layers.size(); ++i) {
        seen.insert(graph.layers[i].kind);
        const LayerExport* e = find_layer_export(graph.layers[i].kind);
        ASSERT_NE(e, nullptr) << layer_kind_name(graph.layers[i].kind);
        std::vector<TorchParam> params;
        if (e->torch_params) e->torch_params(graph, int(i), params);
        for (const TorchParam& t : params) exported.push_back(t.tensor);
      }
      // torch_names' tensors, in the program's order.
      const std::map<std::string, std::string> names = torch_names(p);
      std::vector<std::string> want;
      for (const TensorSpec& t : p.tensors)
        if (names.count(t.name)) want.push_back(t.name);
      EXPECT_EQ(exported, want) << name << (fuse ? " fused" : " unfused");
    }
  }
  for (LayerKind kind : exported_kinds())
    EXPECT_TRUE(seen.count(kind)) << layer_kind_name(kind) << ": add a layer of this kind to every_kind() here, so "
                                     "that its exported tensors are checked";
}

}  // namespace
}  // namespace kiln
