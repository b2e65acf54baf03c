// Group normalization's backward through compiled float64 programs, against central finite
// differences of the training loss (support/gradcheck.h): the gradients of every parameter (sampled)
// and of the input batch. The layers' weights and biases are drawn at random first: at their ones
// and zeros a weight read in the wrong channel would go unseen.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
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
using testing::GradError;

constexpr double kStep = 1e-6, kTolerance = 1e-6;

// A compiled float64 program with its input, labels and group norms' parameters drawn, forward and
// backward run once.
struct Checked {
  Executable exe;
  StepScalars step{0.f, 3, 11};
  Checked(const Blueprint& model, const Shape& input_hwc, bool input_grad)
      : exe(compile(model, options(input_hwc, input_grad)), 7) {
    const Program& p = exe.program();
    std::mt19937 rng(123);
    testing::fill_normal(exe.tensor(p.input), rng);
    testing::fill_labels(exe.tensor(p.label), int(p.tensors[p.logits].shape[1]), rng);
    for (const Layer& l : p.graph.layers)
      if (l.kind == LayerKind::GroupNorm) {
        testing::fill_normal(exe.tensor(exe.id(l.name + ".weight")), rng);
        testing::fill_normal(exe.tensor(exe.id(l.name + ".bias")), rng);
      }
    exe.run_forward(step);
    exe.run_backward(step);
  }
  static CompileOptions options(const Shape& input_hwc, bool input_grad) {
    CompileOptions o;
    o.precision = Precision::FP64, o.batch = 3, o.input_hwc = input_hwc, o.input_grad = input_grad;
    return o;
  }
  double loss() {
    exe.run_forward(step);
    return testing::loss_of(exe);
  }
  // The analytic gradient and central differences of every `stride`-th element of tensor `value`.
  std::pair<std::vector<double>, std::vector<double>> sample(int value, int gradient, int64_t stride) {
    HostTensor v = exe.tensor(value), g = exe.tensor(gradient);
    std::vector<double> analytic, numeric;
    for (int64_t i = 0; i < v.numel(); i += stride) {
      numeric.push_back(central_difference([&] { return loss(); }, v.as<double>()[i], kStep));
      analytic.push_back(g.as<double>()[i]);
    }
    return {analytic, numeric};
  }
};

// Every parameter's gradient (about 7 elements of each) and, where the program keeps it, the
// input batch's (about 40 elements).
void check_gradients(const std::string& name, const Blueprint& model, const Shape& input_hwc, bool input_grad) {
  Checked c(model, input_hwc, input_grad);
  const Program& p = c.exe.program();
  for (size_t k = 0; k < p.params.size(); ++k) {
    const int64_t stride = std::max<int64_t>(1, numel(p.tensors[size_t(p.params[k])].shape) / 7);
    const auto [analytic, numeric] = c.sample(p.params[k], p.grads[k], stride);
    expect_gradient_matches(analytic, numeric, kTolerance, GradError::PerElement,
                            name + ": " + p.tensors[size_t(p.params[k])].name, size_t(stride));
  }
  if (!input_grad) return;
  const int64_t stride = std::max<int64_t>(1, numel(p.tensors[size_t(p.input)].shape) / 40);
  const auto [analytic, numeric] = c.sample(p.input, p.input_grad, stride);
  expect_gradient_matches(analytic, numeric, kTolerance, GradError::PerElement, name + ": input", size_t(stride));
}

Blueprint head(Blueprint m) { return m.flatten("flat").fc(4, true, "head"); }

// Groups of two channels after a convolution, then ReLU.
Blueprint grouped() {
  Blueprint m("grouped");
  m.conv(6, 3, 1, 1, true, "c0").group_norm(3, 1e-3f, "gn").relu("relu");
  return head(m);
}

// One group (all channels together), a group a channel (instance normalization), and groups of
// flat features after the flatten, whose gradients the classifier reads.
Blueprint one_instance_and_flat() {
  Blueprint m("one_instance_and_flat");
  m.conv(8, 3, 1, 1, false, "c0").group_norm(1, 1e-5f, "gn_one").relu("r0");
  m.conv(4, 3, 2, 1, false, "c1").group_norm(4, 1e-2f, "gn_instance");
  m.flatten("flat").group_norm(4, 1e-5f, "gn_flat").fc(4, true, "head");
  return m;
}

// A group norm on the data batch itself: no input gradient, its weight and bias still trained.
Blueprint on_the_batch() {
  Blueprint m("on_the_batch");
  m.group_norm(2, 1e-5f, "gn").conv(4, 3, 1, 1, true, "c0");
  return head(m);
}

TEST(GradCheck, GroupNormGroupedChannels) {
  check_gradients("grouped", grouped(), {5, 7, 2}, false);
  check_gradients("grouped, input gradient", grouped(), {5, 7, 2}, true);
}

TEST(GradCheck, GroupNormOneGroupInstanceAndFlat) {
  check_gradients("one, instance and flat", one_instance_and_flat(), {6, 5, 3}, true);
}

TEST(GradCheck, GroupNormOnTheDataBatch) { check_gradients("on the batch", on_the_batch(), {5, 4, 4}, false); }

// The bound catches a weight gradient whose channels are mixed up (each group's first two
// channels swapped): the check of the right one passes, of the swapped one fails.
TEST(GradCheck, GroupNormCheckCatchesSwappedChannels) {
  Checked c(grouped(), {5, 7, 2}, false);
  const int weight = c.exe.id("gn.weight");
  const auto param = std::find(c.exe.program().params.begin(), c.exe.program().params.end(), weight);
  ASSERT_NE(param, c.exe.program().params.end());
  const auto [analytic, numeric] = c.sample(weight, c.exe.program().grads[size_t(param - c.exe.program().params.begin())], 1);
  ASSERT_EQ(analytic.size(), 6u);
  expect_gradient_matches(analytic, numeric, kTolerance, GradError::PerElement, "gn.weight");
  std::vector<double> swapped = analytic;
  for (size_t first = 0; first < swapped.size(); first += 2) std::swap(swapped[first], swapped[first + 1]);
  EXPECT_NONFATAL_FAILURE(expect_gradient_matches(swapped, numeric, kTolerance, GradError::PerElement, "gn.weight"),
                          "analytic vs central differences");
}

}  // namespace
}  // namespace kiln
