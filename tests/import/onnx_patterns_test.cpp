// The activations exporters write as several nodes come back as kiln's one activation (so they fuse
// and train as kiln's own), and give onnxruntime's logits for the file: x * Sigmoid(x) as SiLU in
// either order, x * HardSigmoid(x) and HardSwish as hard-swish, the Erf form of GELU as PyTorch,
// kiln's exporter and a third order write it, Clip(0, 6) as ReLU6 (inputs and, before opset 11,
// attributes), Gelu (opset 20) exact and tanh. What is not the pattern stays apart or is refused.
#if KILN_TEST_ONNX_PROTOBUF
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "import_runner.h"

namespace kiln {
namespace {

using testing::OnnxAttr;
using testing::OnnxTestModel;

using Activation = std::function<std::string(OnnxTestModel&, const std::string&)>;

// These models hold one activation between a 3x3 convolution and a pooled linear head: kiln and
// onnxruntime gave logits 0.7e-7 to 2.3e-7 apart (of the largest logit) over the cases below, so
// 2e-6 leaves about ten times that for other CPUs' kernels, and is what tells the exact GELU from its tanh
// approximation (6e-5 to 2e-4 apart over six seeds), which the layer tests' 5e-5 would not.
constexpr double kPatternBound = 2e-6;

// input (N, 4, 6, 6) -> Conv 3x3 pad 1 (8, bias) -> the activation -> GlobalAveragePool -> Flatten
// -> Gemm (5 classes).
OnnxTestModel with_activation(uint32_t seed, const Activation& act, int opset = 17) {
  OnnxTestModel m(4, 6, 6, seed, opset);
  const std::string conv = m.node("Conv", {"input", m.conv_weight("conv.weight", 8, 4, 3, 3), m.normal("conv.bias", {8}, 0.3f)},
                                  "conv", {OnnxAttr::ints("kernel_shape", {3, 3}), OnnxAttr::ints("pads", {1, 1, 1, 1})});
  const std::string y = act(m, conv);
  const std::string pooled = m.node("Flatten", {m.node("GlobalAveragePool", {y}, "pool")}, "flat", {OnnxAttr::i("axis", 1)});
  m.output(m.node("Gemm", {pooled, m.normal("fc.weight", {5, 8}, 0.5f), m.normal("fc.bias", {5}, 0.1f)}, "logits",
                  {OnnxAttr::i("transB", 1)}),
           5);
  return m;
}

std::string silu(OnnxTestModel& m, const std::string& x) { return m.node("Mul", {x, m.node("Sigmoid", {x}, "sig")}, "act"); }
std::string silu_swapped(OnnxTestModel& m, const std::string& x) {
  return m.node("Mul", {m.node("Sigmoid", {x}, "sig"), x}, "act");
}
std::string hardswish_pattern(OnnxTestModel& m, const std::string& x) {
  const std::string g = m.node("HardSigmoid", {x}, "hsig", {OnnxAttr::f("alpha", 1.f / 6.f), OnnxAttr::f("beta", 0.5f)});
  return m.node("Mul", {x, g}, "act");
}
std::string hardswish_op(OnnxTestModel& m, const std::string& x) { return m.node("HardSwish", {x}, "act"); }
// torch.onnx.export of nn.GELU() below opset 20: ((x * (1 + erf(x / sqrt(2)))) * 0.5.
std::string gelu_torch(OnnxTestModel& m, const std::string& x) {
  const std::string erf = m.node("Erf", {m.node("Div", {x, m.scalar("sqrt2", 1.4142135f)}, "div")}, "erf");
  const std::string one_plus = m.node("Add", {erf, m.scalar("one", 1.f)}, "add");
  return m.node("Mul", {m.node("Mul", {x, one_plus}, "mul"), m.scalar("half", 0.5f)}, "act");
}
// kiln's exporter: (x * 0.5) * (1 + erf(x * (1 / sqrt(2)))).
std::string gelu_kiln(OnnxTestModel& m, const std::string& x) {
  const std::string erf = m.node("Erf", {m.node("Mul", {x, m.scalar("rsqrt2", 0.70710677f)}, "scaled")}, "erf");
  const std::string half_x = m.node("Mul", {x, m.scalar("half", 0.5f)}, "half_x");
  return m.node("Mul", {half_x, m.node("Add", {m.scalar("one", 1.f), erf}, "one_plus")}, "act");
}
// x * ((1 + erf(x / sqrt(2))) * 0.5).
std::string gelu_third(OnnxTestModel& m, const std::string& x) {
  const std::string erf = m.node("Erf", {m.node("Div", {x, m.scalar("sqrt2", 1.4142135f)}, "div")}, "erf");
  const std::string half = m.node("Mul", {m.node("Add", {erf, m.scalar("one", 1.f)}, "add"), m.scalar("half", 0.5f)}, "halved");
  return m.node("Mul", {x, half}, "act");
}
std::string gelu_op(OnnxTestModel& m, const std::string& x) { return m.node("Gelu", {x}, "act"); }
std::string gelu_tanh_op(OnnxTestModel& m, const std::string& x) {
  return m.node("Gelu", {x}, "act", {OnnxAttr::s("approximate", "tanh")});
}
std::string relu6_inputs(OnnxTestModel& m, const std::string& x) {
  return m.node("Clip", {x, m.scalar("zero", 0.f), m.scalar("six", 6.f)}, "act");
}
std::string relu6_attributes(OnnxTestModel& m, const std::string& x) {
  return m.node("Clip", {x}, "act", {OnnxAttr::f("min", 0.f), OnnxAttr::f("max", 6.f)});
}
std::string relu_clip(OnnxTestModel& m, const std::string& x) { return m.node("Clip", {x, m.scalar("zero", 0.f)}, "act"); }
// A gate that is not x's own sigmoid: Sigmoid and Mul stay two layers.
std::string sigmoid_gate(OnnxTestModel& m, const std::string& x) {
  const std::string other = m.node("Relu", {x}, "other");
  return m.node("Mul", {x, m.node("Sigmoid", {other}, "sig")}, "act");
}

TEST(OnnxPatterns, ComposedActivationsBecomeKilnsOwnAndGiveOnnxruntimesLogits) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Case {
    std::string name;
    Activation act;
    std::vector<std::string> activations;  // what kiln's program holds
    int opset = 17;
  };
  const std::vector<Case> cases = {
      {"silu", silu, {"silu"}},
      {"silu_swapped", silu_swapped, {"silu"}},
      {"hardswish_pattern", hardswish_pattern, {"hardswish"}},
      {"hardswish_op", hardswish_op, {"hardswish"}},
      {"gelu_torch", gelu_torch, {"gelu"}},
      {"gelu_kiln", gelu_kiln, {"gelu"}},
      {"gelu_third", gelu_third, {"gelu"}},
      {"gelu_op", gelu_op, {"gelu"}, 20},
      {"gelu_tanh_op", gelu_tanh_op, {"gelu_tanh"}, 20},
      {"relu6_inputs", relu6_inputs, {"relu6"}},
      {"relu6_attributes", relu6_attributes, {"relu6"}, 10},
      {"relu_clip", relu_clip, {}},
      {"sigmoid_gate", sigmoid_gate, {"sigmoid"}},
  };
  std::vector<OnnxTestModel> models;
  for (const Case& c : cases) models.push_back(with_activation(seed, c.act, c.opset));
  std::vector<std::pair<std::string, const OnnxTestModel*>> named;
  for (size_t i = 0; i < cases.size(); ++i) named.push_back({cases[i].name, &models[i]});
  testing::TempDir dir;
  const std::vector<testing::ImportedRun> runs = testing::run_imported(named, dir, seed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i].name);
    EXPECT_EQ(testing::activations_of(runs[i].model), cases[i].activations);
    const double gap = testing::logit_gap(runs[i].kiln, runs[i].onnxruntime);
    EXPECT_LT(gap, kPatternBound);
    std::printf("%s: gap %.2e\n", runs[i].name.c_str(), gap);
  }
  // The bound tells the activations apart: the exact GELU's kiln logits against onnxruntime's for
  // the tanh approximation (the same weights: one seed), SiLU's against hard-swish's.
  const auto run = [&](const char* name) -> const testing::ImportedRun& {
    return *std::find_if(runs.begin(), runs.end(), [&](const testing::ImportedRun& r) { return r.name == name; });
  };
  const double gelu_apart = testing::logit_gap(run("gelu_torch").kiln, run("gelu_tanh_op").onnxruntime);
  const double silu_apart = testing::logit_gap(run("silu").kiln, run("hardswish_op").onnxruntime);
  EXPECT_GT(gelu_apart, kPatternBound);
  EXPECT_GT(silu_apart, kPatternBound);
  std::printf("exact GELU vs tanh GELU: %.2e; SiLU vs hard-swish: %.2e\n", gelu_apart, silu_apart);
  // The sigmoid gate is two layers, a sigmoid and a Mul.
  EXPECT_EQ(testing::compiled_layers(run("sigmoid_gate").model, LayerKind::Mul).size(), 1u);
}

TEST(OnnxPatterns, AlmostAPatternIsRefusedNamingItsNodes) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  // GELU with 0.6 for 0.5: no pattern; its Div, Erf and the Muls by constants are refused together.
  const OnnxTestModel wrong_half = with_activation(1, [](OnnxTestModel& m, const std::string& x) {
    const std::string erf = m.node("Erf", {m.node("Div", {x, m.scalar("sqrt2", 1.4142135f)}, "div")}, "erf");
    const std::string one_plus = m.node("Add", {erf, m.scalar("one", 1.f)}, "add");
    return m.node("Mul", {m.node("Mul", {x, one_plus}, "mul"), m.scalar("not_half", 0.6f)}, "act");
  });
  wrong_half.save(dir.file("wrong_half.onnx"));
  const std::string e = testing::error_of([&] { import_onnx(dir.file("wrong_half.onnx")); });
  EXPECT_NE(e.find("nodes kiln cannot train"), std::string::npos) << e;
  for (const char* part : {"Div node 'div'", "Erf node 'erf'", "Add node 'add'", "Mul node 'act'"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " in:\n" << e;
  // x * HardSigmoid(x) with ONNX's default alpha (0.2) is not PyTorch's hard-swish: the HardSigmoid
  // is refused naming its attributes.
  const OnnxTestModel onnx_hardsigmoid = with_activation(1, [](OnnxTestModel& m, const std::string& x) {
    return m.node("Mul", {x, m.node("HardSigmoid", {x}, "hsig")}, "act");
  });
  onnx_hardsigmoid.save(dir.file("hardsigmoid.onnx"));
  const std::string h = testing::error_of([&] { import_onnx(dir.file("hardsigmoid.onnx")); });
  EXPECT_NE(h.find("HardSigmoid node 'hsig': attributes alpha 0.2 and beta 0.5"), std::string::npos) << h;
  // The sigmoid's output read elsewhere too: SiLU would lose it, so Sigmoid and Mul stay.
  const OnnxTestModel shared = with_activation(1, [](OnnxTestModel& m, const std::string& x) {
    const std::string s = m.node("Sigmoid", {x}, "sig");
    return m.node("Add", {m.node("Mul", {x, s}, "mul"), s}, "act");
  });
  shared.save(dir.file("shared.onnx"));
  EXPECT_EQ(testing::activations_of(import_onnx(dir.file("shared.onnx"))), std::vector<std::string>{"sigmoid"});
}

}  // namespace
}  // namespace kiln
#endif  // KILN_TEST_ONNX_PROTOBUF
