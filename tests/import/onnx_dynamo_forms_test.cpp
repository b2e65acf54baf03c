// The forms torch.onnx.export(dynamo=True, optimize=False) writes in training-mode exports of
// torchvision models (read from PyTorch 2.9's files), beyond tests/import/onnx_torch_forms_test.cpp's,
// written here with the ONNX library:
// - a bias=False convolution's zero bias as that exporter sizes it, Expand(CastLike(0, x),
//   Expand(Shape(weight, 0, 1), [1])): the Shape of a stored weight folds to its dimensions
//   (mobilenet_v2, densenet121, googlenet, regnet_y_400mf);
// - a graph output written by a Reshape that no node reads (squeezenet1_1's view(N, -1));
// - stochastic depth with the mask's values read twice inside the pattern, the noise shape
//   Concat(Reshape(Squeeze(Shape(input, 0, 1)), [-1]), [1], [1], [1]) (efficientnet_b0);
// - nn.Dropout in training mode decomposed to x * (Bernoulli(q) / q) with a draw per element,
//   Expand(CastLike(0, x), Shape(x)), and the view of the rows as (N, F, 1, 1) and back around it
//   (efficientnet_b0's and mobilenet_v3_small's classifiers): kiln's dropout layer.
// The random nodes make onnxruntime's logits random, so the models with noise are compared with
// onnxruntime's logits of the same model without it (in evaluation both are the identity).
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

constexpr int kOpset = 18;  // the dynamo exporter writes 18 and up; CastLike needs 15

OnnxAttr shape_range(int64_t end) { return OnnxAttr::i("end", end); }

// The dynamo exporter's Concat(Reshape(Squeeze(Shape(input, 0, 1)), [-1]), rest...): (N, rest...).
std::string batch_and(OnnxTestModel& m, const std::string& name, const std::vector<int64_t>& rest) {
  const std::string n = m.node("Squeeze", {m.node("Shape", {"input"}, name + "_n", {OnnxAttr::i("start", 0), shape_range(1)})},
                               name + "_sym_size");
  std::vector<std::string> parts = {m.node("Reshape", {n, m.int64s(name + "_minus_one", {-1})}, name + "_n_vector")};
  for (size_t k = 0; k < rest.size(); ++k) parts.push_back(m.int64s(name + "_d" + std::to_string(k), {rest[k]}));
  return m.node("Concat", parts, name, {OnnxAttr::i("axis", 0)});
}

// Bernoulli(q) / q as the dynamo exporter writes it, its noise of `shape`, its zeros cast like `like`
// where it gives one (nn.Dropout), the constant zero itself otherwise (stochastic depth).
std::string dynamo_noise(OnnxTestModel& m, const std::string& shape, const std::string& like, float q) {
  const std::string zero = like.empty() ? m.scalar("zero", 0.f) : m.node("CastLike", {m.scalar("zero", 0.f), like}, "zero_like");
  const std::string empty = m.node("Expand", {zero, shape}, "empty");
  const std::string self_float = m.node("Cast", {empty}, "self_float", {OnnxAttr::i("to", onnx::TensorProto::FLOAT)});
  const std::string rands = m.node("RandomUniformLike", {self_float}, "rands", {OnnxAttr::f("low", 0.f), OnnxAttr::f("high", 1.f)});
  // rands read twice (Less, and CastLike of q) and empty twice (Cast, and CastLike of the Bernoulli).
  const std::string sampled = m.node("Less", {rands, m.node("CastLike", {m.scalar("p", q), rands}, "p_cast")}, "sampled");
  const std::string bernoulli = m.node("CastLike", {sampled, empty}, "bernoulli");
  return m.node("Div", {bernoulli, m.scalar("q", q)}, "noise");
}

// input (N, 3, 6, 6) -> Conv 3x3 (4, bias=False as the dynamo exporter writes it) -> Relu ->
// GlobalAveragePool -> view(N, -1), the graph's output (4 classes), read by no node.
OnnxTestModel zero_bias_and_view_output(uint32_t seed) {
  OnnxTestModel m(3, 6, 6, seed, kOpset);
  const std::string w = m.conv_weight("features.0.weight", 4, 3, 3, 3);
  const std::string out_channels = m.node("Shape", {w}, "weight_out", {OnnxAttr::i("start", 0), shape_range(1)});
  const std::string bias_shape = m.node("Expand", {out_channels, m.int64s("one", {1})}, "bias_shape");
  const std::string bias = m.node("Expand", {m.node("CastLike", {m.scalar("zero", 0.f), "input"}, "zero_like"), bias_shape}, "zero_bias");
  const std::string conv = m.node("Conv", {"input", w, bias}, "conv",
                                  {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string pooled = m.node("GlobalAveragePool", {m.node("Relu", {conv}, "relu")}, "pool");
  m.output(m.node("Reshape", {pooled, batch_and(m, "view_shape", {4})}, "view", {OnnxAttr::i("allowzero", 1)}), 4);
  return m;
}

TEST(OnnxDynamoForms, AZeroBiasSizedByTheWeightsShapeIsNoParameterAndAReshapeOutputImports) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const OnnxTestModel m = zero_bias_and_view_output(seed);
  testing::TempDir dir;
  const std::vector<testing::ImportedRun> runs = testing::run_imported({{"zero_bias", &m}}, dir, seed);
  ASSERT_EQ(runs.size(), 1u);
  // Only the weight: the zero bias is no parameter (PyTorch's state_dict has none).
  std::vector<std::string> names;
  for (const NamedTensor& t : runs[0].model.weights) names.push_back(t.name);
  EXPECT_EQ(names, std::vector<std::string>{"features.0.weight"});
  testing::expect_onnxruntime_logits(runs[0]);
}

// input (N, 4, 5, 5) -> Conv 1x1 (4) -> x + stochastic_depth(x) in the dynamo exporter's form (q
// 0.8; `noise` false: x + x, the twin onnxruntime runs) -> GlobalAveragePool -> Flatten -> Gemm (2).
OnnxTestModel dynamo_stochastic_depth(uint32_t seed, bool noise) {
  OnnxTestModel m(4, 5, 5, seed, kOpset);
  const std::string x = m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 4, 1, 1)}, "conv");
  const std::string branch =
      noise ? m.node("Mul", {x, dynamo_noise(m, batch_and(m, "noise_shape", {1, 1, 1}), "", 0.8f)}, "stochastic_depth") : x;
  const std::string sum = m.node("Add", {branch, x}, "residual");
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {sum}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {2, 4}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  return m;
}

// input (N, 3, 4, 4) -> Conv 1x1 (6) -> GlobalAveragePool -> view(N, -1) -> nn.Dropout(0.2) in the
// dynamo exporter's form (`noise` false: left out, the twin onnxruntime runs) -> view(N, 6, 1, 1)
// -> view(N, -1) -> Gemm (3).
OnnxTestModel dynamo_dropout(uint32_t seed, bool noise) {
  OnnxTestModel m(3, 4, 4, seed, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 6, 3, 1, 1)}, "conv");
  const std::string pooled = m.node("GlobalAveragePool", {conv}, "pool");
  const std::string rows = m.node("Reshape", {pooled, batch_and(m, "view_shape", {6})}, "view", {OnnxAttr::i("allowzero", 1)});
  const std::string shape = m.node("Shape", {rows}, "rows_shape", {OnnxAttr::i("start", 0)});
  const std::string dropped = noise ? m.node("Mul", {rows, dynamo_noise(m, shape, rows, 0.8f)}, "dropout") : rows;
  const std::string map = m.node("Reshape", {dropped, batch_and(m, "map_shape", {6, 1, 1})}, "view_1", {OnnxAttr::i("allowzero", 1)});
  const std::string flat = m.node("Reshape", {map, batch_and(m, "flat_shape", {6})}, "view_2", {OnnxAttr::i("allowzero", 1)});
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {3, 6}, 0.5f), m.normal("fc.bias", {3}, 0.1f)}, "logits",
                  {OnnxAttr::i("transB", 1)}),
           3);
  return m;
}

TEST(OnnxDynamoForms, StochasticDepthAndDropoutAsTheDynamoExporterWritesThemBecomeKilnsLayers) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel depth = dynamo_stochastic_depth(seed, true), depth_twin = dynamo_stochastic_depth(seed, false);
  const OnnxTestModel drop = dynamo_dropout(seed, true), drop_twin = dynamo_dropout(seed, false);
  const std::vector<testing::ImportedRun> runs = testing::run_imported(
      {{"depth", &depth}, {"depth_twin", &depth_twin}, {"drop", &drop}, {"drop_twin", &drop_twin}}, dir, seed);
  ASSERT_EQ(runs.size(), 4u);

  const std::vector<Layer> depths = testing::compiled_layers(runs[0].model, LayerKind::StochasticDepth);
  ASSERT_EQ(depths.size(), 1u);
  EXPECT_NEAR(attrs_of<StochasticDepthAttrs>(depths[0]).p, 0.2f, 1e-6f);
  EXPECT_TRUE(testing::compiled_layers(runs[0].model, LayerKind::Dropout).empty());
  const std::vector<Layer> drops = testing::compiled_layers(runs[2].model, LayerKind::Dropout);
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_NEAR(attrs_of<DropoutAttrs>(drops[0]).p, 0.2f, 1e-6f);
  EXPECT_TRUE(testing::compiled_layers(runs[2].model, LayerKind::StochasticDepth).empty());

  // In evaluation both layers are the identity: kiln's logits are onnxruntime's of the twin without
  // the noise (the same weights: the same seed draws them in the same order).
  for (size_t k : {0u, 2u}) {
    ASSERT_EQ(runs[k].x, runs[k + 1].x);
    const double gap = testing::logit_gap(runs[k].kiln, runs[k + 1].onnxruntime);
    EXPECT_LT(gap, testing::kImportBound) << runs[k].name;
    std::printf("%s: gap to onnxruntime's twin %.2e\n", runs[k].name.c_str(), gap);
  }
}

// input (N, 3, 4, 4) -> Conv 1x1 (`channels`) -> Relu -> GlobalAveragePool -> Reshape (-1, `width`) (the
// optimized dynamo export's view(N, -1)) -> Gemm (2).
OnnxTestModel minus_one_view(uint32_t seed, int64_t channels, int64_t width) {
  OnnxTestModel m(3, 4, 4, seed, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", channels, 3, 1, 1)}, "conv");
  const std::string pooled = m.node("GlobalAveragePool", {m.node("Relu", {conv}, "relu")}, "pool");
  const std::string flat = m.node("Reshape", {pooled, m.int64s("view_shape", {-1, width})}, "view");
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {2, width}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  return m;
}

TEST(OnnxDynamoForms, AViewToMinusOneAndTheWidthIsAFlattenWhereTheWidthIsEachSamples) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel m = minus_one_view(seed, 4, 4);
  const std::vector<testing::ImportedRun> runs = testing::run_imported({{"minus_one", &m}}, dir, seed);
  ASSERT_EQ(runs.size(), 1u);
  testing::expect_onnxruntime_logits(runs[0]);
  // (-1, 8) of 4 channels would fold samples together: refused.
  const std::string file = dir.file("wrong_width.onnx");
  minus_one_view(seed, 4, 8).save(file);
  const std::string error = testing::error_of([&] { import_onnx(file); });
  EXPECT_NE(error, "");
  std::printf("view (-1, 8) of 4 channels: %s\n", error.c_str());
}

// The dynamo exporter's AdaptiveAvgPool2d((7, 7)) of a 2x2 map (vgg at 64x64) gathers the map's
// positions with GatherND; kiln has no gather layer, and the refusal names the cause and the fix.
TEST(OnnxDynamoForms, AGatherNDOfAFeatureMapIsRefusedNamingTheAdaptivePoolAndTheInputSize) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  OnnxTestModel m(3, 2, 2, 5, kOpset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv");
  const std::string nhwc = m.node("Transpose", {conv}, "nhwc", {OnnxAttr::ints("perm", {2, 3, 0, 1})});
  const std::string gathered = m.node("GatherND", {nhwc, m.int64s("positions", {0, 0})}, "gathered");
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {gathered}, "pool")}, "flat");
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {2, 4}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  testing::TempDir dir;
  const std::string file = dir.file("gather.onnx");
  m.save(file);
  const std::string error = testing::error_of([&] { import_onnx(file); });
  EXPECT_NE(error.find("GatherND node 'gathered': kiln has no gather layer"), std::string::npos) << error;
  EXPECT_NE(error.find("AdaptiveAvgPool2d(output_size)"), std::string::npos) << error;
  EXPECT_NE(error.find("224x224"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
