// More forms of torch.onnx.export(dynamo=True, optimize=False) (PyTorch 2.9), beside
// tests/import/onnx_dynamo_forms_test.cpp's, written here with the ONNX library:
// - nn.Linear as MatMul (x, Transpose (W, perm (1, 0))) (+ Add of the bias), W the stored (out, in)
//   weight: on flat rows (a head) and inside ConvNeXt's channels-last block (Transpose (0, 2, 3, 1)
//   -> LayerNormalization -> MatMul/Add -> activation -> MatMul/Add -> Transpose (0, 3, 1, 2));
// - x[:, :c] as a Slice of the whole batch (axis 0, 0 to 2^63 - 1) before the channels' Slice;
// and the note of a BatchNorm folded by an eval-mode export, given only to a network with no
// normalization at all (not to one normalized by GroupNorm).
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "import_runner.h"
#include "kiln/export.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

constexpr int kOpset = 18;

// nn.Linear(in, out) as the unoptimized dynamo export writes it: MatMul (x, Transpose (W)) + b.
std::string dynamo_linear(OnnxTestModel& m, const std::string& x, const std::string& module, int64_t in, int64_t out) {
  const std::string w = m.normal(module + ".weight", {out, in}, 1.f / std::sqrt(float(in)));
  const std::string wt = m.node("Transpose", {w}, module + "_t", {OnnxAttr::ints("perm", {1, 0})});
  const std::string product = m.node("MatMul", {x, wt}, module + "_matmul");
  return m.node("Add", {product, m.normal(module + ".bias", {out}, 0.1f)}, module);
}

// The bytes of the model's initializer `name`.
std::vector<std::byte> initializer_bytes(const OnnxTestModel& m, const std::string& name) {
  for (const onnx::TensorProto& t : m.proto().graph().initializer())
    if (t.name() == name) {
      std::vector<std::byte> b(t.raw_data().size());
      std::memcpy(b.data(), t.raw_data().data(), b.size());
      return b;
    }
  return {};
}

const NamedTensor* weight_named(const ImportedModel& m, const std::string& name) {
  const auto it = std::find_if(m.weights.begin(), m.weights.end(), [&](const NamedTensor& t) { return t.name == name; });
  return it == m.weights.end() ? nullptr : &*it;
}

bool notes_mention(const ImportedModel& m, const std::string& text) {
  return std::any_of(m.notes.begin(), m.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

// input (N, 3, 4, 4) -> Conv 1x1 (6) -> Relu -> GlobalAveragePool -> Flatten -> fc1 (6 -> 5) -> Relu
// -> fc (5 -> 3), both linear layers in the dynamo form.
OnnxTestModel linear_head(uint32_t seed) {
  OnnxTestModel m(3, 4, 4, seed, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 6, 3, 1, 1)}, "conv");
  const std::string pooled = m.node("GlobalAveragePool", {m.node("Relu", {conv}, "relu")}, "pool");
  const std::string flat = m.node("Flatten", {pooled}, "flat", {OnnxAttr::i("axis", 1)});
  const std::string hidden = m.node("Relu", {dynamo_linear(m, flat, "fc1", 6, 5)}, "relu_1");
  m.output(dynamo_linear(m, hidden, "fc", 5, 3), 3);
  return m;
}

// input (N, 4, 5, 5) -> Conv 1x1 (8) -> ConvNeXt's block computed channels-last: Transpose (0, 2, 3, 1)
// -> LayerNormalization -> block.3 (8 -> 16) -> Relu -> block.5 (16 -> 8) -> Transpose (0, 3, 1, 2),
// plus the Conv's output (the residual) -> GlobalAveragePool -> Flatten -> Gemm (2).
OnnxTestModel channels_last_block(uint32_t seed) {
  OnnxTestModel m(4, 5, 5, seed, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("block.0.weight", 8, 4, 1, 1)}, "conv");
  const std::string nhwc = m.node("Transpose", {conv}, "permute", {OnnxAttr::ints("perm", {0, 2, 3, 1})});
  const std::string norm = m.node("LayerNormalization",
                                  {nhwc, m.uniform("block.2.weight", {8}, 0.5f, 1.5f), m.normal("block.2.bias", {8}, 0.1f)},
                                  "layer_norm", {OnnxAttr::i("axis", -1), OnnxAttr::f("epsilon", 1e-6f)});
  const std::string hidden = m.node("Relu", {dynamo_linear(m, norm, "block.3", 8, 16)}, "relu");
  const std::string nchw = m.node("Transpose", {dynamo_linear(m, hidden, "block.5", 16, 8)}, "permute_1",
                                  {OnnxAttr::ints("perm", {0, 3, 1, 2})});
  const std::string sum = m.node("Add", {nchw, conv}, "residual");
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {sum}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {2, 8}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  return m;
}

TEST(OnnxDynamoLinear, AMatMulByATransposedStoredWeightIsNnLinearWithTheWeightAsStored) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel head = linear_head(seed), block = channels_last_block(seed);
  const std::vector<testing::ImportedRun> runs = testing::run_imported({{"head", &head}, {"block", &block}}, dir, seed);
  ASSERT_EQ(runs.size(), 2u);
  // The dynamo form's linear layers; the block's head is a Gemm, also a linear layer.
  const std::vector<std::vector<std::string>> linears = {{"fc1", "fc"}, {"block.3", "block.5"}};
  const std::vector<std::vector<std::string>> layers = {{"fc1", "fc"}, {"block.3", "block.5", "fc"}};
  const std::vector<std::vector<Shape>> shapes = {{{5, 6}, {3, 5}}, {{16, 8}, {8, 16}}};
  for (size_t r = 0; r < runs.size(); ++r) {
    const ImportedModel& m = runs[r].model;
    const OnnxTestModel& file = r == 0 ? head : block;
    // The layers are named after their initializers; the weights are the file's bytes, as stored:
    // nn.Linear's (out, in) needs no transposition, and no note says one was made.
    std::vector<std::string> names;
    for (const Layer& l : testing::compiled_layers(m, LayerKind::Linear)) names.push_back(l.name);
    EXPECT_EQ(names, layers[r]) << runs[r].name;
    for (size_t k = 0; k < linears[r].size(); ++k) {
      const std::string w = linears[r][k] + ".weight";
      const NamedTensor* t = weight_named(m, w);
      ASSERT_NE(t, nullptr) << w;
      EXPECT_EQ(t->shape, shapes[r][k]) << w;
      EXPECT_TRUE(t->data == initializer_bytes(file, w)) << w;
      EXPECT_EQ(m.kiln_tensor.at(w), w);
      EXPECT_NE(weight_named(m, linears[r][k] + ".bias"), nullptr) << linears[r][k];
    }
    EXPECT_FALSE(notes_mention(m, "transposed")) << runs[r].name;
    testing::expect_onnxruntime_logits(runs[r]);
  }
  // The block's LayerNorm over the channels: the permutes became nothing.
  EXPECT_EQ(testing::compiled_layers(runs[1].model, LayerKind::LayerNorm).size(), 1u);
}

// input (N, 6, 4, 4) -> Conv 1x1 (6) -> x[:, :4] as the dynamo exporter writes it (Slice of axis 0
// from 0 to 2^63 - 1, then of axis 1 from 0 to 4), and Slices of the whole height and width (to
// 2^63 - 1, step 1) -> GlobalAveragePool -> Flatten -> Gemm (2). `batch_end` other than 2^63 - 1
// cuts the batch.
OnnxTestModel batch_slice(uint32_t seed, int64_t batch_end) {
  OnnxTestModel m(6, 4, 4, seed, kOpset);
  const int64_t end = std::numeric_limits<int64_t>::max();
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 6, 6, 1, 1)}, "conv");
  const auto slice = [&](const std::string& x, int64_t axis, int64_t from, int64_t to, const std::string& name) {
    return m.node("Slice", {x, m.int64s(name + "_start", {from}), m.int64s(name + "_end", {to}),
                            m.int64s(name + "_axis", {axis}), m.int64s(name + "_step", {1})},
                  name);
  };
  const std::string batch = slice(conv, 0, 0, batch_end, "slice");
  const std::string channels = slice(batch, 1, 0, 4, "slice_1");
  const std::string whole = slice(slice(channels, 2, 0, end, "slice_2"), 3, 0, end, "slice_3");
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {whole}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {2, 4}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  return m;
}

TEST(OnnxDynamoSlice, ASliceKeepingTheWholeOfAnAxisIsTheIdentity) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel m = batch_slice(seed, std::numeric_limits<int64_t>::max());
  const std::vector<testing::ImportedRun> runs = testing::run_imported({{"batch_slice", &m}}, dir, seed);
  ASSERT_EQ(runs.size(), 1u);
  // One layer: the channels' slice [0, 4); the whole-axis Slices map to nothing.
  const std::vector<Layer> slices = testing::compiled_layers(runs[0].model, LayerKind::ChannelSlice);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].out_shape.back(), 4);
  testing::expect_onnxruntime_logits(runs[0]);
  // A Slice of part of the batch is still refused.
  const std::string file = dir.file("part_of_batch.onnx");
  batch_slice(seed, 2).save(file);
  const std::string error = testing::error_of([&] { import_onnx(file); });
  EXPECT_NE(error.find("Slice node 'slice': it slices axis 0; kiln slices the channels (axis 1) only"), std::string::npos)
      << error;
}

// The note of a BatchNorm folded away by an eval-mode export: for a network with no normalization,
// not for one normalized by GroupNorm (timm's resnet50_gn), which lost nothing.
TEST(OnnxImportNotes, TheFoldedBatchNormNoteIsOnlyForANetworkWithNoNormalization) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  for (const bool group_norm : {true, false}) {
    Blueprint bp(group_norm ? "gn" : "plain");
    bp.input(8, 8, 3).conv(ConvAttrs::square(8, 3, 1, 1, true), "conv1");
    if (group_norm) bp.group_norm(4, 1e-5f, "gn1");
    bp.relu("relu").global_avgpool("pool").fc(3, true, "fc");
    CompileOptions o;
    o.batch = 2;
    Executable original(compile(bp, o), 3);
    const std::string file = dir.file(bp.name() + ".onnx");
    export_onnx(original, file);
    const ImportedModel m = import_onnx(file);
    EXPECT_EQ(testing::compiled_layers(m, LayerKind::GroupNorm).size(), group_norm ? 1u : 0u);
    EXPECT_EQ(notes_mention(m, "no BatchNormalization node among 1 convolutions"), !group_norm) << bp.name();
  }
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
