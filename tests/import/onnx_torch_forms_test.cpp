// The forms PyTorch's two exporters write in training-mode exports (read from PyTorch 2.9's files of
// torchvision models; tests/gpu/onnx_torch_export_gpu_test.cpp imports the real files where torch
// is installed), written here with the ONNX library so the CPU suite checks them without torch:
// - the dynamo exporter's bias=False convolution, whose bias input is zeros expanded in the graph
//   (Expand(CastLike(0, x), Shape(weight, 0, 1))): no bias parameter, as PyTorch's model has none;
// - its view(N, -1), whose shape is Concat(Reshape(Squeeze(Shape(x, 0, 1)), [-1]), [F]);
// - BatchNormalization with training_mode 1 and its statistics outputs, Dropout with a
//   training_mode input;
// - torchvision's stochastic depth ("row" mode) as both exporters write it: x * (Bernoulli(q) / q),
//   the Bernoulli as Less(RandomUniformLike(...), q) cast to float, one draw per sample; it becomes
//   kiln's stochastic_depth layer (p = 1 - q).
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

// input (N, 3, 6, 6) -> Conv 3x3 (4, the dynamo exporter's zero bias) -> BatchNormalization
// (training_mode 1, three outputs) -> Relu -> MaxPool 2 -> Dropout (ratio 0.3, training_mode true)
// -> Reshape to (N, 36) through the dynamo exporter's shape arithmetic -> Gemm (3 classes).
// `training` false writes the eval-mode twin (training_mode 0, one output each), what onnxruntime
// computes in evaluation (its BatchNormalization honours training_mode 1 with the batch's
// statistics).
OnnxTestModel dynamo_forms(uint32_t seed, bool training = true) {
  OnnxTestModel m(3, 6, 6, seed, 18);
  const std::string w = m.conv_weight("conv.weight", 4, 3, 3, 3);
  const std::string channels =
      m.node("Shape", {w}, "out_channels", {OnnxAttr::i("start", 0), OnnxAttr::i("end", 1)});
  const std::string zero = m.node("CastLike", {m.scalar("zero", 0.f), "input"}, "zero_like_input");
  const std::string bias = m.node("Expand", {zero, channels}, "zero_bias");
  const std::string conv = m.node("Conv", {"input", w, bias}, "conv",
                                  {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::ints("pads", {1, 1, 1, 1})});
  std::vector<std::string> bn_inputs = {conv};
  for (const std::string& t : m.batch_norm("bn", 4)) bn_inputs.push_back(t);
  const std::string bn =
      training ? m.node("BatchNormalization", bn_inputs, "bn_out",
                        {OnnxAttr::f("epsilon", 1e-5f), OnnxAttr::f("momentum", 0.9f), OnnxAttr::i("training_mode", 1)},
                        {"bn_running_mean", "bn_running_var"})
               : m.node("BatchNormalization", bn_inputs, "bn_out", {OnnxAttr::f("epsilon", 1e-5f), OnnxAttr::f("momentum", 0.9f)});
  const std::string pooled = m.node("MaxPool", {m.node("Relu", {bn}, "relu")}, "pool",
                                    {OnnxAttr::ints("kernel_shape", {2, 2}), OnnxAttr::ints("strides", {2, 2})});
  onnx::TensorProto* train = m.graph()->add_initializer();
  train->set_name("training"), train->set_data_type(onnx::TensorProto::BOOL), train->add_int32_data(training ? 1 : 0);
  const std::string dropped = m.node("Dropout", {pooled, m.scalar("ratio", 0.3f), "training"}, "drop", {}, {"drop_mask"});
  const std::string n = m.node("Squeeze", {m.node("Shape", {"input"}, "input_batch", {OnnxAttr::i("start", 0), OnnxAttr::i("end", 1)})},
                               "n");
  const std::string n1 = m.node("Reshape", {n, m.int64s("minus_one", {-1})}, "n_vector");
  const std::string target = m.node("Concat", {n1, m.int64s("features", {36})}, "view_shape", {OnnxAttr::i("axis", 0)});
  const std::string flat = m.node("Reshape", {dropped, target}, "view", {OnnxAttr::i("allowzero", 1)});
  m.output(m.node("Gemm", {flat, m.normal("fc.weight", {3, 36}, 0.3f), m.normal("fc.bias", {3}, 0.1f)}, "logits",
                  {OnnxAttr::i("transB", 1)}),
           3);
  return m;
}

TEST(OnnxTorchForms, TheDynamoExportersZeroBiasViewAndTrainingModeNodesImport) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const OnnxTestModel m = dynamo_forms(seed), twin = dynamo_forms(seed, false);
  testing::TempDir dir;
  const std::vector<testing::ImportedRun> runs = testing::run_imported({{"dynamo_forms_eval", &twin}}, dir, seed);
  ASSERT_EQ(runs.size(), 1u);
  m.save(dir.file("dynamo_forms.onnx"));
  testing::ImportedRun r = runs[0];  // the twin's input and onnxruntime's logits; the training file's model
  r.model = import_onnx(dir.file("dynamo_forms.onnx"));
  CompileOptions o;
  o.batch = int(r.shape[0]);
  Executable exe(compile(r.model.blueprint, o), seed + 1);
  load_imported_weights(exe, r.model);
  r.kiln = testing::kiln_logits(exe, r.x, r.shape);
  // The zero bias is no parameter (PyTorch's state_dict has no conv.bias): the convolution fuses with
  // its BatchNorm and ReLU, and the weights are the convolution's, BatchNorm's four and the head's two.
  std::vector<std::string> names;
  for (const NamedTensor& t : r.model.weights) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                             "bn.running_var", "fc.weight", "fc.bias"}));
  EXPECT_EQ(testing::compiled_layers(r.model, LayerKind::CBR).size(), 1u);
  const std::vector<Layer> dropout = testing::compiled_layers(r.model, LayerKind::Dropout);
  ASSERT_EQ(dropout.size(), 1u);
  EXPECT_FLOAT_EQ(attrs_of<DropoutAttrs>(dropout[0]).p, 0.3f);
  // In evaluation BatchNorm reads its running statistics and Dropout passes its input: the eval-mode
  // twin's logits in onnxruntime.
  testing::expect_onnxruntime_logits(r);
}

// input (N, 4, 5, 5) -> Conv 1x1 (4) -> x + stochastic_depth(x) -> GlobalAveragePool -> Flatten ->
// Gemm. `dynamo`: the dynamo exporter's form (Expand of a zero, Cast, CastLike), else the
// TorchScript exporter's (ConstantOfShape, Cast). `per_channel` draws one value per channel
// instead (N, C, 1, 1), which is not stochastic depth's row mode; `threshold` is the Less's
// constant (q, the divisor, is 0.8).
OnnxTestModel stochastic_depth_model(uint32_t seed, bool dynamo, bool per_channel = false, float threshold = 0.8f) {
  OnnxTestModel m(4, 5, 5, seed, 17);
  const std::string x = m.node("Conv", {"input", m.conv_weight("conv.weight", 4, 4, 1, 1)}, "conv");
  const std::string batch = m.node("Shape", {x}, "x_batch", {OnnxAttr::i("start", 0), OnnxAttr::i("end", 1)});
  const std::string shape = m.node("Concat", {batch, m.int64s("rest", per_channel ? std::vector<int64_t>{4, 1, 1} : std::vector<int64_t>{1, 1, 1})},
                                   "noise_shape", {OnnxAttr::i("axis", 0)});
  std::string like, mask;
  const std::string q = m.scalar("survival", threshold);
  if (dynamo) {
    const std::string empty = m.node("Expand", {m.scalar("zero", 0.f), shape}, "empty");
    like = m.node("Cast", {empty}, "empty_float", {OnnxAttr::i("to", onnx::TensorProto::FLOAT)});
    const std::string rands = m.node("RandomUniformLike", {like}, "rands", {OnnxAttr::f("low", 0.f), OnnxAttr::f("high", 1.f)});
    const std::string sampled = m.node("Less", {rands, m.node("CastLike", {q, rands}, "q_like")}, "sampled");
    mask = m.node("CastLike", {sampled, empty}, "bernoulli");
  } else {
    like = m.node("ConstantOfShape", {shape}, "zeros");
    const std::string rands = m.node("RandomUniformLike", {like}, "rands", {OnnxAttr::i("dtype", onnx::TensorProto::FLOAT)});
    mask = m.node("Cast", {m.node("Less", {rands, q}, "sampled")}, "bernoulli", {OnnxAttr::i("to", onnx::TensorProto::FLOAT)});
  }
  const std::string noise = m.node("Div", {mask, m.scalar("divisor", 0.8f)}, "noise");
  const std::string branch = m.node("Mul", {x, noise}, "stochastic_depth");
  const std::string sum = m.node("Add", {branch, "input"}, "residual");
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {sum}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {2, 4}, 0.5f)}, "logits", {OnnxAttr::i("transB", 1)}), 2);
  return m;
}

TEST(OnnxTorchForms, StochasticDepthAsBothExportersWriteItBecomesKilnsLayer) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  for (const bool dynamo : {false, true}) {
    SCOPED_TRACE(dynamo ? "dynamo" : "torchscript");
    const std::string file = dir.file(dynamo ? "dynamo.onnx" : "torchscript.onnx");
    stochastic_depth_model(3, dynamo).save(file);
    const ImportedModel m = import_onnx(file);
    const std::vector<Layer> drops = testing::compiled_layers(m, LayerKind::StochasticDepth);
    ASSERT_EQ(drops.size(), 1u);
    EXPECT_NEAR(attrs_of<StochasticDepthAttrs>(drops[0]).p, 0.2f, 1e-6f);
    // In evaluation stochastic depth is the identity: the logits of the same network without it.
    CompileOptions o;
    o.batch = 2;
    Executable exe(compile(m.blueprint, o), 1);
    load_imported_weights(exe, m);
    const Shape shape = {2, 4, 5, 5};
    const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 4);
    const std::vector<float> logits = testing::kiln_logits(exe, x, shape);
    // The same by hand: fc(mean over positions of (conv(x) + x)).
    std::vector<float> conv_w, fc_w;
    for (const NamedTensor& t : m.weights) {
      std::vector<float> v(t.data.size() / 4);
      std::memcpy(v.data(), t.data.data(), t.data.size());
      (t.name == "conv.weight" ? conv_w : fc_w) = v;
    }
    ASSERT_EQ(conv_w.size(), 16u);
    ASSERT_EQ(fc_w.size(), 8u);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 2; ++k) {
        double want = 0;
        for (int64_t c = 0; c < 4; ++c) {
          double mean = 0;
          for (int64_t p = 0; p < 25; ++p) {
            double v = x[size_t((n * 4 + c) * 25 + p)];
            for (int64_t ci = 0; ci < 4; ++ci) v += conv_w[size_t(c * 4 + ci)] * x[size_t((n * 4 + ci) * 25 + p)];
            mean += v / 25;
          }
          want += fc_w[size_t(k * 4 + c)] * mean;
        }
        EXPECT_NEAR(logits[size_t(n * 2 + k)], want, 1e-5 * (1 + std::abs(want)));
      }
  }
  // Not the pattern: a draw per channel, or a threshold that is not the divisor (the noise then is
  // not Bernoulli(q) / q). Neither imports as stochastic depth; the random nodes are refused.
  for (const bool per_channel : {true, false}) {
    const std::string file = dir.file(per_channel ? "per_channel.onnx" : "threshold.onnx");
    stochastic_depth_model(3, false, per_channel, per_channel ? 0.8f : 0.7f).save(file);
    const std::string error = testing::error_of([&] { import_onnx(file); });
    EXPECT_NE(error, "") << (per_channel ? "per channel" : "threshold");
    std::printf("%s: %s\n", per_channel ? "per channel" : "threshold", error.c_str());
  }
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
