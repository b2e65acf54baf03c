// A float64 program normalizes with PyTorch's eps and momentum (Python floats: doubles), not their
// float32 roundings. A batch whose per-channel variance (~1e-3) is of eps's size shows the gap: eps
// = float(0.001) moves y by ~1e-8 relatively, momentum = float(0.01) the running mean by ~2e-10,
// both far above float64's rounding (~1e-16), so the test fails where either is held as a float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"

namespace kiln {
namespace {

constexpr int kN = 4, kH = 3, kW = 5, kC = 4;
constexpr double kEps = 1e-3, kMomentum = 0.01;

struct BnRun {
  std::vector<double> x, y, running_mean, running_var;
};

BnRun run_fp64_bn() {
  Blueprint m("bn_eps");
  m.input(kH, kW, kC).bn("bn", kEps, kMomentum);
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = kN, o.loss = false;
  Executable exe(compile(m, o), 1);
  BnRun r;
  std::mt19937 rng(7);
  std::normal_distribution<double> spread(0.0, 0.03);  // per-channel variance ~1e-3, eps's size
  r.x.resize(size_t(kN * kH * kW * kC));
  for (size_t i = 0; i < r.x.size(); ++i) r.x[i] = 0.5 * double(i % kC) + spread(rng);  // NHWC: channel i % C
  exe.write(exe.program().input, r.x.data(), r.x.size() * sizeof(double));
  exe.run_forward(StepScalars{0.f, 0, 1});
  r.y = exe.read<double>(exe.program().logits);
  r.running_mean = exe.read<double>(exe.id("bn.running_mean"));
  r.running_var = exe.read<double>(exe.id("bn.running_var"));
  return r;
}

struct Reference {
  std::vector<double> y, running_mean, running_var;
};

// PyTorch's training-mode BatchNorm (gamma 1, beta 0, running statistics from 0 and 1) in long double.
Reference reference(const std::vector<double>& x, double eps, double momentum) {
  const int64_t m = int64_t(x.size()) / kC;
  Reference r;
  r.y.resize(x.size());
  for (int c = 0; c < kC; ++c) {
    long double sum = 0, squares = 0;
    for (int64_t i = 0; i < m; ++i) sum += x[size_t(i * kC + c)];
    const long double mean = sum / m;
    for (int64_t i = 0; i < m; ++i) squares += (x[size_t(i * kC + c)] - mean) * (x[size_t(i * kC + c)] - mean);
    const long double var = squares / m, rstd = 1 / std::sqrt(var + (long double)eps);
    for (int64_t i = 0; i < m; ++i) r.y[size_t(i * kC + c)] = double((x[size_t(i * kC + c)] - mean) * rstd);
    r.running_mean.push_back(double((long double)momentum * mean));
    r.running_var.push_back(double((1 - (long double)momentum) + (long double)momentum * squares / (m - 1)));
  }
  return r;
}

// ||a - b|| / ||b||.
double relative_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
  return std::sqrt(diff / norm);
}

TEST(BatchNormEpsPrecision, Float64ProgramUsesPyTorchsDoubleEpsAndMomentum) {
  const BnRun r = run_fp64_bn();
  const Reference torch = reference(r.x, kEps, kMomentum);
  const Reference rounded = reference(r.x, double(float(kEps)), double(float(kMomentum)));
  ASSERT_EQ(r.y.size(), torch.y.size());
  std::printf("y: %.2e from PyTorch's (eps 0.001), %.2e from eps = float(0.001); running mean: %.2e, %.2e\n",
              relative_l2(r.y, torch.y), relative_l2(r.y, rounded.y), relative_l2(r.running_mean, torch.running_mean),
              relative_l2(r.running_mean, rounded.running_mean));
  EXPECT_LT(relative_l2(r.y, torch.y), 1e-14) << "y as PyTorch's float64 BatchNorm(eps=0.001)";
  EXPECT_GT(relative_l2(r.y, rounded.y), 1e-9) << "eps = float(0.001) moves y this far: the check can fail";
  EXPECT_LT(relative_l2(r.running_mean, torch.running_mean), 1e-14);
  EXPECT_GT(relative_l2(r.running_mean, rounded.running_mean), 1e-11) << "momentum = float(0.01) moves it this far";
  EXPECT_LT(relative_l2(r.running_var, torch.running_var), 1e-14);
}

}  // namespace
}  // namespace kiln
