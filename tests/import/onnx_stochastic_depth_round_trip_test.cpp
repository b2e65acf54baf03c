// kiln's ONNX export keeps its stochastic depth layers (issue 50, item 5): each is an Identity node
// named after the layer and listed with its probability and mode in the metadata
// (src/ops/elementwise/stochastic_depth_onnx.h), and kiln::import_onnx maps it back. EfficientNet-B0
// and ConvNeXt-Tiny (BatchNorm kept, batch 2, each at its smallest test side) come back with the same
// layer list, every stochastic depth layer under its name with its p (bit for bit) and "row" mode,
// the same eval logits, and train one step as the zoo model: the same per-sample masks (some samples
// dropped, asserted), loss, gradients and updated parameters. The same file with the metadata key
// renamed imports as before this change, the layers lost, and its step lands far off. A malformed
// entry is refused naming the file, the key and the fix.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "export/onnx_runner.h"
#include "import_runner.h"
#include "kiln/compile.h"
#include "kiln/export.h"
#include "kiln/onnx_import.h"
#include "kiln/torch_weights.h"
#include "kiln/zoo.h"
#include "ops/elementwise/stochastic_depth_onnx.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

// The step's seed: the masks are drawn from it, the step and each layer's name only, so they do not
// depend on the weights' random seed. Chosen so that both models drop samples (the test asserts it).
constexpr uint64_t kStepSeed = 11;

// The file's bytes with `from` (found exactly once) replaced by `to`, of the same length, so the
// protobuf stays valid: a metadata value edited in place.
void edit_file(const std::string& path, const std::string& from, const std::string& to, const std::string& out) {
  ASSERT_EQ(from.size(), to.size());
  std::vector<uint8_t> bytes = testing::read_bytes(path);
  const std::string text(bytes.begin(), bytes.end());
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  ASSERT_EQ(text.find(from, at + 1), std::string::npos) << from << " is not unique in the file";
  std::copy(to.begin(), to.end(), bytes.begin() + std::ptrdiff_t(at));
  testing::write_bytes(out, bytes);
}

// What one training step leaves: the loss, each parameter's gradient and updated value by its
// PyTorch name (kiln's zoo names and the imported model's differ; these do not), and each stochastic
// depth layer's mask (1: the sample kept) by layer name.
struct StepResult {
  std::vector<float> loss;
  std::map<std::string, std::vector<float>> grads, params;
  std::map<std::string, std::vector<uint8_t>> masks;
  int64_t dropped = 0, kept = 0;
};

StepResult train_one_step(Executable& exe, const std::vector<float>& x_nhwc, const std::vector<int32_t>& labels) {
  const Program& p = exe.program();
  exe.write(p.input, x_nhwc.data(), x_nhwc.size() * sizeof(float));
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  // The step in its parts, each read where it is live: a mask's memory is reused once the backward
  // pass has read it.
  const StepScalars step{0.05f, 0, kStepSeed};
  exe.run_forward(step);
  StepResult r;
  r.loss = exe.read<float>(p.loss);
  for (const Layer& l : p.graph.layers) {
    if (l.kind != LayerKind::StochasticDepth || attrs_of<StochasticDepthAttrs>(l).p == 0.f) continue;
    const std::vector<uint8_t> mask = exe.read<uint8_t>(exe.id(l.name + ":mask"));
    r.kept += std::count(mask.begin(), mask.end(), uint8_t(1));
    r.dropped += std::count(mask.begin(), mask.end(), uint8_t(0));
    r.masks[l.name] = mask;
  }
  exe.run_backward(step);
  const std::map<std::string, std::string> torch = torch_names(p);
  const auto torch_name = [&](int id) {
    const std::string& name = p.tensors[size_t(id)].name;
    const auto it = torch.find(name);
    return it == torch.end() ? name : it->second;
  };
  for (size_t i = 0; i < p.params.size(); ++i) r.grads[torch_name(p.params[i])] = exe.read<float>(p.grads[i]);
  exe.run_update(step);
  for (int id : p.params) r.params[torch_name(id)] = exe.read<float>(id);
  return r;
}

// The largest |a - b| over the largest |b| of any tensor of the two steps (the loss included), or
// infinity where they hold other tensors.
double step_gap(const StepResult& a, const StepResult& b) {
  double gap = testing::logit_gap(a.loss, b.loss);
  for (const auto& [x, y] : {std::pair{&a.grads, &b.grads}, std::pair{&a.params, &b.params}}) {
    if (x->size() != y->size()) return INFINITY;
    for (const auto& [name, values] : *x) {
      const auto it = y->find(name);
      gap = std::max(gap, it == y->end() ? INFINITY : testing::logit_gap(values, it->second));
    }
  }
  return gap;
}

// A linear layer over a feature map (ConvNeXt's pointwise layers) is a 1x1 Conv in kiln's file and
// comes back as one (onnx_zoo_round_trip_more_test.cpp says why): the same function.
bool same_kind(const Layer& zoo, const Layer& imported) {
  if (zoo.kind == imported.kind) return true;
  return zoo.kind == LayerKind::Linear && imported.kind == LayerKind::Conv && zoo.out_shape.size() == 4;
}

class ZooStochasticDepthImport : public ::testing::TestWithParam<std::string> {};

TEST_P(ZooStochasticDepthImport, AnExportImportsWithEveryStochasticDepthLayerAndTrainsAsTheZooModel) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  const Blueprint bp = zoo::by_name(GetParam(), 10);
  const CompileOptions o = testing::zoo_test_options(bp);
  const int side = o.input_hwc[0];
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Executable original(compile(bp, o), seed);
  testing::randomize_batch_norms(original, seed + 1);
  const Shape nchw = {o.batch, o.input_hwc[2], side, side};
  const std::vector<float> x = testing::normal_floats(size_t(numel(nchw)), seed + 2);
  const std::vector<float> want = testing::kiln_logits(original, x, nchw);

  testing::TempDir dir;
  const std::string file = dir.file(GetParam() + ".onnx");
  OnnxExportOptions e;
  e.fold_bn = false;
  e.info.model = bp.name();
  const OnnxExportSummary summary = export_onnx(original, file, e);
  const ImportedModel m = import_onnx(file);
  Executable imported(compile(m.blueprint, o), seed + 3);  // another seed: every weight must come from the file
  EXPECT_EQ(size_t(load_imported_weights(imported, m).tensors), m.weights.size());

  // The layer list, every stochastic depth layer with its name and p bit for bit.
  const std::vector<Layer>& a = original.program().graph.layers;
  const std::vector<Layer>& b = imported.program().graph.layers;
  ASSERT_EQ(a.size(), b.size());
  int depths = 0, dropping = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i) + " '" + a[i].name + "'");
    EXPECT_TRUE(same_kind(a[i], b[i])) << layer_kind_name(a[i].kind) << " came back as " << layer_kind_name(b[i].kind);
    EXPECT_EQ(a[i].out_shape, b[i].out_shape);
    if (a[i].kind != LayerKind::StochasticDepth) continue;
    ++depths;
    const double p = attrs_of<StochasticDepthAttrs>(a[i]).p;
    dropping += p > 0;
    EXPECT_EQ(a[i].name, b[i].name);  // the masks are drawn per layer name
    ASSERT_EQ(b[i].kind, LayerKind::StochasticDepth);
    EXPECT_EQ(attrs_of<StochasticDepthAttrs>(b[i]).p, p);
  }
  EXPECT_EQ(depths, original.program().graph.count(LayerKind::StochasticDepth));
  EXPECT_GT(dropping, 0);
  const auto identities = summary.op_counts.find("Identity");
  EXPECT_EQ(identities == summary.op_counts.end() ? 0 : identities->second, depths);
  // The metadata lists each layer once, in "row" mode, its p as the double it is.
  const nlohmann::json listed = nlohmann::json::parse(m.metadata.at(kStochasticDepthMetadataKey));
  EXPECT_EQ(int(listed.size()), depths);
  for (const Layer& l : a)
    if (l.kind == LayerKind::StochasticDepth) {
      ASSERT_TRUE(listed.contains(l.name)) << l.name;
      EXPECT_EQ(listed[l.name]["mode"], "row") << l.name;
      EXPECT_EQ(listed[l.name]["p"].get<double>(), attrs_of<StochasticDepthAttrs>(l).p) << l.name;
    }

  // Eval logits: stochastic depth is the identity there. Bit for bit, except where a linear layer
  // came back as a 1x1 conv (ConvNeXt): another kernel, another fp32 summation order
  // (onnx_zoo_round_trip_more_test.cpp's bound, 1e-5, and measurements).
  const bool pointwise = std::any_of(a.begin(), a.end(), [](const Layer& l) {
    return l.kind == LayerKind::Linear && l.out_shape.size() == 4;
  });
  const double logit_bound = pointwise ? 1e-5 : 0.0;
  const double logit_gap = testing::logit_gap(testing::kiln_logits(imported, x, nchw), want);
  EXPECT_LE(logit_gap, logit_bound);

  // One training step from the same weights, stochastic depth active: the same masks, samples
  // dropped, and the same loss, gradients and parameters.
  std::mt19937 rng(seed + 4);
  std::uniform_int_distribution<int32_t> label(0, 9);
  const std::vector<int32_t> labels = {label(rng), label(rng)};
  const std::vector<float> x_train = testing::nhwc_of(testing::normal_floats(size_t(numel(nchw)), seed + 5), nchw);
  // The control below imports the file again; load the zoo model's weights into it from the same file.
  const std::string control_file = dir.file(GetParam() + ".no_key.onnx");
  edit_file(file, kStochasticDepthMetadataKey, "kiln.stochastic_XXXXX", control_file);
  const ImportedModel without = import_onnx(control_file);
  Executable control(compile(without.blueprint, o), seed + 6);
  load_imported_weights(control, without);

  const StepResult want_step = train_one_step(original, x_train, labels);
  const StepResult got_step = train_one_step(imported, x_train, labels);
  const StepResult control_step = train_one_step(control, x_train, labels);
  EXPECT_GT(want_step.dropped, 0) << "no sample dropped at step seed " << kStepSeed << ": choose another";
  EXPECT_GT(want_step.kept, 0);
  EXPECT_EQ(want_step.dropped + want_step.kept, int64_t(dropping) * o.batch);  // every mask 0 or 1, read live
  EXPECT_EQ(got_step.masks, want_step.masks);
  EXPECT_EQ(int(want_step.masks.size()), dropping);
  const double gap = step_gap(got_step, want_step), control_gap = step_gap(control_step, want_step);
  // Bit for bit where the program is the zoo's (EfficientNet); with ConvNeXt's linear layers as 1x1
  // convs, their rounding: gaps of 6.6e-7 to 8.9e-7 of the largest value of a tensor over five seeds,
  // bound 1e-5.
  const double step_bound = pointwise ? 1e-5 : 0.0;
  EXPECT_LE(gap, step_bound);
  // Without the metadata the layers are lost (the import before this change) and the step is another:
  // measured 2.2 to 7.9 (EfficientNet) and 1.2 to 1.9 (ConvNeXt, whose loss hardly moves: its layer
  // scale of 1e-6 leaves the residual branches small at initialization; the gradients do).
  EXPECT_EQ(compile(without.blueprint, o).graph.count(LayerKind::StochasticDepth), 0);
  EXPECT_GT(control_gap, std::max(100 * step_bound, 1e-3));
  std::printf("%s at %d: %d stochastic depth layers (%d with p > 0), %lld of %lld sample masks dropped; eval logit "
              "gap %.2e (bound %.0e); one step, loss / gradients / parameters: gap %.2e (bound %.0e), without the "
              "metadata %.2e (loss %.6f against %.6f)\n",
              GetParam().c_str(), side, depths, dropping, (long long)want_step.dropped,
              (long long)(want_step.dropped + want_step.kept), logit_gap, logit_bound, gap, step_bound, control_gap,
              double(control_step.loss.at(0)), double(want_step.loss.at(0)));
}

INSTANTIATE_TEST_SUITE_P(ZooModels, ZooStochasticDepthImport, ::testing::Values("efficientnet_b0", "convnext_tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// A small model: a stochastic depth of p = 0.5 on a map, one of p = 0 (which a PyTorch export writes
// no nodes for, and kiln's keeps), and one as the model's last layer, whose node the exporter names
// "logits".
Blueprint small_model() {
  Blueprint bp("sd_model");
  bp.input(6, 6, 3).conv(ConvAttrs::square(4, 3, 1, 1, true), "cv").stochastic_depth(0.5f, "sd");
  bp.stochastic_depth(0.f, "sd0").global_avgpool("pool").fc(5, true, "head").stochastic_depth(0.25f, "out_sd");
  return bp;
}

TEST(StochasticDepthImport, ZeroProbabilityAndLastLayerComeBack) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  CompileOptions o;
  o.batch = 2;
  Executable exe(compile(small_model(), o), 3);
  testing::TempDir dir;
  export_onnx(exe, dir.file("sd.onnx"));
  const ImportedModel m = import_onnx(dir.file("sd.onnx"));
  EXPECT_EQ(m.metadata.at(kStochasticDepthMetadataKey),
            R"({"logits":{"mode":"row","p":0.25},"sd":{"mode":"row","p":0.5},"sd0":{"mode":"row","p":0.0}})");
  std::vector<std::pair<std::string, float>> depths;
  for (const Layer& l : testing::compiled_layers(m, LayerKind::StochasticDepth))
    depths.emplace_back(l.name, attrs_of<StochasticDepthAttrs>(l).p);
  // The last one takes its node's name, "logits", as a dropout there does.
  const std::vector<std::pair<std::string, float>> want = {{"sd", 0.5f}, {"sd0", 0.f}, {"logits", 0.25f}};
  EXPECT_EQ(depths, want);
}

TEST(StochasticDepthImport, AMalformedMetadataEntryIsRefusedNamingTheFileTheKeyAndTheFix) {
  if (!onnx_import_available()) GTEST_SKIP() << "kiln built without the ONNX library";
  Blueprint bp("sd_model");
  bp.input(6, 6, 3).conv(ConvAttrs::square(4, 3, 1, 1, true), "cv").stochastic_depth(0.5f, "sd");
  bp.global_avgpool("pool").fc(5, true, "head");
  CompileOptions o;
  o.batch = 2;
  Executable exe(compile(bp, o), 3);
  testing::TempDir dir;
  const std::string file = dir.file("sd.onnx");
  export_onnx(exe, file);
  const std::string entry = R"({"sd":{"mode":"row","p":0.5}})";
  ASSERT_EQ(import_onnx(file).metadata.at(kStochasticDepthMetadataKey), entry);
  ASSERT_EQ(testing::compiled_layers(import_onnx(file), LayerKind::StochasticDepth).size(), 1u);
  struct Case {
    const char* what;
    std::string from, to;
    std::vector<std::string> said;
  };
  const std::vector<Case> cases = {
      {"not JSON", R"({"sd":{"mode")", R"(["sd":{"mode")", {"is not JSON"}},
      {"not an object", entry, R"(["sd",{"mode":"row","p":0.5}])", {"the JSON [\"sd\"", "not a JSON object"}},
      {"p of 1.5", R"("p":0.5})", R"("p":1.5})", {"lists 'sd' with p 1.5", "[0, 1)"}},
      {"p a string", R"("p":0.5)", R"("p":"0")", {"lists 'sd' with p \"0\", not a number"}},
      {"another mode", R"("mode":"row")", R"("mode":"col")", {"lists 'sd' with mode \"col\"", "\"row\" mode"}},
      {"no such node", R"({"sd":{)", R"({"sx":{)", {"lists 'sx', which is no node of the graph"}},
      {"a Conv node", R"({"sd":{)", R"({"cv":{)", {"lists 'cv', which is a Conv node, not an Identity"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string bad = dir.file("bad.onnx");
    edit_file(file, c.from, c.to, bad);
    const std::string error = testing::error_of([&] { import_onnx(bad); });
    for (const std::string& s : c.said) EXPECT_NE(error.find(s), std::string::npos) << s << "\n" << error;
    EXPECT_NE(error.find("'" + bad + "'"), std::string::npos) << error;
    EXPECT_NE(error.find(std::string("metadata '") + kStochasticDepthMetadataKey + "'"), std::string::npos) << error;
    EXPECT_NE(error.find("export the model again (kiln export --onnx)"), std::string::npos) << error;
    EXPECT_NE(error.find("remove the metadata key"), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace kiln
