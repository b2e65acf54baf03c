#pragma once
// The check every layer family's ONNX test makes: export small models with the layer, fused and
// unfused, BatchNorm folded and kept, run them all in one onnxruntime process, and hold onnxruntime's
// logits to kiln's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/export.h"
#include "onnx_runner.h"
#include "support/temp_dir.h"

namespace kiln::testing {

// onnx_export_test.cpp says why: 5e-5 is its bound for statistics drawn at random (these models are
// small, and their gaps measured 1e-7 to 5e-7); with statistics calibrated to the batch it takes 1e-4.
constexpr double kLayerBound = 5e-5;

struct Case {
  std::string name;
  Blueprint model;
  bool fuse = true;
};

// Exports each case's model both ways and runs them all in one onnxruntime process.
inline void expect_onnxruntime_agrees(const std::vector<Case>& cases) {
  TempDir dir;
  std::vector<OnnxRun> runs;
  std::vector<std::vector<float>> want;
  for (size_t i = 0; i < cases.size(); ++i) {
    CompileOptions o;
    o.batch = 3;
    o.fuse_cbr = cases[i].fuse;
    Executable exe(compile(cases[i].model, o), 20 + uint32_t(i));
    randomize_batch_norms(exe, 40 + uint32_t(i));
    const Shape& in = exe.program().tensors[exe.program().input].shape;
    const Shape shape = {in[0], in[3], in[1], in[2]};
    const std::vector<float> x = normal_floats(size_t(numel(shape)), 60 + uint32_t(i));
    want.push_back(kiln_logits(exe, x, shape));
    for (bool fold : {true, false}) {
      OnnxExportOptions options;
      options.fold_bn = fold;
      const std::string file = dir.file(fmt::format("{}.{}.onnx", cases[i].name, fold ? "folded" : "kept"));
      export_onnx(exe, file, options);
      runs.push_back({file, x, shape, nullptr, {}, {}});
    }
  }
  ASSERT_FALSE(::testing::Test::HasFailure());
  run_onnx(runs, dir.path());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (size_t i = 0; i < runs.size(); ++i) {
    const double gap = logit_gap(runs[i].logits, want[i / 2]);
    EXPECT_LT(gap, kLayerBound) << runs[i].model;
    std::printf("%s: gap %.2e\n", std::filesystem::path(runs[i].model).filename().c_str(), gap);
  }
}

}  // namespace kiln::testing
