// kiln export --onnx of zoo models, BatchNorm kept, imported back: the same fused program (kinds,
// shapes and parameter shapes layer by layer, the CBR, conv_bn and bn_add_relu fusions included),
// the parameters under the same PyTorch names, and the same logits from the file's weights. A
// folded export comes back as biased convolutions with its note.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "export/onnx_runner.h"
#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/onnx_import.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// A layer as the round trip must keep it: dropout and stochastic depth are the identity in the
// eval-mode graph an export writes, so they do not come back.
struct LayerView {
  LayerKind kind;
  Shape out;
  std::vector<Shape> params;
};

std::vector<LayerView> layer_views(const Program& p) {
  std::map<std::string, std::vector<Shape>> params;  // by layer (a tensor's name up to its last dot)
  for (int id : p.params) {
    const TensorSpec& t = p.tensors[size_t(id)];
    params[t.name.substr(0, t.name.rfind('.'))].push_back(t.shape);
  }
  std::vector<LayerView> out;
  for (const Layer& l : p.graph.layers) {
    if (l.kind == LayerKind::Dropout || l.kind == LayerKind::StochasticDepth) continue;
    LayerView v{l.kind, l.out_shape, {}};
    for (const std::string& owner : {l.name, l.conv_name, l.bn_name}) {
      const auto it = params.find(owner);
      if (it == params.end()) continue;
      v.params.insert(v.params.end(), it->second.begin(), it->second.end());
      params.erase(it);
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::set<std::string> torch_name_set(const Program& p) {
  std::set<std::string> names;
  for (const auto& [kiln_name, torch_name] : torch_names(p)) names.insert(torch_name);
  return names;
}

int count_kind(const Program& p, LayerKind kind) { return p.graph.count(kind); }

class ZooImport : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooImport, AnExportWithBatchNormKeptImportsAsTheSameFusedProgramWithTheSameLogits) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::by_name(GetParam(), 10);
  const int side = testing::zoo_test_side(bp);
  CompileOptions o;
  o.batch = 2;
  o.input_hwc = {side, side, bp.input_hwc()->at(2)};
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Executable original(compile(bp, o), seed);
  testing::randomize_batch_norms(original, seed + 1);
  const Shape shape = {o.batch, o.input_hwc[2], side, side};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), seed + 2);
  testing::calibrate_batch_norms(original, x, shape, seed + 3);
  const std::vector<float> want = testing::kiln_logits(original, x, shape);

  testing::TempDir dir;
  const std::string file = dir.file(GetParam() + ".onnx");
  OnnxExportOptions e;
  e.fold_bn = false;
  e.info.model = bp.name();
  export_onnx(original, file, e);
  const ImportedModel m = import_onnx(file);
  EXPECT_EQ(m.blueprint.name(), bp.name());  // from the metadata kiln wrote
  EXPECT_EQ(m.sha256.size(), 64u);
  // The note on a model without BatchNorm is there exactly when the model has none (SqueezeNet).
  const Program& op = original.program();
  const bool has_bn = op.graph.count(LayerKind::BatchNorm) + op.graph.count(LayerKind::CBR) > 0;
  const bool noted = std::any_of(m.notes.begin(), m.notes.end(), [](const std::string& n) {
    return n.find("no BatchNormalization node") != std::string::npos;
  });
  EXPECT_EQ(noted, !has_bn);

  // Another seed: every weight and statistic must come from the file.
  Executable imported(compile(m.blueprint, o), seed + 4);
  const TorchWeightsLoaded loaded = load_imported_weights(imported, m);
  EXPECT_EQ(size_t(loaded.tensors), m.weights.size());

  // (a) The same program: layer kinds (the fusions among them), shapes and parameters in order.
  const std::vector<LayerView> a = layer_views(original.program()), b = layer_views(imported.program());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(layer_kind_name(a[i].kind), std::string(layer_kind_name(b[i].kind))) << "layer " << i << " ('"
                                                                                  << imported.program().graph.layers[i].name << "')";
    EXPECT_EQ(a[i].out, b[i].out) << "layer " << i;
    EXPECT_EQ(a[i].params, b[i].params) << "layer " << i;
  }
  EXPECT_EQ(count_kind(imported.program(), LayerKind::CBR), count_kind(original.program(), LayerKind::CBR));
  // The parameters and statistics under the same PyTorch names: checkpoints and re-exports keep them.
  EXPECT_EQ(torch_name_set(imported.program()), torch_name_set(original.program()));

  // (b) The same logits: the same fused program on the same weights, so the same arithmetic.
  const std::vector<float> got = testing::kiln_logits(imported, x, shape);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(testing::logit_gap(got, want), 0.0);
  // The comparison catches one wrong weight: the first convolution's first two filters swapped.
  ImportedModel wrong = m;
  NamedTensor& w = *std::find_if(wrong.weights.begin(), wrong.weights.end(),
                                 [](const NamedTensor& t) { return t.shape.size() == 4; });
  const size_t filter = w.data.size() / size_t(w.shape[0]);
  std::rotate(w.data.begin(), w.data.begin() + std::ptrdiff_t(filter), w.data.begin() + std::ptrdiff_t(2 * filter));
  load_imported_weights(imported, wrong);
  const double wrong_gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
  EXPECT_GT(wrong_gap, 0.0);
  std::printf("%s: %zu layers, %d CBR; logits equal; two filters swapped: gap %.2e\n", GetParam().c_str(), b.size(),
              count_kind(imported.program(), LayerKind::CBR), wrong_gap);
}

INSTANTIATE_TEST_SUITE_P(ZooModels, ZooImport,
                         ::testing::Values("resnet18", "mobilenet_v2", "squeezenet1_1", "efficientnet_b0", "densenet121",
                                           "googlenet"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Trained as kiln's own: two SGD steps (momentum, weight decay, BatchNorm in training mode) of the
// imported model from the file's weights and of the zoo model from the same weights give the same
// losses and the same parameters and running statistics, bit for bit (the same fused program). For
// the models without dropout or stochastic depth, which an eval-mode export leaves out.
class ZooImportTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooImportTraining, TrainsStepForStepAsTheZooModel) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::by_name(GetParam(), 10);
  const int side = testing::zoo_test_side(bp);
  CompileOptions o;
  o.batch = 2;
  o.input_hwc = {side, side, bp.input_hwc()->at(2)};
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Executable original(compile(bp, o), seed);
  ASSERT_EQ(original.program().graph.count(LayerKind::Dropout), 0);
  testing::randomize_batch_norms(original, seed + 1);
  testing::TempDir dir;
  OnnxExportOptions e;
  e.fold_bn = false;
  export_onnx(original, dir.file("model.onnx"), e);
  const ImportedModel m = import_onnx(dir.file("model.onnx"));
  Executable imported(compile(m.blueprint, o), seed + 2);
  load_imported_weights(imported, m);

  const Shape nchw = {o.batch, o.input_hwc[2], side, side};
  std::mt19937 rng(seed + 3);
  std::uniform_int_distribution<int32_t> label(0, 9);
  for (int64_t step = 0; step < 2; ++step) {
    const std::vector<float> x = testing::nhwc_of(testing::normal_floats(size_t(numel(nchw)), seed + 4 + uint32_t(step)), nchw);
    const std::vector<int32_t> labels = {label(rng), label(rng)};
    for (Executable* exe : {&original, &imported}) {
      exe->write(exe->program().input, x.data(), x.size() * sizeof(float));
      exe->write(exe->program().label, labels.data(), labels.size() * sizeof(int32_t));
      exe->run_step({0.05f, step, 11});
    }
    EXPECT_EQ(original.read<float>(original.program().loss), imported.read<float>(imported.program().loss)) << "step " << step;
  }
  // Every parameter and running statistic, by its PyTorch name (the imported model's kiln name).
  int compared = 0;
  for (const auto& [kiln_name, torch_name] : torch_names(original.program())) {
    EXPECT_EQ(original.read<float>(original.id(kiln_name)), imported.read<float>(imported.id(torch_name))) << torch_name;
    ++compared;
  }
  EXPECT_EQ(size_t(compared), m.weights.size());
  // The comparison catches a step taken with another learning rate.
  imported.run_step({0.051f, 2, 11});
  original.run_step({0.05f, 2, 11});
  const auto& [first, first_torch] = *torch_names(original.program()).begin();
  EXPECT_NE(original.read<float>(original.id(first)), imported.read<float>(imported.id(first_torch)));
}

INSTANTIATE_TEST_SUITE_P(ZooModels, ZooImportTraining, ::testing::Values("resnet18", "densenet121"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// An eval-mode export folds every BatchNorm into its convolution: the import has convolutions with
// biases and no BatchNorm (so no CBR fusion), says so, and gives the original's logits within the
// folding's rounding (onnx_export_test.cpp's bound and reasoning).
TEST(ZooImportFolded, AFoldedExportImportsAsBiasedConvolutionsWithItsNote) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::resnet18(10);
  CompileOptions o;
  o.batch = 2;
  o.input_hwc = {64, 64, 3};
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Executable original(compile(bp, o), seed);
  testing::randomize_batch_norms(original, seed + 1);
  const Shape shape = {2, 3, 64, 64};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), seed + 2);
  testing::calibrate_batch_norms(original, x, shape, seed + 3);
  const std::vector<float> want = testing::kiln_logits(original, x, shape);
  testing::TempDir dir;
  export_onnx(original, dir.file("folded.onnx"));
  const ImportedModel m = import_onnx(dir.file("folded.onnx"));
  ASSERT_FALSE(m.notes.empty());
  EXPECT_NE(m.notes[0].find("no BatchNormalization node among 20 convolutions"), std::string::npos) << m.notes[0];
  EXPECT_NE(m.notes[0].find("training=torch.onnx.TrainingMode.TRAINING"), std::string::npos) << m.notes[0];
  Executable imported(compile(m.blueprint, o), seed + 4);
  load_imported_weights(imported, m);
  const Program& p = imported.program();
  EXPECT_EQ(count_kind(p, LayerKind::BatchNorm) + count_kind(p, LayerKind::CBR), 0);
  EXPECT_EQ(count_kind(p, LayerKind::Conv), 20);
  for (const Layer& l : p.graph.layers)
    if (l.kind == LayerKind::Conv) {
      EXPECT_TRUE(attrs_of<ConvAttrs>(l).bias) << l.name;
    }
  const double gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
  EXPECT_LT(gap, 1e-4);
  // A folding that misread one statistic lands far outside: the first convolution's bias moved by
  // one running standard deviation's worth (0.5).
  ImportedModel wrong = m;
  for (NamedTensor& t : wrong.weights)
    if (t.shape.size() == 1) {
      float v;
      std::memcpy(&v, t.data.data(), 4);
      v += 0.5f;
      std::memcpy(t.data.data(), &v, 4);
      break;
    }
  load_imported_weights(imported, wrong);
  const double wrong_gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
  EXPECT_GT(wrong_gap, 1e-3);
  std::printf("folded resnet18: gap %.2e (bound 1e-4); one bias off by 0.5: %.2e\n", gap, wrong_gap);
}

}  // namespace
}  // namespace kiln
