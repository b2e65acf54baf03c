// Every operator the importer maps, in small models against onnxruntime's logits for the same file:
// convolutions with strides, asymmetric pads, groups, dilations and biases; BatchNormalization;
// LeakyRelu, Elu, Tanh, Sigmoid; Add; Concat; MaxPool in ceil mode and AveragePool without the
// padding in its divisor; ReduceMean as a squeeze-and-excitation gate and as the head's pooling (axes
// as an attribute and, at opset 18, an input); GlobalAveragePool; Flatten and Reshape (the shape
// computed by Shape -> Gather -> Unsqueeze -> Concat, by Slice, Cast, Squeeze and Constant nodes, or
// constant with 0 for the batch); Gemm with
// transB 0 and 1; MatMul + Add; Dropout; Identity.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// Windows, joins, a gate and a computed reshape: (N, 4, 9, 9) -> 7 classes.
OnnxTestModel windows_and_joins(uint32_t seed) {
  OnnxTestModel m(4, 9, 9, seed);
  // Stride 2, pads (top 1, left 0, bottom 0, right 1): 4x4.
  const std::string c1 = m.node("Conv", {"input", m.conv_weight("stem.weight", 6, 4, 3, 3), m.normal("stem.bias", {6}, 0.2f)},
                                "stem", {OnnxAttr::ints("strides", {2, 2}), OnnxAttr::ints("pads", {1, 0, 0, 1})});
  std::vector<std::string> bn = m.batch_norm("norm", 6);
  bn.insert(bn.begin(), c1);
  const std::string b1 = m.node("BatchNormalization", bn, "norm", {OnnxAttr::f("epsilon", 1e-3f), OnnxAttr::f("momentum", 0.9f)});
  const std::string l = m.node("LeakyRelu", {b1}, "leaky", {OnnxAttr::f("alpha", 0.2f)});
  // Two groups, dilation 2, padding 2: 4x4 again.
  const std::string c2 = m.node("Conv", {l, m.conv_weight("grouped.weight", 6, 3, 3, 3)}, "grouped",
                                {OnnxAttr::i("group", 2), OnnxAttr::ints("dilations", {2, 2}), OnnxAttr::ints("pads", {2, 2, 2, 2})});
  const std::string e = m.node("Elu", {c2}, "elu", {OnnxAttr::f("alpha", 0.7f)});
  const std::string t = m.node("Tanh", {m.node("Add", {e, l}, "residual")}, "tanh");
  const std::string mp = m.node("MaxPool", {t}, "maxpool",
                                {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::ints("strides", {2, 2}),
                                 OnnxAttr::ints("pads", {1, 1, 1, 1}), OnnxAttr::i("ceil_mode", 1)});
  const std::string ap = m.node("AveragePool", {t}, "avgpool",
                                {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("strides", {2, 2}),
                                 OnnxAttr::ints("pads", {1, 1, 1, 1}), OnnxAttr::i("count_include_pad", 0)});
  const std::string cat = m.node("Concat", {mp, ap}, "cat", {OnnxAttr::i("axis", 1)});  // 12 x 3 x 3
  // Squeeze-and-excitation: the mean over H and W kept as (N, 12, 1, 1), a 1x1 conv, a sigmoid, the product.
  const std::string squeeze = m.node("ReduceMean", {cat}, "se.pool", {OnnxAttr::ints("axes", {2, 3}), OnnxAttr::i("keepdims", 1)});
  const std::string gate = m.node(
      "Sigmoid", {m.node("Conv", {squeeze, m.conv_weight("se.fc.weight", 12, 12, 1, 1), m.normal("se.fc.bias", {12}, 0.5f)}, "se.fc")},
      "se.gate");
  const std::string scaled = m.node("Mul", {cat, gate}, "se.scale");
  // x.view(x.size(0), -1) as the TorchScript exporter writes it; then a Gemm whose weight is (in, out).
  const std::string n = m.node("Gather", {m.node("Shape", {scaled}, "shape"), m.int64s("zero", {0}, false)}, "batch",
                               {OnnxAttr::i("axis", 0)});
  const std::string n1 = m.node("Unsqueeze", {n, m.int64s("axis0", {0})}, "batch1");
  const std::string target = m.node("Concat", {n1, m.int64s("minus_one", {-1})}, "target", {OnnxAttr::i("axis", 0)});
  const std::string flat = m.node("Reshape", {scaled, target}, "flat");
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {108, 7}, 0.1f), m.normal("fc.bias", {7}, 0.1f)}, "logits"), 7);
  return m;
}

// The head's mean over H and W as flat features ((N, 3, 8, 8) -> 6 classes) at `opset`: ReduceMean's
// axes an attribute, or at 18 an input; MatMul + Add, Dropout and Identity after.
OnnxTestModel mean_matmul_head(uint32_t seed, int opset) {
  OnnxTestModel m(3, 8, 8, seed, opset);
  const std::string c = m.node("Relu", {m.node("Conv", {"input", m.conv_weight("conv.weight", 16, 3, 3, 3)}, "conv",
                                               {OnnxAttr::ints("pads", {1, 1, 1, 1})})},
                               "relu");
  const std::string mean =
      opset >= 18 ? m.node("ReduceMean", {c, m.int64s("axes", {-1, -2})}, "mean", {OnnxAttr::i("keepdims", 0)})
                  : m.node("ReduceMean", {c}, "mean", {OnnxAttr::ints("axes", {-1, -2}), OnnxAttr::i("keepdims", 0)});
  const std::string dropped = m.node("Dropout", {mean, m.scalar("ratio", 0.3f)}, "dropout");
  const std::string product = m.node("MatMul", {dropped, m.normal("onnx::MatMul_7", {16, 6}, 0.3f)}, "matmul");
  const std::string biased = m.node("Add", {m.normal("head.bias", {6}, 0.2f), product}, "head");
  m.output(m.node("Identity", {biased}, "logits"), 6);
  return m;
}

// Conv -> BN -> Relu (fuses as CBR) -> GlobalAveragePool -> Reshape to the constant (0, -1) -> Gemm:
// the pooling is kiln's global_avgpool; a second model flattens a 2x2 map through a Relu into a Gemm
// (ONNX's C,H,W columns: load_torch_weights reorders them).
OnnxTestModel pooled_reshape(uint32_t seed) {
  OnnxTestModel m(3, 10, 10, seed);
  std::vector<std::string> bn = m.batch_norm("bn1", 8);
  bn.insert(bn.begin(), m.node("Conv", {"input", m.conv_weight("conv1.weight", 8, 3, 3, 3)}, "conv1",
                               {OnnxAttr::ints("strides", {2, 2}), OnnxAttr::ints("pads", {1, 1, 1, 1})}));
  const std::string r = m.node("Relu", {m.node("BatchNormalization", bn, "bn1")}, "relu");
  const std::string flat = m.node("Reshape", {m.node("GlobalAveragePool", {r}, "pool"), m.int64s("shape", {0, -1})}, "flat");
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {4, 8}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 4);
  return m;
}

OnnxTestModel flatten_map(uint32_t seed) {
  OnnxTestModel m(3, 8, 8, seed);
  const std::string c = m.node("Conv", {"input", m.conv_weight("features.0.weight", 5, 3, 3, 3), m.normal("features.0.bias", {5}, 0.2f)},
                               "features.0", {OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string p = m.node("MaxPool", {c}, "features.1", {OnnxAttr::ints("kernel_shape", {4, 4}), OnnxAttr::ints("strides", {4, 4})});
  const std::string f = m.node("Relu", {m.node("Flatten", {p}, "flatten")}, "classifier.0");
  m.output(m.node("Gemm", {f, m.normal("classifier.1.weight", {3, 20}, 0.3f), m.normal("classifier.1.bias", {3}, 0.1f)},
                  "logits", {OnnxAttr::i("transB", 1)}),
           3);
  return m;
}

// Reshape targets in the other forms exporters compute them: (N, 4, 4) -> conv -> a 2x2 max pooling,
// then (variant 0) Concat(Slice(Shape(x), 0, 1), Cast(Constant(-1.0)) to int64), or (variant 1, opset
// 15) Concat(Shape(x, end=1), Squeeze(Unsqueeze(Constant(value_ints [-1])))).
OnnxTestModel computed_shape(uint32_t seed, int variant) {
  OnnxTestModel m(3, 4, 4, seed, variant == 0 ? 13 : 15);
  const std::string c = m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 3, 1, 1)}, "conv");
  const std::string p = m.node("MaxPool", {c}, "pool", {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("strides", {2, 2})});
  std::string batch, rest;
  if (variant == 0) {
    batch = m.node("Slice", {m.node("Shape", {p}, "shape"), m.int64s("starts", {0}), m.int64s("ends", {1})}, "batch");
    rest = m.node("Cast", {m.node("Constant", {}, "minus_one_float", {OnnxAttr::f("value_float", -1.f)})}, "rest_scalar",
                  {OnnxAttr::i("to", onnx::TensorProto::INT64)});
    rest = m.node("Unsqueeze", {rest, m.int64s("axes", {0})}, "rest");
  } else {
    batch = m.node("Shape", {p}, "batch", {OnnxAttr::i("end", 1)});
    const std::string k = m.node("Constant", {}, "minus_one", {OnnxAttr::ints("value_ints", {-1})});
    rest = m.node("Squeeze", {m.node("Unsqueeze", {k, m.int64s("axes", {1})}, "wrapped"), m.int64s("squeeze_axes", {1})}, "rest");
  }
  const std::string target = m.node("Concat", {batch, rest}, "target", {OnnxAttr::i("axis", 0)});
  const std::string flat = m.node("Reshape", {p, target}, "flat");
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {3, 16}, 0.3f)}, "logits", {OnnxAttr::i("transB", 1)}), 3);
  return m;
}

TEST(OnnxOps, EveryMappedOperatorGivesOnnxruntimesLogits) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const OnnxTestModel a = windows_and_joins(seed), b13 = mean_matmul_head(seed, 13), b18 = mean_matmul_head(seed, 18),
                      c = pooled_reshape(seed), d = flatten_map(seed), e0 = computed_shape(seed, 0),
                      e1 = computed_shape(seed, 1);
  testing::TempDir dir;
  const std::vector<testing::ImportedRun> runs = testing::run_imported(
      {{"windows_and_joins", &a}, {"mean_matmul_head_13", &b13}, {"mean_matmul_head_18", &b18}, {"pooled_reshape", &c},
       {"flatten_map", &d}, {"computed_shape_slice_cast", &e0}, {"computed_shape_squeeze", &e1}},
      dir, seed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (const testing::ImportedRun& r : runs) {
    testing::expect_onnxruntime_logits(r);
  }
  // What each became: the gate's mean keeps its 1x1 map (adaptive pooling), the head's is flat.
  EXPECT_EQ(testing::compiled_layers(runs[0].model, LayerKind::AdaptiveAvgPool).size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[0].model, LayerKind::Concat).size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[0].model, LayerKind::Mul).size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[1].model, LayerKind::GlobalAvgPool).size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[1].model, LayerKind::Dropout).size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[3].model, LayerKind::GlobalAvgPool).size(), 1u);
  EXPECT_EQ(testing::compiled_layers(runs[3].model, LayerKind::Flatten).size(), 0u);
  EXPECT_EQ(testing::compiled_layers(runs[3].model, LayerKind::CBR).size(), 1u);
  // The bound catches a misread layout: the flattened map's Gemm with its columns in kiln's H,W,C
  // order (no reordering) against onnxruntime on the file.
  testing::ImportedRun r = runs[4];
  for (NamedTensor& t : r.model.weights)
    if (t.name == "classifier.1.weight") {
      std::vector<std::byte> hwc(t.data.size());
      for (int64_t o = 0; o < 3; ++o)
        for (int64_t ch = 0; ch < 5; ++ch)
          for (int64_t p = 0; p < 4; ++p)  // column ch*4 + p (C,H,W) to p*5 + ch (H,W,C)
            std::memcpy(&hwc[size_t((o * 20 + p * 5 + ch) * 4)], &t.data[size_t((o * 20 + ch * 4 + p) * 4)], 4);
      t.data = hwc;
    }
  CompileOptions o;
  o.batch = 3;
  Executable exe(compile(r.model.blueprint, o), 1);
  load_imported_weights(exe, r.model);
  const double misread = testing::logit_gap(testing::kiln_logits(exe, r.x, r.shape), r.onnxruntime);
  EXPECT_GT(misread, testing::kImportBound);
  std::printf("flatten_map with its columns misread: gap %.2e\n", misread);
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
