// Zoo models through ONNX and back, beyond the program and logits (onnx_zoo_round_trip_more_test.cpp
// holds those for every family): the imported model trains step for step as the zoo model, and a
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

int count_kind(const Program& p, LayerKind kind) { return p.graph.count(kind); }

// Trained as kiln's own: two SGD steps (momentum, weight decay, BatchNorm in training mode) of the
// imported model from the file's weights and of the zoo model from the same weights give the same
// losses and the same parameters and running statistics, bit for bit (the same fused program). For
// the models without dropout or stochastic depth (onnx_stochastic_depth_round_trip_test.cpp trains
// EfficientNet and ConvNeXt, whose stochastic depth the export keeps).
class ZooImportTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooImportTraining, TrainsStepForStepAsTheZooModel) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::by_name(GetParam(), 10);
  const CompileOptions o = testing::zoo_test_options(bp);
  const int side = o.input_hwc[0];
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
