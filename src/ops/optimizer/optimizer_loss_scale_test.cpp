// The update ops under dynamic loss scaling (optimizer_contract.h): gradients scaled by a power of
// two and divided back by the op give the unscaled update exactly, and a flagged step leaves the
// parameters and the optimizer state bit for bit as they were.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "ops/optimizer/lars_bench_test.h"
#include "ops/optimizer/optimizer_contract.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;
using kiln::testing::OpBench;

const std::vector<double> kGrad{0.5, -1.5, 0.25, 3e-3}, kParam{1.0, -2.0, 0.5, 0.125};
constexpr double kScale = 1024;

std::vector<double> scaled(const std::vector<double>& g, double by) {
  std::vector<double> out = g;
  for (double& x : out) x *= by;
  return out;
}

// An update bench: F64 regions and the scaler's state (scale, flag) of the given values.
struct Bench {
  OpBench b;
  int scale = b.add("loss_scale", {1}, DType::F32), found = b.add("found", {1}, DType::I32);
  Bench(double scale_value, int32_t flag) {
    b.fill(scale, {scale_value});
    b.fill(found, {double(flag)});
    b.scalars.lr = 0.125f, b.scalars.step = 2;
  }
};

TEST(UpdateOpsLossScaled, SgdDividesTheScaleOutExactly) {
  Bench plain(1, 0), scaled_bench(kScale, 0);
  auto sgd = [](Bench& k, const std::vector<double>& g, bool with_scaling) {
    const int gi = k.b.add("grads", g), p = k.b.add("params", kParam), buf = k.b.add("momentum", {0.1, 0.2, 0.3, 0.4});
    SgdUpdate<TensorId> op{gi, p, buf, 0.9f, 0.01f, true};
    if (with_scaling) op.loss_scale = k.scale, op.found_nonfinite = k.found;
    for (int step = 0; step < 3; ++step) k.b.run(op);
    return std::vector<std::vector<double>>{k.b.values(p), k.b.values(buf)};
  };
  EXPECT_EQ(sgd(scaled_bench, scaled(kGrad, kScale), true), sgd(plain, kGrad, false));
}

TEST(UpdateOpsLossScaled, AdamWDividesTheScaleOutExactly) {
  Bench plain(1, 0), scaled_bench(kScale, 0);
  auto adamw = [](Bench& k, const std::vector<double>& g, bool with_scaling) {
    const int gi = k.b.add("grads", g), p = k.b.add("params", kParam), m = k.b.add("exp_avg", {0, 0, 0, 0}),
              v = k.b.add("exp_avg_sq", {0, 0, 0, 0});
    AdamWUpdate<TensorId> op{gi, p, m, v};
    op.weight_decay = 0.01f;
    if (with_scaling) op.loss_scale = k.scale, op.found_nonfinite = k.found;
    for (int step = 0; step < 3; ++step) k.b.run(op);
    return std::vector<std::vector<double>>{k.b.values(p), k.b.values(m), k.b.values(v)};
  };
  EXPECT_EQ(adamw(scaled_bench, scaled(kGrad, kScale), true), adamw(plain, kGrad, false));
}

TEST(UpdateOpsLossScaled, AFlaggedStepChangesNothing) {
  std::vector<double> bad = kGrad;
  bad[1] = std::numeric_limits<double>::infinity(), bad[2] = std::numeric_limits<double>::quiet_NaN();
  Bench k(kScale, 1);
  const int g = k.b.add("grads", bad), p = k.b.add("params", kParam), buf = k.b.add("momentum", {0.1, 0.2, 0.3, 0.4}),
            m = k.b.add("exp_avg", {0.1, 0.2, 0.3, 0.4}), v = k.b.add("exp_avg_sq", {0.5, 0.6, 0.7, 0.8});
  SgdUpdate<TensorId> sgd{g, p, buf, 0.9f, 0.01f, false};
  sgd.loss_scale = k.scale, sgd.found_nonfinite = k.found;
  AdamWUpdate<TensorId> adamw{g, p, m, v};
  adamw.loss_scale = k.scale, adamw.found_nonfinite = k.found;
  k.b.run(sgd);
  k.b.run(adamw);
  EXPECT_EQ(k.b.values(p), kParam);
  EXPECT_EQ(k.b.values(buf), (std::vector<double>{0.1, 0.2, 0.3, 0.4}));
  EXPECT_EQ(k.b.values(m), (std::vector<double>{0.1, 0.2, 0.3, 0.4}));
  EXPECT_EQ(k.b.values(v), (std::vector<double>{0.5, 0.6, 0.7, 0.8}));
}

// LARS takes its norms of the unscaled gradients: dividing a power of two out is exact, so the
// trust ratios and the whole step are those of the unscaled run, bit for bit.
TEST(UpdateOpsLossScaled, LarsDividesTheScaleOutExactly) {
  const std::vector<testing::NamedShape> tensors = {{"conv.weight", {3, 2, 2, 2}}, {"bn.weight", {3}},
                                                    {"fc.weight", {4, 5}}};
  auto lars = [&](bool with_scaling) {
    testing::LarsBench k(tensors);
    const int scale = k.b.add("loss_scale", {1}, DType::F32), found = k.b.add("found", {1}, DType::I32);
    k.b.fill(scale, {kScale});
    k.b.scalars.lr = 0.125f;
    std::mt19937 rng(31);
    k.random_params(rng);
    LarsUpdate<TensorId> op = k.op();
    op.weight_decay = 0.01f, op.trust_coefficient = 0.02f;
    if (with_scaling) op.loss_scale = scale, op.found_nonfinite = found;
    for (int step = 0; step < 3; ++step) {
      const std::vector<double> g = k.random_grads(rng);
      if (with_scaling) k.b.fill(k.grads, scaled(g, kScale));
      k.b.run(op);
    }
    return std::vector<std::vector<double>>{k.b.values(k.params), k.b.values(k.momentum)};
  };
  EXPECT_EQ(lars(true), lars(false));
}

TEST(UpdateOpsLossScaled, AFlaggedLarsStepChangesNothing) {
  testing::LarsBench k({{"conv.weight", {3, 2, 2, 2}}, {"bn.weight", {3}}});
  const int scale = k.b.add("loss_scale", {1}, DType::F32), found = k.b.add("found", {1}, DType::I32);
  k.b.fill(scale, {kScale});
  k.b.fill(found, {1});
  k.b.scalars.lr = 0.125f;
  std::mt19937 rng(32);
  const std::vector<double> w = k.random_params(rng), v = k.fill_random(k.momentum, rng);
  std::vector<double> bad = k.random_grads(rng);
  bad[1] = std::numeric_limits<double>::infinity(), bad[2] = std::numeric_limits<double>::quiet_NaN();
  k.b.fill(k.grads, bad);
  LarsUpdate<TensorId> op = k.op();
  op.loss_scale = scale, op.found_nonfinite = found;
  k.b.run(op);
  EXPECT_EQ(k.b.values(k.params), w);
  EXPECT_EQ(k.b.values(k.momentum), v);
}

TEST(UpdateOpsLossScaled, RejectMisshapenState) {
  Bench k(kScale, 0);
  const int g = k.b.add("grads", kGrad), p = k.b.add("params", kParam), wide = k.b.add("wide_scale", {1}, DType::F64);
  SgdUpdate<TensorId> sgd{g, p, -1, 0.f, 0.f, false};
  sgd.loss_scale = wide;
  expect_error([&] { k.b.run(sgd); }, {"SGD_UPDATE", "'wide_scale'", "one F32"});
}

}  // namespace
}  // namespace kiln
