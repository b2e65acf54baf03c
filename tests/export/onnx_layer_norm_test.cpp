// nn.LayerNorm's ONNX export: LayerNormalization (opset 17, axis -1) over a feature map's channels,
// between the transposes that bring the NCHW graph's channels last and back, and over flat rows
// without them, each with its own epsilon and with weights moved off their ones and zeros.
// onnxruntime must give kiln's logits within the layer tests' bound (onnx_layers_test.cpp's); the file
// must hold the nodes, and the weights under PyTorch's names; and a file whose layer norm weight is
// reversed (an exporter misreading the channels' order) must land far outside the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/export.h"
#include "onnx_runner.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// onnx_layers_test.cpp's bound for its small models (onnx_export_test.cpp says why 5e-5).
constexpr double kBound = 5e-5;

// ConvNeXt's pattern (a biased convolution, LayerNorm2d with eps 1e-6, a linear layer at every
// position, GELU), then the flattened features normalized as rows (eps 1e-5; the flatten feeds no
// linear layer, so it is exported in kiln's H,W,C order) before the head.
Blueprint normalized() {
  Blueprint m("layer_norm");
  m.input(6, 5, 3).conv(8, 3, 1, 1, true, "stem").layer_norm(1e-6f, "ln").fc(12, true, "pw").gelu(false, "act");
  m.flatten("flat").layer_norm(1e-5f, "ln_rows").fc(5, true, "head");
  return m;
}

void write_floats(Executable& exe, const std::string& tensor, const std::vector<float>& v) {
  exe.write(exe.id(tensor), v.data(), v.size() * sizeof(float));
}

TEST(OnnxLayers, LayerNorm) {
  CompileOptions o;
  o.batch = 3;
  Executable exe(compile(normalized(), o), 21);
  std::mt19937 rng(41);
  std::normal_distribution<float> spread(0.f, 0.5f);
  for (const char* ln : {"ln", "ln_rows"}) {
    std::vector<float> w = exe.read<float>(exe.id(std::string(ln) + ".weight")), b(w.size());
    for (float& v : w) v = 1.f + spread(rng);
    for (float& v : b) v = spread(rng);
    write_floats(exe, std::string(ln) + ".weight", w);
    write_floats(exe, std::string(ln) + ".bias", b);
  }
  const Shape shape = {3, 3, 6, 5};  // NCHW
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 42);
  const std::vector<float> want = testing::kiln_logits(exe, x, shape);

  testing::TempDir dir;
  const std::string right = dir.file("layer_norm.onnx"), reversed = dir.file("layer_norm.reversed.onnx");
  export_onnx(exe, right);
  const std::vector<float> weight = exe.read<float>(exe.id("ln.weight"));
  std::vector<float> backwards = weight;
  std::reverse(backwards.begin(), backwards.end());
  write_floats(exe, "ln.weight", backwards);
  export_onnx(exe, reversed);
  write_floats(exe, "ln.weight", weight);
  EXPECT_EQ(testing::kiln_logits(exe, x, shape), want) << "the weight was not restored";

  std::vector<testing::OnnxRun> runs = {{right, x, shape, nullptr, {}, {}}, {reversed, x, shape, nullptr, {}, {}}};
  testing::run_onnx(runs, dir.path());
  ASSERT_FALSE(::testing::Test::HasFailure());
  const double gap = testing::logit_gap(runs[0].logits, want), wrong = testing::logit_gap(runs[1].logits, want);
  EXPECT_LT(gap, kBound);
  EXPECT_GT(wrong, 20 * kBound) << "a reversed layer norm weight moves the logits too little";
  std::printf("layer_norm.onnx: gap %.2e; reversed weight: %.2e\n", gap, wrong);

  const nlohmann::json& report = runs[0].report;
  EXPECT_EQ(report["opset"], 17);
  EXPECT_EQ(report["ops"]["LayerNormalization"], 2);
  // ln's two, and the flatten's to kiln's H,W,C order (its consumer is no linear layer).
  EXPECT_EQ(report["ops"]["Transpose"], 3);
  EXPECT_EQ(report["initializers"]["ln.weight"], nlohmann::json::array({8}));
  EXPECT_EQ(report["initializers"]["ln.bias"], nlohmann::json::array({8}));
  EXPECT_EQ(report["initializers"]["ln_rows.weight"], nlohmann::json::array({6 * 5 * 12}));
  EXPECT_EQ(report["initializers"]["ln_rows.bias"], nlohmann::json::array({6 * 5 * 12}));
}

}  // namespace
}  // namespace kiln
