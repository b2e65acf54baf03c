#pragma once
// What the import tests share: ONNX test models (onnx_test_model.h) written to files, imported,
// compiled at a small batch in fp32 with their weights loaded, and kiln's inference logits beside
// onnxruntime's for the same random input (all files in one onnxruntime process,
// tests/export/run_onnx.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "export/onnx_runner.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/onnx_import.h"
#include "onnx_test_model.h"
#include "support/temp_dir.h"

namespace kiln::testing {

// Where kiln's logits and onnxruntime's may differ for these small models: both in fp32, in other
// summation orders (export's kLayerBound, tests/export/onnx_layer_check.h; the gaps measured there
// 1e-7 to 5e-7).
constexpr double kImportBound = 5e-5;

struct ImportedRun {
  std::string name, file;
  ImportedModel model;
  Shape shape;  // NCHW
  std::vector<float> x, kiln, onnxruntime;
};

// Imports each model (saved as <name>.onnx in `dir`) and runs it in kiln (batch `batch`) and in
// onnxruntime on the input drawn from `seed` (the same input for models of one input shape).
inline std::vector<ImportedRun> run_imported(const std::vector<std::pair<std::string, const OnnxTestModel*>>& models,
                                             const TempDir& dir, uint32_t seed, int64_t batch = 3) {
  std::vector<ImportedRun> runs;
  std::vector<OnnxRun> ort;
  for (const auto& [name, model] : models) {
    ImportedRun r;
    r.name = name;
    r.file = dir.file(name + ".onnx");
    model->save(r.file);
    r.model = import_onnx(r.file);
    const Shape& hwc = *r.model.blueprint.input_hwc();
    r.shape = {batch, hwc[2], hwc[0], hwc[1]};
    r.x = normal_floats(size_t(numel(r.shape)), seed);
    CompileOptions o;
    o.batch = int(batch);
    Executable exe(compile(r.model.blueprint, o), seed + 1);
    load_imported_weights(exe, r.model);
    r.kiln = kiln_logits(exe, r.x, r.shape);
    ort.push_back({r.file, r.x, r.shape, nullptr, {}, {}});
    runs.push_back(std::move(r));
  }
  run_onnx(ort, dir.path());
  for (size_t i = 0; i < runs.size(); ++i) runs[i].onnxruntime = ort[i].logits;
  return runs;
}

// Expects kiln's logits of `r` within kImportBound of onnxruntime's, prints the gap, and returns it.
inline double expect_onnxruntime_logits(const ImportedRun& r) {
  const double gap = logit_gap(r.kiln, r.onnxruntime);
  EXPECT_LT(gap, kImportBound) << r.name;
  std::printf("%s: gap to onnxruntime %.2e\n", r.name.c_str(), gap);
  return gap;
}

// The layers of kind `kind` in the compiled program of an imported model.
inline std::vector<Layer> compiled_layers(const ImportedModel& m, LayerKind kind, int batch = 2) {
  CompileOptions o;
  o.batch = batch;
  std::vector<Layer> out;
  const Program p = compile(m.blueprint, o);
  for (const Layer& l : p.graph.layers)
    if (l.kind == kind) out.push_back(l);
  return out;
}

// The activations of the compiled program, by kiln's names ("silu", ...), in order.
inline std::vector<std::string> activations_of(const ImportedModel& m) {
  std::vector<std::string> names;
  for (const Layer& l : compiled_layers(m, LayerKind::Activation))
    names.push_back(activation_name(attrs_of<ActivationAttrs>(l).activation));
  return names;
}

// The message of the kiln::Error that `f` throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::testing
