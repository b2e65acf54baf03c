// ShuffleNetV2's data movement in the gradient checks (issue 49): channel_shuffle and channel_slice in
// compiled float64 programs, their analytic gradients against central finite differences of the
// training loss, for every parameter (sampled) and for every element of the data batch (its gradient
// asked for, CompileOptions::input_grad, so that the slices of the input itself are checked too).
// Two stride-1 units of torchvision's InvertedResidual, whose chunks' gradients are each written once
// (channel_slice_layer.cpp); slices that overlap, leave a gap or share their input with another
// reader, whose gradients the compiler's GRAD_SUM adds; and two slices of flat rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "ops/channel/shufflenet_unit_test.h"
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

constexpr double kTolerance = 1e-6;  // gradcheck_test.cpp's, PerElement

struct InputGradient {
  std::vector<double> analytic, numeric;
};

// Every parameter's gradient (sampled) and the data batch's (every element) against central
// differences of the loss; returns the latter pair.
InputGradient check_gradients(const std::string& name, const Blueprint& model, const Shape& input_hwc, bool fuse) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 3, o.input_hwc = input_hwc, o.fuse_cbr = fuse, o.input_grad = true;
  Executable exe(compile(model, o), 7);
  const Program& p = exe.program();
  std::mt19937 rng(123);
  fill_normal(exe.tensor(p.input), rng);
  fill_labels(exe.tensor(p.label), int(p.tensors[size_t(p.logits)].shape[1]), rng);
  const StepScalars s{0.f, 3, 11};
  exe.run_forward(s);
  exe.run_backward(s);
  const double eps = 1e-6;
  auto loss = [&] {
    exe.run_forward(s);
    return loss_of(exe);
  };
  for (size_t k = 0; k < p.params.size(); ++k) {
    HostTensor param = exe.tensor(p.params[k]);
    HostTensor grad = exe.tensor(p.grads[k]);
    const int64_t n = param.numel(), stride = std::max<int64_t>(1, n / 7);
    std::vector<double> analytic, numeric;
    for (int64_t i = 0; i < n; i += stride) {
      numeric.push_back(central_difference(loss, param.as<double>()[i], eps));
      analytic.push_back(grad.as<double>()[i]);
    }
    expect_gradient_matches(analytic, numeric, kTolerance, GradError::PerElement, name + ": " + param.spec->name,
                            size_t(stride));
  }
  InputGradient in;
  in.analytic = testing::host_values(exe.tensor(p.input_grad));  // later forwards leave it as it is
  HostTensor x = exe.tensor(p.input);
  for (int64_t i = 0; i < x.numel(); ++i) in.numeric.push_back(central_difference(loss, x.as<double>()[i], eps));
  expect_gradient_matches(in.analytic, in.numeric, kTolerance, GradError::PerElement, name + ": the data batch");
  return in;
}

Blueprint head(Blueprint m) { return m.flatten("flat").fc(4, true, "head"); }


// The data batch itself chunked (its gradient is the first unit's), then a unit reading the first's
// shuffle in 4 groups of 2.
Blueprint shufflenet_units() {
  Blueprint m("shufflenet_units");
  channel_test::shufflenet_unit(m, "stage2.0", 8, 2);
  channel_test::shufflenet_unit(m, "stage2.1", 8, 4);
  return head(m);
}

TEST(GradCheck, ShuffleNetV2Units) {
  for (bool fuse : {true, false}) {
    const InputGradient in = check_gradients(fuse ? "units fused" : "units unfused", shufflenet_units(), {5, 5, 8}, fuse);
    // The check can fail: the input's gradient with its halves swapped (each half's gradient in the
    // other's channels) lands far outside the tolerance.
    std::vector<double> swapped = in.analytic;
    for (size_t row = 0; row < swapped.size() / 8; ++row)
      std::swap_ranges(swapped.begin() + long(row * 8), swapped.begin() + long(row * 8 + 4),
                       swapped.begin() + long(row * 8 + 4));
    EXPECT_GT(testing::gradient_error(swapped, in.numeric, GradError::PerElement).error, 100 * kTolerance);
  }
}

// Slices that do not lie side by side, whose gradients GRAD_SUM adds: [0, 4) and [2, 6) overlap, [7, 8)
// leaves channel 6 to no slice, and a convolution reads the whole input too.
TEST(GradCheck, OverlappingAndGappedSlices) {
  Blueprint m("slices");
  const Blueprint::Ref x = m.last();
  m.channel_slice(0, 4, "lo");
  const Blueprint::Ref lo = m.last();
  m.from(x).channel_slice(2, 4, "mid");
  const Blueprint::Ref mid = m.last();
  m.from(x).channel_slice(7, 1, "last");
  const Blueprint::Ref last = m.last();
  m.from(x).conv(3, 3, 1, 1, true, "conv");
  m.concat({lo, mid, last, m.last()}, "cat").conv(4, 3, 1, 1, true, "mix").tanh("mix_act");
  check_gradients("overlapping and gapped slices", head(m), {5, 5, 8}, true);
}

// Flat features (ConvNeXt-style heads aside, x.narrow on rows): two slices side by side of a
// flattened map, [0, 30) and [30, 100), each read by a linear layer, their sum through tanh.
TEST(GradCheck, SlicesOfFlatRows) {
  Blueprint m("flat_slices");
  m.conv(4, 3, 1, 1, true, "c0").flatten("features");
  const Blueprint::Ref features = m.last();
  m.channel_slice(0, 30, "s1").fc(5, true, "f1");
  const Blueprint::Ref f1 = m.last();
  m.from(features).channel_slice(30, 70, "s2").fc(5, true, "f2");
  m.add(f1, m.last(), "sum").tanh("act").fc(4, true, "head");
  check_gradients("flat slices", m, {5, 5, 2}, true);
}

}  // namespace
}  // namespace kiln
