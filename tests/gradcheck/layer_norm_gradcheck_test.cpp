// LayerNorm's backward through compiled float64 programs against central finite differences of the
// training loss: over a map's channels (ConvNeXt's LayerNorm2d, after a convolution whose weight
// gradient carries the layer's dx, before a linear layer at every position) and over flat rows,
// with the layer's weight and bias moved off their ones and zeros so that a gradient ignoring them
// shows; and the input's gradient of a layer norm on the data batch, where a backward leaving out
// dx's xhat term is shown to miss the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "ops/layer_norm/layer_norm_contract.h"
#include "ops/layer_norm/layer_norm_test_reference.h"
#include "runtime/op_cost.h"
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

constexpr double kStep = 1e-6;
constexpr double kBound = 1e-6;  // GradError::PerElement, as every gradient check's

CompileOptions options(const Shape& input_hwc, bool input_grad) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = input_hwc, o.input_grad = input_grad;
  return o;
}

// Random inputs and labels, every layer norm's weight drawn from N(1, 0.5) and bias from N(0, 0.5).
void randomize(Executable& exe) {
  std::mt19937 rng(123);
  for (const Layer& l : exe.program().graph.layers) {
    if (l.kind != LayerKind::LayerNorm) continue;
    fill_normal(exe.tensor(l.name + ".weight"), rng, 0.5);
    fill_normal(exe.tensor(l.name + ".bias"), rng, 0.5);
    HostTensor w = exe.tensor(l.name + ".weight");
    for (int64_t i = 0; i < w.numel(); ++i) w.as<double>()[i] += 1;
  }
  fill_normal(exe.tensor(exe.program().input), rng);
  const int64_t classes = exe.program().tensors[exe.program().logits].shape[1];
  fill_labels(exe.tensor(exe.program().label), int(classes), rng);
}

const StepScalars kScalars{0.f, 3, 11};

// d(loss)/d(every parameter element in a sample) from the backward against central differences.
void check_parameters(const std::string& what, const Blueprint& model, const Shape& input_hwc) {
  Executable exe(compile(model, options(input_hwc, false)), 7);
  randomize(exe);
  ASSERT_GE(exe.program().graph.count(LayerKind::LayerNorm), 1) << what;
  exe.run_forward(kScalars);
  exe.run_backward(kScalars);
  auto loss = [&] {
    exe.run_forward(kScalars);
    return loss_of(exe);
  };
  int checked = 0;
  for (size_t k = 0; k < exe.program().params.size(); ++k) {
    HostTensor p = exe.tensor(exe.program().params[k]);
    HostTensor g = exe.tensor(exe.program().grads[k]);
    const int64_t stride = std::max<int64_t>(1, p.numel() / 7);
    std::vector<double> analytic, numeric;
    for (int64_t i = 0; i < p.numel(); i += stride, ++checked) {
      numeric.push_back(central_difference(loss, p.as<double>()[i], kStep));
      analytic.push_back(g.as<double>()[i]);
    }
    expect_gradient_matches(analytic, numeric, kBound, GradError::PerElement, what + ": " + p.spec->name,
                            size_t(stride));
  }
  EXPECT_GT(checked, 0) << what;
}

TEST(GradCheck, LayerNormOverAMapsChannels) {
  Blueprint m("ln_map");
  m.conv(6, 3, 1, 1, true, "c0").layer_norm(1e-6f, "ln").fc(5, true, "pw");
  m.flatten("flat").fc(4, true, "head");
  check_parameters("layer_norm over channels", m, {5, 4, 2});
}

TEST(GradCheck, LayerNormOverRows) {
  Blueprint m("ln_rows");
  m.conv(4, 3, 1, 1, true, "c0").flatten("flat").fc(10, true, "fc").layer_norm(1e-5f, "ln").fc(4, true, "head");
  check_parameters("layer_norm over rows", m, {4, 4, 2});
}

// The data batch's gradient through a layer norm reading it: the program's against central
// differences over every input element. The layer's own dx from the host reference (from the
// output gradient and the statistics the program used) meets the bound too, and the same without
// the xhat * mean(g * xhat) term does not.
TEST(GradCheck, LayerNormOnTheInput) {
  Blueprint m("ln_input");
  m.layer_norm(1e-5f, "ln").flatten("flat").fc(4, true, "head");
  Executable exe(compile(m, options({4, 4, 3}, true)), 7);
  randomize(exe);
  const Program& p = exe.program();
  exe.run_forward(kScalars);
  exe.run_backward(kScalars);
  const std::vector<double> analytic = testing::host_values(exe.tensor(p.input_grad));
  const std::vector<double> mean = testing::host_values(exe.tensor("ln:mean")),
                            rstd = testing::host_values(exe.tensor("ln:rstd"));
  std::vector<double> dy;
  for (const Op& op : p.backward)
    if (op.kind == OpKind::LAYER_NORM_BWD) dy = testing::host_values(exe.tensor(int(op_fields<LayerNormBackward>(op).dy)));
  ASSERT_EQ(dy.size(), analytic.size());
  const std::vector<double> x = testing::host_values(exe.tensor(p.input)),
                            w = testing::host_values(exe.tensor("ln.weight"));
  HostTensor input = exe.tensor(p.input);
  std::vector<double> numeric;
  for (int64_t i = 0; i < input.numel(); ++i)
    numeric.push_back(central_difference(
        [&] {
          exe.run_forward(kScalars);
          return loss_of(exe);
        },
        input.as<double>()[i], kStep));
  expect_gradient_matches(analytic, numeric, kBound, GradError::PerElement, "d(input)");
  const layer_norm_test::Extents e{int64_t(mean.size()), 3};
  const layer_norm_test::Backward right = layer_norm_test::backward(e, dy, x, w, mean, rstd);
  expect_gradient_matches(right.dx, numeric, kBound, GradError::PerElement, "the reference's d(input)");
  const layer_norm_test::Backward without_xhat_term = layer_norm_test::backward(e, dy, x, w, mean, rstd, false);
  EXPECT_GT(testing::gradient_error(without_xhat_term.dx, numeric, GradError::PerElement).error, 100 * kBound);
}

}  // namespace
}  // namespace kiln
