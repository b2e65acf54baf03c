// LayerScale's ONNX export: Mul(layer_scale, x) on the NCHW graph, its (C, 1, 1) initializer
// broadcast over a map's height and width and its (C) over flat rows, as PyTorch broadcasts them.
// onnxruntime must give kiln's eval-mode logits within onnx_layers_test.cpp's bound, for a model
// compiled fused and unfused and exported with BatchNorm folded and kept; and kiln's logits with
// the scale's channels in reverse order must land outside that bound, so an export that misplaced
// the factors would be caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/export.h"
#include "onnx_runner.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using testing::OnnxRun;

constexpr double kBound = 5e-5;  // onnx_layers_test.cpp's

// The scale on a CBR's map (ConvNeXt's place: before the block's residual add), read by a
// convolution, and on a linear layer's rows, read by a ReLU.
Blueprint scaled_model() {
  Blueprint m("layer_scale");
  m.input(7, 6, 3).cbr(8, 3, 1, 1, "stem").layer_scale(1e-6f, "features.1.0");
  m.conv(8, 3, 2, 1, true, "mix").flatten("flatten").fc(12, true, "fc1");
  m.layer_scale(0.1f, "rows").relu("act").fc(4, true, "head");
  return m;
}

const char* const kScales[] = {"features.1.0.layer_scale", "rows.layer_scale"};

// Each factor U(0.5, 1.5) with a random sign: far from the initial ones and from each other.
void randomize_scales(Executable& exe, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(0.5f, 1.5f);
  for (const char* name : kScales) {
    std::vector<float> v(size_t(numel(exe.program().tensors[size_t(exe.id(name))].shape)));
    for (float& f : v) f = (rng() & 1 ? 1.f : -1.f) * magnitude(rng);
    exe.write(exe.id(name), v.data(), v.size() * sizeof(float));
  }
}

// kiln's logits with the factors of scale `name` in reverse channel order (then put back).
std::vector<float> logits_with_reversed(Executable& exe, const char* name, const std::vector<float>& x,
                                        const Shape& shape) {
  const int id = exe.id(name);
  const std::vector<float> right = exe.read<float>(id);
  std::vector<float> reversed(right.rbegin(), right.rend());
  exe.write(id, reversed.data(), reversed.size() * sizeof(float));
  std::vector<float> logits = testing::kiln_logits(exe, x, shape);
  exe.write(id, right.data(), right.size() * sizeof(float));
  return logits;
}

TEST(OnnxLayerScale, MulOfTheScaleOnMapsAndRows) {
  testing::TempDir dir;
  std::vector<OnnxRun> runs;
  std::vector<std::vector<float>> want;
  std::vector<std::vector<std::vector<float>>> wrong;  // per case: with each scale reversed
  for (bool fuse : {true, false}) {
    CompileOptions o;
    o.batch = 3, o.fuse_cbr = fuse;
    Executable exe(compile(scaled_model(), o), fuse ? 21 : 22);
    ASSERT_EQ(exe.program().graph.count(LayerKind::LayerScale), 2);
    testing::randomize_batch_norms(exe, 41);
    randomize_scales(exe, 51);
    const Shape& in = exe.program().tensors[size_t(exe.program().input)].shape;
    const Shape shape = {in[0], in[3], in[1], in[2]};
    const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 61);
    want.push_back(testing::kiln_logits(exe, x, shape));
    wrong.push_back({});
    for (const char* name : kScales) wrong.back().push_back(logits_with_reversed(exe, name, x, shape));
    for (bool fold : {true, false}) {
      OnnxExportOptions options;
      options.fold_bn = fold;
      const std::string file =
          dir.file(fmt::format("layer_scale.{}.{}.onnx", fuse ? "fused" : "unfused", fold ? "folded" : "kept"));
      export_onnx(exe, file, options);
      runs.push_back({file, x, shape, nullptr, {}, {}});
    }
  }
  ASSERT_FALSE(::testing::Test::HasFailure());
  testing::run_onnx(runs, dir.path());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (size_t i = 0; i < runs.size(); ++i) {
    const OnnxRun& r = runs[i];
    const double gap = testing::logit_gap(r.logits, want[i / 2]);
    EXPECT_LT(gap, kBound) << r.model;
    std::vector<double> reversed;
    for (const std::vector<float>& w : wrong[i / 2]) reversed.push_back(testing::logit_gap(r.logits, w));
    for (double g : reversed) EXPECT_GT(g, 100 * kBound) << r.model;
    std::printf("%s: gap %.2e (scales reversed: map %.2e, rows %.2e)\n",
                std::filesystem::path(r.model).filename().c_str(), gap, reversed[0], reversed[1]);
    // The parameters as PyTorch holds them, multiplied in.
    EXPECT_EQ(r.report["initializers"]["features.1.0.layer_scale"], nlohmann::json({8, 1, 1})) << r.model;
    EXPECT_EQ(r.report["initializers"]["rows.layer_scale"], nlohmann::json({12})) << r.model;
    EXPECT_EQ(r.report["ops"]["Mul"], 2) << r.model;
    EXPECT_EQ(r.report["opset"], 17) << r.model;
  }
}

}  // namespace
}  // namespace kiln
