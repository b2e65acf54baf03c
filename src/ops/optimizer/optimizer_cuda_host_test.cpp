// AdamW's per-step scalars, computed on the host for the CUDA update kernel: PyTorch's bias
// correction; and the checks of the compute prefix (and LARS's tensors) made before any launch. Needs the CUDA backend
// built, not a GPU, so it runs in the CPU suite.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kiln/error.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

TEST(OptimizerHost, AdamWScalarsFollowPyTorchBiasCorrection) {
  const cuda::AdamWScalars s = cuda::adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 0.05, 3);
  EXPECT_FLOAT_EQ(s.keep, float(1 - 1e-3 * 0.05));
  EXPECT_FLOAT_EQ(s.step_size, float(1e-3 / (1 - std::pow(0.9, 3))));
  EXPECT_FLOAT_EQ(s.bias2_sqrt, float(std::sqrt(1 - std::pow(0.999, 3))));
  EXPECT_THROW(cuda::adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 0.0, 0), Error);
}

// The regions are never touched: every case fails its checks before the launch.
TEST(OptimizerHost, ComputePrefixIsCheckedBeforeAnyLaunch) {
  float fp32[64] = {};
  uint16_t half[64] = {};
  const cuda::SgdScalars sgd = cuda::sgd_scalars(0.1, 0, 0, false);
  auto sgd_with = [&](cuda::ComputeCopies compute, const float* grad) {
    return [=, &fp32] { cuda::sgd_update(64, grad, fp32, nullptr, sgd, nullptr, "test", nullptr, compute); };
  };
  using testing::expect_error;
  expect_error(sgd_with({12, DType::F16, half, half}, fp32), {"test", "sgd_update", "12", "multiple of 8"});
  expect_error(sgd_with({72, DType::F16, half, half}, fp32), {"test", "prefix of 72 elements of 64"});
  expect_error(sgd_with({0, DType::F16, half, half}, fp32), {"test", "empty prefix"});
  expect_error(sgd_with({16, DType::F16, half, half}, nullptr), {"test", "no fp32 gradients", "48 elements"});
  expect_error(sgd_with({16, DType::F16, nullptr, half}, nullptr), {"test", "no fp32 gradients", "64 elements"});
  const cuda::AdamWScalars adam;
  expect_error(
      [&] {
        cuda::adamw_update(64, fp32, fp32, fp32, fp32, adam, nullptr, "test", nullptr, {-8, DType::BF16, half, half});
      },
      {"test", "adamw_update", "prefix of -8"});
}

// LARS's tensors, compute prefix and workspace are checked before any launch.
TEST(OptimizerHost, LarsTensorsAndWorkspaceAreCheckedBeforeAnyLaunch) {
  float a[64] = {}, b[64] = {}, c[64] = {};
  uint16_t half[64] = {};
  std::vector<float2> sums(cuda::lars_workspace_bytes(2) / sizeof(float2));
  const cuda::LarsScalars s = cuda::lars_scalars(0.1, 0.9, 0, 0.001);
  EXPECT_FLOAT_EQ(s.trust_coefficient, 0.001f);
  const size_t bytes = sums.size() * sizeof(float2);
  auto run = [&](std::vector<LarsSegment> segments, size_t workspace_bytes, cuda::ComputeCopies compute = {}) {
    return [=, &a, &b, &c, &sums] {
      cuda::lars_update(segments, 64, a, b, c, s, sums.data(), workspace_bytes, nullptr, "test", nullptr, compute);
    };
  };
  using testing::expect_error;
  expect_error(run({{0, 16, false}, {8, 16, false}}, bytes), {"test", "lars_update", "in order and apart"});
  expect_error(run({{0, 16, false}, {56, 16, false}}, bytes), {"test", "[56, 72)", "region of 64"});
  expect_error(run({{0, 16, false}, {24, 0, false}}, bytes), {"test", "non-empty"});
  expect_error(run({{0, 16, false}, {24, 16, false}}, 16), {"test", "workspace", "2 tensors"});
  expect_error(run({{0, 24, false}}, bytes, {16, DType::F16, half, half}),
               {"test", "across the end of the compute prefix (16)"});
  EXPECT_EQ(cuda::lars_blocks(1), 1);
  EXPECT_EQ(cuda::lars_blocks(8192 * 3 + 1), 4);
  EXPECT_EQ(cuda::lars_blocks(int64_t(1) << 40), 256);
}

}  // namespace
}  // namespace kiln
