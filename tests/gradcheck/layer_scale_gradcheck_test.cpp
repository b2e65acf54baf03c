// LayerScale's backward (ConvNeXt's per-channel `layer_scale * x`) through the compiled program in
// float64, against central finite differences of the training loss: the scale on a convolution's
// map (its dx reaches the convolution's weights) and on a linear layer's rows, its factors drawn at
// random over the initial ones so that every channel differs; and the same check failing for a
// scale gradient off by one row's term.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "support/gradcheck.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

using testing::central_difference;
using testing::expect_gradient_matches;
using testing::fill_labels;
using testing::fill_normal;
using testing::GradError;
using testing::loss_of;

// conv -> layer_scale (a map: (C, 1, 1)) -> ReLU -> flatten -> fc -> layer_scale (rows: (F)) -> fc.
Blueprint scaled_model() {
  Blueprint m("layer_scale");
  m.conv(4, 3, 1, 1, true, "c0").layer_scale(1e-6f, "block").relu("r");
  m.flatten("flat").fc(6, true, "fc1").layer_scale(0.1f, "rows").fc(3, true, "head");
  return m;
}

// The program after one forward and backward, the layer scales' factors drawn from U(-1.5, 1.5)
// first (at 1e-6 the first's gradients would be too small to compare with the differences).
struct Trained {
  std::unique_ptr<Executable> exe;
  StepScalars s{0.f, 3, 11};
};
Trained trained() {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = {5, 4, 2};
  Trained t{std::make_unique<Executable>(compile(scaled_model(), o), 7)};
  Executable& exe = *t.exe;
  std::mt19937 rng(123);
  std::uniform_real_distribution<double> factor(-1.5, 1.5);
  for (const char* name : {"block.layer_scale", "rows.layer_scale"}) {
    HostTensor gamma = exe.tensor(name);
    for (int64_t i = 0; i < gamma.numel(); ++i) gamma.as<double>()[i] = factor(rng);
  }
  fill_normal(exe.tensor(exe.program().input), rng);
  fill_labels(exe.tensor(exe.program().label), 3, rng);
  exe.run_forward(t.s);
  exe.run_backward(t.s);
  return t;
}

// d(loss)/d(every element of `param`) against central differences of the loss.
void check_parameter(Executable& exe, const StepScalars& s, const std::string& param,
                     const std::vector<double>& analytic) {
  auto loss = [&] {
    exe.run_forward(s);
    return loss_of(exe);
  };
  HostTensor p = exe.tensor(param);
  std::vector<double> numeric;
  for (int64_t i = 0; i < p.numel(); ++i) numeric.push_back(central_difference(loss, p.as<double>()[i], 1e-6));
  expect_gradient_matches(analytic, numeric, 1e-6, GradError::PerElement, param);
}

TEST(GradCheck, LayerScaleOnMapsAndRows) {
  Trained t = trained();
  Executable& exe = *t.exe;
  ASSERT_EQ(exe.program().graph.count(LayerKind::LayerScale), 2);
  EXPECT_EQ(exe.program().tensors[size_t(exe.id("block.layer_scale"))].shape, (Shape{4, 1, 1}));
  EXPECT_EQ(exe.program().tensors[size_t(exe.id("rows.layer_scale"))].shape, (Shape{6}));
  // Every parameter: the scales' own, and those before them, which their dx reaches.
  for (const char* param :
       {"block.layer_scale", "rows.layer_scale", "c0.weight", "c0.bias", "fc1.weight", "head.bias"})
    check_parameter(exe, t.s, param, exe.gradient(param));
}

// The check catches a scale gradient missing one row's term: dgamma[c] less dy * x at the map's
// first row, from the program's own tensors as the backward left them (the scale's input "c0" and
// its output's gradient "d:block"; that they add up to the analytic gradient shows they were read
// before anything was written over them).
TEST(GradCheck, LayerScaleCheckCatchesASumMissingARow) {
  Trained t = trained();
  Executable& exe = *t.exe;
  const std::vector<double> x = testing::host_values(exe.tensor("c0"));
  const std::vector<double> dy = testing::host_values(exe.tensor("d:block"));
  std::vector<double> wrong = exe.gradient("block.layer_scale");
  const size_t c = wrong.size();
  for (size_t k = 0; k < c; ++k) {
    double sum = 0, magnitude = 0;
    for (size_t i = k; i < x.size(); i += c) sum += dy[i] * x[i], magnitude += std::fabs(dy[i] * x[i]);
    ASSERT_NEAR(sum, wrong[k], 1e-12 * magnitude) << "channel " << k;
    wrong[k] -= dy[k] * x[k];
  }
  EXPECT_NONFATAL_FAILURE(check_parameter(exe, t.s, "block.layer_scale", wrong), "analytic vs central differences");
}

}  // namespace
}  // namespace kiln
