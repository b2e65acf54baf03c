// A float64 program scales what dropout and stochastic depth keep by PyTorch's 1 / (1 - p), p a
// Python float (a double): 1 / (1 - 0.2) = 1.25, where float(0.2) gives 1.2500000058 (3.7e-9 off).
#include <gtest/gtest.h>

#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"

namespace kiln {
namespace {

constexpr double kP = 0.2;

// The training forward of `m` in float64 on ones: what it gives.
std::vector<double> forward_on_ones(const Blueprint& m, int batch) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = batch, o.loss = false;
  Executable exe(compile(m, o), 1);
  const std::vector<double> ones(exe.read<double>(exe.program().input).size(), 1.0);
  exe.write(exe.program().input, ones.data(), ones.size() * sizeof(double));
  exe.run_forward(StepScalars{0.f, 0, 3});
  return exe.read<double>(exe.program().logits);
}

// Every value is 0 (dropped) or exactly PyTorch's scale, and both occur.
void expect_pytorchs_scale(const std::vector<double>& y) {
  const double torch = 1.0 / (1.0 - kP), rounded = 1.0 / (1.0 - double(float(kP)));
  ASSERT_NE(torch, rounded) << "the check could not fail";
  int kept = 0, dropped = 0;
  for (double v : y) {
    if (v == 0) ++dropped;
    else {
      ++kept;
      ASSERT_EQ(v, torch) << "kept values are scaled by 1 / (1 - 0.2), not by " << rounded;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(dropped, 0);
}

TEST(DropoutPPrecision, Float64DropoutScalesByPyTorchsOneOverOneMinusP) {
  Blueprint m("dropout_p");
  m.input(4, 4, 8).dropout(kP, "drop");
  expect_pytorchs_scale(forward_on_ones(m, 4));
}

TEST(DropoutPPrecision, Float64StochasticDepthScalesByPyTorchsOneOverOneMinusP) {
  Blueprint m("stochastic_depth_p");
  m.input(2, 2, 4).stochastic_depth(kP, "sd");
  expect_pytorchs_scale(forward_on_ones(m, 32));
}

}  // namespace
}  // namespace kiln
