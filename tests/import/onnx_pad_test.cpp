// Explicit Pad nodes folded into the layer that reads them (src/import/onnx_pad_folding.h): timm's
// padding='same' as the dynamo exporter writes it (Conv2dSame's asymmetric zeros before a strided
// convolution, MaxPool2dSame's -inf before a max pooling), nn.ZeroPad2d before an average pooling
// and before a convolution with padding of its own, in the opset-11 form (pads, value and axes as
// inputs) and the opset-2 form (attributes). Each is compared with onnxruntime's logits, and the
// pads each layer ends up with are checked; a Pad kiln cannot fold is refused, naming the node.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// input (N, 3, 11, 11) -> Pad (left 1, right 2, bottom 1; zeros) -> Conv 3x3 stride 2 with pads 1 of its
// own -> Relu -> Pad (-inf, all sides 1) -> MaxPool 3x3 stride 2 -> Pad (zeros, all sides 1) ->
// AveragePool 3x3 stride 1 (count_include_pad 0, no pads of its own) -> GlobalAveragePool -> Flatten ->
// Gemm (3, with a bias). The first convolution's zero bias is cast like the padded input (a CastLike reading the
// Pad's output for its type), as the dynamo exporter writes it.
OnnxTestModel padded_model(uint32_t seed, bool pads_as_inputs) {
  OnnxTestModel m(3, 11, 11, seed, pads_as_inputs ? 18 : 10);
  auto pad = [&](const std::string& x, std::vector<int64_t> pads, float value, const std::string& name) {
    if (!pads_as_inputs)
      return m.node("Pad", {x}, name, {OnnxAttr::ints("pads", pads), OnnxAttr::f("value", value)});
    // Opset 18's axes input: the height and width only, their pads in (begin H, begin W, end H, end W).
    const std::vector<int64_t> spatial = {pads[2], pads[3], pads[6], pads[7]};
    return m.node("Pad", {x, m.int64s(name + "_pads", spatial), m.scalar(name + "_value", value),
                          m.int64s(name + "_axes", {2, 3})},
                  name);
  };
  const float lowest = -std::numeric_limits<float>::infinity();
  const std::string same = pad("input", {0, 0, 0, 1, 0, 0, 1, 2}, 0.f, "conv_pad");
  std::string bias = m.tensor("conv.bias", {4}, {0.f, 0.f, 0.f, 0.f});
  if (pads_as_inputs) bias = m.node("CastLike", {bias, same}, "bias_cast");
  const std::string conv = m.node("Conv", {same, m.conv_weight("conv.weight", 4, 3, 3, 3), bias}, "conv",
                                  {OnnxAttr::ints("strides", {2, 2}), OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string relu = m.node("Relu", {conv}, "relu");
  const std::string pool_in = pad(relu, {0, 0, 1, 1, 0, 0, 1, 1}, lowest, "pool_pad");
  const std::string pooled = m.node("MaxPool", {pool_in}, "pool",
                                    {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::ints("strides", {2, 2})});
  const std::string zeros = pad(pooled, {0, 0, 1, 1, 0, 0, 1, 1}, 0.f, "avg_pad");
  const std::string averaged = m.node("AveragePool", {zeros}, "avg",
                                      {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::i("count_include_pad", 0)});
  const std::string flat = m.node("Flatten", {m.node("GlobalAveragePool", {averaged}, "gap")}, "flat",
                                  {OnnxAttr::i("axis", 1)});
  // Gemm's bias is optional from opset 11 on only.
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {3, 4}, 0.5f), m.normal("fc.bias", {3}, 0.1f)}, "logits",
                  {OnnxAttr::i("transB", 1)}),
           3);
  return m;
}

template <class Attrs>
std::vector<int> pads_of(const Layer& l) {
  const Attrs& a = attrs_of<Attrs>(l);
  return {a.pad_top, a.pad_left, a.pad_bottom, a.pad_right};
}

TEST(OnnxPad, PadsBeforeAConvolutionOrAPoolingFoldIntoItsPaddingAndMatchOnnxruntime) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  testing::TempDir dir;
  const OnnxTestModel inputs = padded_model(seed, true), attributes = padded_model(seed, false);
  const std::vector<testing::ImportedRun> runs =
      testing::run_imported({{"pads_as_inputs", &inputs}, {"pads_as_attributes", &attributes}}, dir, seed);
  ASSERT_EQ(runs.size(), 2u);
  for (const testing::ImportedRun& r : runs) {
    // The convolution: its own 1 plus the Pad's (top 0, left 1, bottom 1, right 2); 11 + 1 + 3 padded, so
    // (15 - 3) / 2 + 1 = 7 rows and (16 - 3) / 2 + 1 = 7 columns.
    const std::vector<Layer> convs = testing::compiled_layers(r.model, LayerKind::Conv);
    ASSERT_EQ(convs.size(), 1u) << r.name;
    EXPECT_EQ(pads_of<ConvAttrs>(convs[0]), (std::vector<int>{1, 2, 2, 3})) << r.name;
    const std::vector<Layer> max = testing::compiled_layers(r.model, LayerKind::MaxPool);
    ASSERT_EQ(max.size(), 1u) << r.name;
    EXPECT_EQ(pads_of<PoolAttrs>(max[0]), (std::vector<int>{1, 1, 1, 1})) << r.name;
    // The average's window counted the Pad's zeros, so it counts its padding now.
    const std::vector<Layer> avg = testing::compiled_layers(r.model, LayerKind::AvgPool);
    ASSERT_EQ(avg.size(), 1u) << r.name;
    EXPECT_EQ(pads_of<PoolAttrs>(avg[0]), (std::vector<int>{1, 1, 1, 1})) << r.name;
    EXPECT_TRUE(attrs_of<PoolAttrs>(avg[0]).count_include_pad) << r.name;
    testing::expect_onnxruntime_logits(r);
  }
}

TEST(OnnxPad, APadKilnCannotFoldIsRefusedNamingTheNodeAndTheForms) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  // Each Pad is read by a convolution but pads with 1, the channels, or by reflection; the last pads a max
  // pooling's bottom and right only (timm's MaxPool2dSame at an even size), which kiln's pooling cannot.
  OnnxTestModel m(3, 8, 8, 1, 10);
  const std::string ones = m.node("Pad", {"input"}, "pad_ones",
                                  {OnnxAttr::ints("pads", {0, 0, 1, 1, 0, 0, 1, 1}), OnnxAttr::f("value", 1.f)});
  const std::string c1 = m.node("Conv", {ones, m.conv_weight("c1.weight", 4, 3, 3, 3)}, "c1");
  const std::string channels = m.node("Pad", {c1}, "pad_channels", {OnnxAttr::ints("pads", {0, 1, 0, 0, 0, 1, 0, 0})});
  const std::string c2 = m.node("Conv", {channels, m.conv_weight("c2.weight", 4, 6, 1, 1)}, "c2");
  const std::string mirrored = m.node("Pad", {c2}, "pad_reflect",
                                      {OnnxAttr::ints("pads", {0, 0, 1, 1, 0, 0, 1, 1}), OnnxAttr::s("mode", "reflect")});
  const std::string c3 = m.node("Conv", {mirrored, m.conv_weight("c3.weight", 4, 4, 3, 3)}, "c3");
  const std::string uneven = m.node("Pad", {c3}, "pad_uneven",
                                    {OnnxAttr::ints("pads", {0, 0, 0, 0, 0, 0, 1, 1}),
                                     OnnxAttr::f("value", -std::numeric_limits<float>::infinity())});
  const std::string pooled = m.node("MaxPool", {uneven}, "pool",
                                    {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::ints("strides", {2, 2})});
  const std::string flat = m.node("Flatten", {m.node("GlobalAveragePool", {pooled}, "gap")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {3, 4}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 3);
  const std::string file = dir.file("unfoldable.onnx");
  m.save(file);
  const std::string error = testing::error_of([&] { import_onnx(file); });
  for (const char* node : {"Pad node 'pad_ones'", "Pad node 'pad_channels'", "Pad node 'pad_reflect'", "Pad node 'pad_uneven'"})
    EXPECT_NE(error.find(std::string(node) + ": kiln reads Pad only as more padding of the one Conv, MaxPool or "
                                             "AveragePool reading it"),
              std::string::npos)
        << node << " in:\n" << error;
  EXPECT_NE(error.find("dynamo=True, optimize=False"), std::string::npos) << error;
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
