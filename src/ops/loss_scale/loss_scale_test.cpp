// The loss-scaling ops on the CPU: the loss gradient scaled in place, the inf/NaN check over the
// gradient region, and the scale's backoff and growth (PyTorch's GradScaler rule), with the errors
// for badly bound state or attributes.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/loss_scale/loss_scale_contract.h"
#include "ops/loss_scale/loss_scale_rule.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;
using kiln::testing::OpBench;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The flag of FIND_NONFINITE over `values` (F32), starting from `stale`.
int32_t found_in(const std::vector<double>& values, int32_t stale = 0) {
  OpBench b;
  const int grads = b.add("grads", {int64_t(values.size())}, DType::F32), found = b.add("found", {1}, DType::I32);
  b.fill(grads, values);
  b.fill(found, {double(stale)});
  b.run(FindNonFinite<TensorId>{grads, found});
  return b.values<int32_t>(found)[0];
}

TEST(FindNonFinite, FlagsInfAndNaNAnywhere) {
  std::vector<double> clean(1000);
  for (size_t i = 0; i < clean.size(); ++i) clean[i] = (i % 7 == 0 ? -1.0 : 1.0) * double(FLT_MAX) / double(i + 1);
  EXPECT_EQ(found_in(clean), 0);
  EXPECT_EQ(found_in(clean, 1), 0) << "a clean step clears the last step's flag";
  for (double bad : {kInf, -kInf, kNaN})
    for (size_t at : {size_t(0), size_t(500), size_t(999)}) {
      std::vector<double> g = clean;
      g[at] = bad;
      EXPECT_EQ(found_in(g), 1) << bad << " at " << at;
    }
}

TEST(FindNonFinite, LooksInEveryPieceOfALargeRegion) {
  // The CPU check runs in pieces on the thread pool; the answer must cover all of them.
  const size_t n = 300001;
  EXPECT_EQ(found_in(std::vector<double>(n, 1.0)), 0);
  for (size_t at : {size_t(0), size_t(65535), size_t(65536), size_t(200000), n - 1}) {
    std::vector<double> g(n, 1.0);
    g[at] = kInf;
    EXPECT_EQ(found_in(g), 1) << "inf at " << at;
  }
}

TEST(FindNonFinite, ChecksFloat64Regions) {
  OpBench b;
  const int grads = b.add("grads", {1.0, kNaN, 2.0}), found = b.add("found", {1}, DType::I32);
  b.run(FindNonFinite<TensorId>{grads, found});
  EXPECT_EQ(b.values<int32_t>(found)[0], 1);
}

struct Scaler {
  OpBench b;
  int found = b.add("found", {1}, DType::I32), scale = b.add("loss_scale", {1}, DType::F32),
      clean = b.add("clean_steps", {1}, DType::I32);
  UpdateLossScale<TensorId> op{found, scale, clean};
  explicit Scaler(float init, int32_t interval = 3) {
    b.fill(scale, {init});
    op.growth_interval = interval;
  }
  // One step's update after a step with (true) or without inf/NaN gradients.
  void step(bool nonfinite) {
    b.fill(found, {nonfinite ? 1.0 : 0.0});
    b.run(op);
  }
  float value() { return b.values<float>(scale)[0]; }
  int32_t count() { return b.values<int32_t>(clean)[0]; }
};

TEST(UpdateLossScale, BacksOffOnNonFiniteAndGrowsAfterTheInterval) {
  Scaler s(65536.f);
  s.step(false);
  s.step(false);
  EXPECT_EQ(s.value(), 65536.f);
  EXPECT_EQ(s.count(), 2);
  s.step(false);  // the third clean step in a row
  EXPECT_EQ(s.value(), 131072.f);
  EXPECT_EQ(s.count(), 0);
  s.step(false);
  s.step(true);
  EXPECT_EQ(s.value(), 65536.f);
  EXPECT_EQ(s.count(), 0) << "a non-finite step restarts the count";
  s.step(true);
  EXPECT_EQ(s.value(), 32768.f);
  for (int i = 0; i < 3; ++i) s.step(false);
  EXPECT_EQ(s.value(), 65536.f);
}

TEST(UpdateLossScale, GrowthThatOverflowsKeepsTheScale) {
  Scaler s(FLT_MAX / 1.5f, 1);
  s.step(false);
  EXPECT_EQ(s.value(), FLT_MAX / 1.5f);
  EXPECT_EQ(s.count(), 0);
}

TEST(UpdateLossScale, OtherFactorsAsGiven) {
  Scaler s(1000.f, 2);
  s.op.growth_factor = 3.f, s.op.backoff_factor = 0.25f;
  s.step(true);
  EXPECT_EQ(s.value(), 250.f);
  s.step(false);
  s.step(false);
  EXPECT_EQ(s.value(), 750.f);
}

TEST(UpdateLossScale, RuleMatchesTheOpStepByStep) {
  // The shared rule is what the CUDA kernel runs; the op must be that rule.
  Scaler s(4.f, 2);
  float scale = 4.f;
  int32_t clean = 0;
  const loss_scale::Rule rule{2.f, 0.5f, 2};
  for (bool nonfinite : {false, false, false, true, false, true, true, false, false}) {
    s.step(nonfinite);
    loss_scale::update(nonfinite, scale, clean, rule);
    EXPECT_EQ(s.value(), scale);
    EXPECT_EQ(s.count(), clean);
  }
}

TEST(LossScaleOps, RejectBadStateAndAttributes) {
  Scaler s(8.f);
  s.op.growth_factor = 1.f;
  expect_error([&] { s.step(false); }, {"UPDATE_LOSS_SCALE", "growth factor", "> 1"});
  s.op.growth_factor = 2.f, s.op.backoff_factor = 1.f;
  expect_error([&] { s.step(false); }, {"backoff factor", "(0, 1)"});
  s.op.backoff_factor = 0.5f, s.op.growth_interval = 0;
  expect_error([&] { s.step(false); }, {"growth interval", ">= 1"});

  OpBench b(0, "fc");
  const int grads = b.add("grads", {4}, DType::F32), found = b.add("found", {2}, DType::I32);
  expect_error([&] { b.run(FindNonFinite<TensorId>{grads, found}); }, {"FIND_NONFINITE", "'found'", "one I32"});
}

TEST(FindNonFinite, CpuRejectsComputeGradients) {
  // fp16/bf16 gradient regions exist only in mixed-precision programs, which run on CUDA.
  OpBench b;
  const int grads = b.add("grads", {4}, DType::F32), found = b.add("found", {1}, DType::I32),
            half = b.add("grads:compute", {8}, DType::F16);
  FindNonFinite<TensorId> check{grads, found};
  check.compute_grads = half;
  expect_error([&] { b.run(check); }, {"FIND_NONFINITE", "'grads:compute'", "mixed precision", "CUDA"});
  check.grads = -1, check.compute_grads = -1;
  expect_error([&] { b.run(check); }, {"FIND_NONFINITE", "no gradient region"});
}

}  // namespace
}  // namespace kiln
