// kiln export --onnx of zoo models of every family (issue 50, item 5), BatchNorm kept, imported back:
// the model's name from the metadata, the note on a model without BatchNorm exactly when it has none,
// the layer kinds in order (the CBR, conv_bn and bn_add_relu fusions included) with their shapes and
// parameter shapes, every BatchNorm's epsilon and momentum
// (MNASNet's 3e-4 and MobileNetV3's 0.01 are not ONNX's default), the PyTorch names, and the logits
// bit for bit from the file's weights. Each model at its smallest side (tests/export/onnx_runner.h),
// batch 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "export/onnx_runner.h"
#include "formats/torch/torch_layouts.h"
#include "import_runner.h"
#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/onnx_import.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// A layer as the round trip keeps it (dropout and stochastic depth are the identity in the
// eval-mode graph an export writes, so they do not come back).
struct KeptLayer {
  std::string name;
  LayerKind kind;
  Shape out;
  std::vector<Shape> params;
  std::optional<BatchNormAttrs> bn;  // a BatchNorm's, or a fused layer's BatchNorm's
};

std::vector<KeptLayer> kept_layers(const Program& p) {
  std::map<std::string, std::vector<Shape>> params;  // by layer (a tensor's name up to its last dot)
  for (int id : p.params) {
    const TensorSpec& t = p.tensors[size_t(id)];
    params[t.name.substr(0, t.name.rfind('.'))].push_back(t.shape);
  }
  std::vector<KeptLayer> out;
  for (const Layer& l : p.graph.layers) {
    if (l.kind == LayerKind::Dropout || l.kind == LayerKind::StochasticDepth) continue;
    KeptLayer v{l.name, l.kind, l.out_shape, {}, std::nullopt};
    if (const BatchNormAttrs* bn = l.attrs.find<BatchNormAttrs>()) v.bn = *bn;
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

// The one way the import legitimately differs: kiln's exporter writes a linear layer over a feature
// map (ConvNeXt's pointwise layers, nn.Linear on the channels-last map) as the 1x1 Conv it computes,
// and a 1x1 Conv in a file cannot be told from nn.Conv2d(C, K, 1), so it comes back as a conv: the
// same function, its weight (K, 1, 1, C) in kiln's layout ((K, C, 1, 1) in PyTorch's) where the
// zoo's fc has (K, C), under the same names.
bool linear_over_map_as_conv(const KeptLayer& zoo, const KeptLayer& imported) {
  if (zoo.kind != LayerKind::Linear || imported.kind != LayerKind::Conv || zoo.out.size() != 4) return false;
  if (zoo.params.empty() || imported.params.size() != zoo.params.size()) return false;
  const Shape& w = zoo.params[0];
  if (imported.params[0] != Shape{w[0], 1, 1, w[1]}) return false;
  return std::equal(zoo.params.begin() + 1, zoo.params.end(), imported.params.begin() + 1);
}

std::set<std::string> torch_name_set(const Program& p) {
  std::set<std::string> names;
  for (const auto& [kiln_name, torch_name] : torch_names(p)) names.insert(torch_name);
  return names;
}

class ZooImportMore : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooImportMore, AnExportWithBatchNormKeptImportsAsTheSameProgramWithTheSameLogits) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::by_name(GetParam(), 10);
  const CompileOptions o = testing::zoo_test_options(bp);
  const int side = o.input_hwc[0];
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
  const Program& op = original.program();
  // The note of a folded BatchNorm is for networks with no normalization at all (ConvNeXt has LayerNorm).
  const bool has_norm = op.graph.count(LayerKind::BatchNorm) + op.graph.count(LayerKind::CBR) +
                            op.graph.count(LayerKind::LayerNorm) + op.graph.count(LayerKind::GroupNorm) >
                        0;
  const bool noted = std::any_of(m.notes.begin(), m.notes.end(), [](const std::string& n) {
    return n.find("no BatchNormalization node") != std::string::npos;
  });
  EXPECT_EQ(noted, !has_norm);  // SqueezeNet has none
  Executable imported(compile(m.blueprint, o), seed + 4);  // another seed: every weight must come from the file
  EXPECT_EQ(size_t(load_imported_weights(imported, m).tensors), m.weights.size());

  const std::vector<KeptLayer> a = kept_layers(original.program()), b = kept_layers(imported.program());
  ASSERT_EQ(a.size(), b.size());
  int norms = 0, pointwise = 0;
  std::set<float> momenta;  // printed: MNASNet's and MobileNetV3's are not ONNX's default, so a dropped attribute fails
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i) + " '" + a[i].name + "'");
    EXPECT_EQ(a[i].out, b[i].out);
    if (linear_over_map_as_conv(a[i], b[i])) {
      ++pointwise;
    } else {
      EXPECT_EQ(std::string(layer_kind_name(a[i].kind)), layer_kind_name(b[i].kind));
      EXPECT_EQ(a[i].params, b[i].params);
    }
    ASSERT_EQ(a[i].bn.has_value(), b[i].bn.has_value());
    if (!a[i].bn) continue;
    EXPECT_EQ(a[i].bn->eps, b[i].bn->eps);
    EXPECT_EQ(a[i].bn->momentum, b[i].bn->momentum);
    momenta.insert(a[i].bn->momentum);
    ++norms;
  }
  EXPECT_EQ(torch_name_set(imported.program()), torch_name_set(original.program()));

  const std::vector<float> got = testing::kiln_logits(imported, x, shape);
  ASSERT_EQ(got.size(), want.size());
  // Bit for bit, except where a linear layer came back as a 1x1 conv: another kernel, another fp32
  // summation order: convnext_tiny's gaps measured 0 to 7.2e-8 over four seeds, bound 1e-5; two
  // filters swapped land 0.2 to 0.34 off.
  const double bound = pointwise > 0 ? 1e-5 : 0.0, gap = testing::logit_gap(got, want);
  EXPECT_LE(gap, bound);
  // The comparison catches one wrong weight: the first convolution's first two filters swapped.
  ImportedModel wrong = m;
  NamedTensor& w = *std::find_if(wrong.weights.begin(), wrong.weights.end(),
                                 [](const NamedTensor& t) { return t.shape.size() == 4; });
  const size_t filter = w.data.size() / size_t(w.shape[0]);
  std::rotate(w.data.begin(), w.data.begin() + std::ptrdiff_t(filter), w.data.begin() + std::ptrdiff_t(2 * filter));
  load_imported_weights(imported, wrong);
  const double wrong_gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
  EXPECT_GT(wrong_gap, 100 * bound);
  std::string momentum_list;
  for (const float mo : momenta) momentum_list += (momentum_list.empty() ? "" : ", ") + std::to_string(mo);
  std::printf("%s at %d: %zu layers, %d with a BatchNorm (momentum %s kept), %d linear layers over a map as 1x1 "
              "convs; logit gap %.2e (bound %.0e); two filters swapped: gap %.2e\n", GetParam().c_str(), side, b.size(), norms,
              momenta.empty() ? "-" : momentum_list.c_str(), pointwise, gap, bound, wrong_gap);
}

// AlexNet, whose flatten dropout reads, has its own test below (ZooImportAlexnet), a training step included.
INSTANTIATE_TEST_SUITE_P(ZooModels, ZooImportMore,
                         ::testing::Values("resnet18", "mobilenet_v2", "squeezenet1_1", "efficientnet_b0",
                                           "densenet121", "googlenet", "mnasnet0_5", "mobilenet_v3_small",
                                           "inception_v3", "regnet_y_400mf", "shufflenet_v2_x0_5", "convnext_tiny",
                                           "vgg11_bn"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// One training step's loss and every parameter's gradient, by PyTorch name (torch_names: the
// imported model's layers are named after the file's initializers, the zoo's after PyTorch's
// modules), from the NCHW batch `nchw` of shape `s` and its labels; dropout draws its masks from
// the step's seed, so two programs of the same layers draw the same ones.
struct StepGradients {
  float loss = 0.f;
  std::map<std::string, std::vector<double>> grads;
};

StepGradients step_gradients(Executable& exe, const std::vector<float>& nchw, const Shape& s,
                             const std::vector<int32_t>& labels) {
  const Program& p = exe.program();
  const std::vector<float> nhwc = testing::nhwc_of(nchw, s);
  exe.write(p.input, nhwc.data(), nhwc.size() * sizeof(float));
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  const StepScalars step{0.f, 0, 11};
  exe.run_forward(step);
  exe.run_backward(step);
  StepGradients out;
  out.loss = exe.read<float>(p.loss).at(0);
  const std::map<std::string, std::string> names = torch_names(p);
  for (int id : p.params) {
    const std::string& name = p.tensors[size_t(id)].name;
    out.grads[names.at(name)] = exe.gradient(name);
  }
  return out;
}

// The largest gradient difference over the largest gradient, across every parameter present in both.
double gradient_gap(const StepGradients& a, const StepGradients& b) {
  double worst = 0, scale = 0;
  for (const auto& [name, g] : b.grads) {
    const auto it = a.grads.find(name);
    if (it == a.grads.end() || it->second.size() != g.size()) return INFINITY;
    for (size_t i = 0; i < g.size(); ++i)
      worst = std::max(worst, std::abs(it->second[i] - g[i])), scale = std::max(scale, std::abs(g[i]));
  }
  return worst / std::max(scale, 1e-30);
}

// The imported weight of kiln tensor `kiln_name`, as the file held it: a linear layer's columns after
// a channels-last flatten put back from the C,H,W order the importer gave them into the file's
// H,W,C (`hwc`), what loading the file's columns as they stand gives.
void unreorder_columns(ImportedModel& m, const std::string& kiln_name, const Shape& hwc) {
  NamedTensor& w = *std::find_if(m.weights.begin(), m.weights.end(),
                                 [&](const NamedTensor& t) { return m.kiln_tensor.at(t.name) == kiln_name; });
  ASSERT_EQ(w.dtype, DType::F32);
  std::vector<float> v(w.data.size() / 4);
  std::memcpy(v.data(), w.data.data(), w.data.size());
  v = torch_layout::chw_columns_to_hwc(v, w.shape[0], hwc);
  std::memcpy(w.data.data(), v.data(), w.data.size());
}

bool has_reorder_note(const ImportedModel& m, const std::string& linear) {
  return std::any_of(m.notes.begin(), m.notes.end(), [&](const std::string& n) {
    return n.find("the linear layer '" + linear + "' reads the Flatten node") != std::string::npos &&
           n.find("Transpose (0, 2, 3, 1)") != std::string::npos && n.find("'" + linear + ".weight'") != std::string::npos;
  });
}

// kiln's AlexNet reads its flatten through dropout (classifier.0), so kiln's export flattens through
// Transpose (0, 2, 3, 1) (a plain Flatten, in PyTorch's C,H,W order, is written only where linear
// layers alone read it: src/export/flatten_export.cpp), and the file's classifier.1 columns are in
// kiln's H,W,C order. The import maps that to kiln's own flatten and gives classifier.1's columns to
// the loader in nn.Linear's C,H,W order (with a note): the same program, every layer of `kiln plan`
// (dropout and flatten included) under the same name and shape, the same eval logits and one
// training step's loss and gradients by PyTorch name, bit for bit. At the zoo's test side (64) the
// 6x6 pooled map is one position repeated, so the spatial order is checked by the flatten test below.
TEST(ZooImportAlexnet, AChannelsLastFlattenReadThroughDropoutImportsAsKilnsAlexnet) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::by_name("alexnet", 10);
  const CompileOptions o = testing::zoo_test_options(bp);
  const int side = o.input_hwc[0];
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Executable original(compile(bp, o), seed);
  const Shape shape = {o.batch, 3, side, side};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), seed + 2);
  const std::vector<int32_t> labels = {3, 7};
  const std::vector<float> want = testing::kiln_logits(original, x, shape);
  const StepGradients want_step = step_gradients(original, x, shape, labels);

  testing::TempDir dir;
  const std::string file = dir.file("alexnet.onnx");
  OnnxExportOptions e;
  e.fold_bn = false;
  e.info.model = bp.name();
  export_onnx(original, file, e);
  const ImportedModel m = import_onnx(file);
  EXPECT_EQ(m.blueprint.name(), "alexnet");
  EXPECT_TRUE(has_reorder_note(m, "classifier.1"));
  EXPECT_FALSE(has_reorder_note(m, "classifier.4"));  // reads rows, not a flattened map
  Executable imported(compile(m.blueprint, o), seed + 4);  // another seed: every weight must come from the file
  EXPECT_EQ(size_t(load_imported_weights(imported, m).tensors), m.weights.size());

  const std::vector<Layer>& a = original.program().graph.layers;
  const std::vector<Layer>& b = imported.program().graph.layers;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << "layer " << i;
    EXPECT_EQ(std::string(layer_kind_name(a[i].kind)), layer_kind_name(b[i].kind)) << a[i].name;
    EXPECT_EQ(a[i].out_shape, b[i].out_shape) << a[i].name;
  }
  const std::vector<KeptLayer> ka = kept_layers(original.program()), kb = kept_layers(imported.program());
  ASSERT_EQ(ka.size(), kb.size());
  for (size_t i = 0; i < ka.size(); ++i) EXPECT_EQ(ka[i].params, kb[i].params) << ka[i].name;
  EXPECT_EQ(torch_name_set(imported.program()), torch_name_set(original.program()));

  const double gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
  EXPECT_EQ(gap, 0.0);
  const StepGradients got_step = step_gradients(imported, x, shape, labels);
  EXPECT_EQ(got_step.loss, want_step.loss);
  ASSERT_EQ(got_step.grads.size(), want_step.grads.size());
  for (const auto& [name, g] : want_step.grads) EXPECT_EQ(got_step.grads.at(name), g) << name;

  // The checks catch classifier.1's columns loaded as the file holds them (H,W,C read as C,H,W).
  ImportedModel wrong = m;
  const Layer& flatten = *std::find_if(a.begin(), a.end(), [](const Layer& l) { return l.name == "flatten"; });
  ASSERT_EQ(a[size_t(flatten.inputs.at(0))].out_shape, (Shape{o.batch, 6, 6, 256}));
  unreorder_columns(wrong, "classifier.1.weight", {6, 6, 256});
  load_imported_weights(imported, wrong);
  const double wrong_gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
  const StepGradients wrong_step = step_gradients(imported, x, shape, labels);
  EXPECT_GT(wrong_gap, 1e-2);
  EXPECT_NE(wrong_step.loss, want_step.loss);
  const double wrong_grads = gradient_gap(wrong_step, want_step);
  EXPECT_GT(wrong_grads, 1e-2);
  std::printf("alexnet at %d: %zu layers; logit gap %.2e, loss %.9g vs %.9g, %zu gradients equal; classifier.1's "
              "columns as the file holds them: logit gap %.2e, loss %.9g, gradient gap %.2e\n", side, b.size(), gap,
              got_step.loss, want_step.loss, got_step.grads.size(), wrong_gap, wrong_step.loss, wrong_grads);
}

// A flattened 4x4 map (every position its own values) read by a linear layer through dropout, through
// ReLU and dropout, through a LayerNorm, and directly. Kiln's export writes the first three as
// Transpose (0, 2, 3, 1) -> Flatten (kiln's H,W,C order), the last as a plain Flatten with the
// columns in C,H,W. Each imports with every parameter random, and gives the same eval logits and
// the same training step (loss, gradients by name) bit for bit; the linear layer's columns are
// reordered (and noted) exactly where it reads the channels-last flatten through layers acting on
// each feature alone: the LayerNorm's features, and the linear layer after it, keep the file's
// H,W,C order, which is kiln's. Where reordered, the file's columns loaded as they stand are caught.
TEST(ChannelsLastFlattenImport, EveryReaderGetsTheValuesInKilnsOrder) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  testing::TempDir dir;
  for (const char* r : {"dropout", "relu_dropout", "layer_norm", "linear"}) {
    const std::string reader = r;
    SCOPED_TRACE(reader);
    Blueprint bp("flatten_" + reader);
    bp.input(4, 4, 3).conv(ConvAttrs::square(6, 3, 1, 1, true), "features.0").flatten("flatten");
    if (reader == "relu_dropout") bp.relu("act");
    if (reader != "linear" && reader != "layer_norm") bp.dropout(0.5f, "drop");
    if (reader == "layer_norm") bp.layer_norm(1e-5f, "norm");
    bp.fc(5, true, "classifier");
    CompileOptions o;
    o.batch = 2;
    Executable exe(compile(bp, o), 7);
    for (int id : exe.program().params) {
      const std::vector<float> v = testing::normal_floats(size_t(numel(exe.program().tensors[size_t(id)].shape)),
                                                          100 + uint32_t(id));
      exe.write(id, v.data(), v.size() * sizeof(float));
    }
    const std::string file = dir.file(reader + ".onnx");
    export_onnx(exe, file);
    const ImportedModel m = import_onnx(file);
    const bool reordered = reader == "dropout" || reader == "relu_dropout";
    EXPECT_EQ(has_reorder_note(m, "classifier"), reordered);
    Executable imported(compile(m.blueprint, o), 8);
    EXPECT_EQ(size_t(load_imported_weights(imported, m).tensors), m.weights.size());
    std::string kinds_a, kinds_b;
    for (const Layer& l : exe.program().graph.layers) kinds_a += l.name + ":" + layer_kind_name(l.kind) + " ";
    for (const Layer& l : imported.program().graph.layers) kinds_b += l.name + ":" + layer_kind_name(l.kind) + " ";
    EXPECT_EQ(kinds_a, kinds_b);
    const Shape shape = {2, 3, 4, 4};
    const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 9);
    const std::vector<float> want = testing::kiln_logits(exe, x, shape);
    const double gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
    EXPECT_EQ(gap, 0.0);
    const StepGradients want_step = step_gradients(exe, x, shape, {1, 4});
    const StepGradients got_step = step_gradients(imported, x, shape, {1, 4});
    EXPECT_EQ(got_step.loss, want_step.loss);
    EXPECT_EQ(got_step.grads, want_step.grads);
    if (!reordered) continue;
    ImportedModel wrong = m;
    unreorder_columns(wrong, "classifier.weight", {4, 4, 6});
    load_imported_weights(imported, wrong);
    const double wrong_gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
    EXPECT_GT(wrong_gap, 1e-2);
    std::printf("%s: logit gap %.2e, loss %.9g equal; the file's columns as they stand: logit gap %.2e\n",
                reader.c_str(), gap, got_step.loss, wrong_gap);
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The layer kinds no zoo model above exports in every form: GroupNorm on a map and on flat rows
// (Reshape -> InstanceNormalization -> Reshape -> Mul -> Add), LayerScale on both ((C, 1, 1) and (C)),
// a channel slice of a map, adaptive average pooling as two MatMuls; every parameter random, so a weight taken from the wrong tensor or
// broadcast along the wrong axis shows in the logits.
TEST(KilnLayersImport, GroupNormLayerScaleAndSliceRoundTripBitForBit) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  Blueprint bp("norms");
  bp.input(8, 8, 3).conv(ConvAttrs::square(8, 3, 1, 1, true), "features.0").group_norm(4, 1e-5f, "features.1");
  bp.relu("features.2").layer_scale(1.f, "features.3").channel_slice(2, 4, "features.4");
  bp.adaptive_avgpool(3, 3, "pool").global_avgpool("avgpool");  // 8x8 to 3x3: the two-MatMul export
  bp.fc(6, true, "fc1").group_norm(2, 1e-3f, "norm").layer_scale(1.f, "head_scale");
  bp.fc(5, true, "classifier");
  CompileOptions o;
  o.batch = 2;
  Executable original(compile(bp, o), 3);
  for (int id : original.program().params) {
    const std::vector<float> v = testing::normal_floats(size_t(numel(original.program().tensors[size_t(id)].shape)),
                                                        100 + uint32_t(id));
    original.write(id, v.data(), v.size() * sizeof(float));
  }
  const Shape shape = {2, 3, 8, 8};
  const std::vector<float> x = testing::normal_floats(size_t(numel(shape)), 4);
  const std::vector<float> want = testing::kiln_logits(original, x, shape);
  testing::TempDir dir;
  export_onnx(original, dir.file("norms.onnx"));
  const ImportedModel m = import_onnx(dir.file("norms.onnx"));
  Executable imported(compile(m.blueprint, o), 5);
  EXPECT_EQ(size_t(load_imported_weights(imported, m).tensors), m.weights.size());
  const std::vector<KeptLayer> a = kept_layers(original.program()), b = kept_layers(imported.program());
  std::string kinds_a, kinds_b;
  for (const KeptLayer& l : a) kinds_a += std::string(layer_kind_name(l.kind)) + " ";
  for (const KeptLayer& l : b) kinds_b += std::string(layer_kind_name(l.kind)) + " ";
  ASSERT_EQ(kinds_a, kinds_b);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].params.empty()) {  // named after their initializers
      EXPECT_EQ(a[i].name, b[i].name);
    }
    EXPECT_EQ(a[i].params, b[i].params) << a[i].name;
  }
  EXPECT_EQ(testing::logit_gap(testing::kiln_logits(imported, x, shape), want), 0.0);
  // Each group norm's weight reversed is caught.
  for (const char* tensor : {"features.1.weight", "norm.weight"}) {
    ImportedModel wrong = m;
    NamedTensor& w = *std::find_if(wrong.weights.begin(), wrong.weights.end(),
                                   [&](const NamedTensor& t) { return t.name == tensor; });
    std::vector<float> v(w.data.size() / 4);
    std::memcpy(v.data(), w.data.data(), w.data.size());
    std::reverse(v.begin(), v.end());
    std::memcpy(w.data.data(), v.data(), w.data.size());
    load_imported_weights(imported, wrong);
    const double gap = testing::logit_gap(testing::kiln_logits(imported, x, shape), want);
    EXPECT_GT(gap, 1e-3) << tensor;
    std::printf("%s reversed: gap %.2e\n", tensor, gap);
  }
}

}  // namespace
}  // namespace kiln
