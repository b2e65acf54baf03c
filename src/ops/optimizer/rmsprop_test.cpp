// RMSPROP_UPDATE on the CPU against RMSprop in double (rmsprop_reference_test.h), for each case's
// settings, several steps of the fp64 kernel (fp32 programs: rmsprop_program_test.cpp); under
// dynamic loss scaling a power-of-two scale divides out exactly and a flagged step changes
// nothing; missing state is refused naming it.
#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/optimizer/optimizer_contract.h"
#include "ops/optimizer/rmsprop_reference_test.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::OpBench;
using testing::RmspropCase;

constexpr int64_t kN = 37;
constexpr float kLr = 0.01f;

// An update bench of kN F64 elements: random parameters, zero state, the op of `c`.
struct RmspropBench {
  OpBench b;
  int grads, params, square_avg, momentum, grad_avg;
  RmspropUpdate<TensorId> op;
  RmspropBench(const RmspropCase& c, std::mt19937& rng) {
    grads = b.add("grads", std::vector<double>(kN, 0.0));
    params = b.add("params", testing::uniform_vec(rng, size_t(kN)));
    square_avg = b.add("square_avg", std::vector<double>(kN, 0.0));
    momentum = b.add("momentum", std::vector<double>(kN, 0.0));
    grad_avg = b.add("grad_avg", std::vector<double>(kN, 0.0));
    op.grads = grads, op.params = params, op.square_avg = square_avg;
    op.alpha = float(c.alpha), op.eps = float(c.eps), op.weight_decay = float(c.weight_decay);
    op.momentum = float(c.momentum), op.centered = c.centered;
    if (c.momentum != 0) op.momentum_buffer = momentum;
    if (c.centered) op.grad_avg = grad_avg;
    b.scalars.lr = kLr;
  }
};

TEST(RmspropOp, StepsAreRmsprop) {
  std::mt19937 rng(61);
  for (const RmspropCase& c : testing::rmsprop_cases()) {
    SCOPED_TRACE(c.name);
    RmspropBench k(c, rng);
    const testing::RmspropReference ref = testing::rmsprop_reference(c, kLr);
    std::vector<double> w = k.b.values(k.params), v(kN, 0.0), m(kN, 0.0), a(kN, 0.0);
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const std::vector<double> g = testing::uniform_vec(rng, size_t(kN));
      k.b.fill(k.grads, g);
      k.b.run(k.op);
      ref.step(w.data(), v.data(), m.data(), a.data(), g.data(), kN);
      testing::expect_close("params", k.b.values(k.params), w, 1e-14);
      testing::expect_close("square_avg", k.b.values(k.square_avg), v, 1e-14);
      if (c.momentum != 0) {
        testing::expect_close("momentum buffer", k.b.values(k.momentum), m, 1e-14);
      }
      if (c.centered) {
        testing::expect_close("grad_avg", k.b.values(k.grad_avg), a, 1e-14);
      }
    }
    // The state left alone where the settings keep none.
    if (c.momentum == 0) {
      EXPECT_EQ(k.b.values(k.momentum), std::vector<double>(kN, 0.0));
    }
    if (!c.centered) {
      EXPECT_EQ(k.b.values(k.grad_avg), std::vector<double>(kN, 0.0));
    }
  }
}

// The op reads lr from the step's scalars: the same op at another lr moves the parameters by as
// much more.
TEST(RmspropOp, TheLearningRateIsTheStepsScalar) {
  std::mt19937 rng(62);
  const RmspropCase& c = testing::rmsprop_cases()[0];
  RmspropBench one(c, rng);
  std::mt19937 same(62);
  RmspropBench two(c, same);
  const std::vector<double> start = one.b.values(one.params), g = testing::uniform_vec(rng, size_t(kN));
  one.b.fill(one.grads, g), two.b.fill(two.grads, g);
  two.b.scalars.lr = 2 * kLr;
  one.b.run(one.op), two.b.run(two.op);
  const std::vector<double> a = one.b.values(one.params), b = two.b.values(two.params);
  for (int64_t i = 0; i < kN; ++i) EXPECT_NEAR(b[i] - start[i], 2 * (a[i] - start[i]), 1e-15) << i;
}

constexpr double kScale = 1024;

TEST(RmspropOp, ALossScaleDividesOutExactlyAndAFlaggedStepChangesNothing) {
  const RmspropCase& c = testing::rmsprop_cases()[3];
  auto run = [&](bool with_scaling, int32_t flag) {
    std::mt19937 rng(63);
    RmspropBench k(c, rng);
    const int scale = k.b.add("loss_scale", {1}, DType::F32), found = k.b.add("found", {1}, DType::I32);
    k.b.fill(scale, {kScale});
    k.b.fill(found, {double(flag)});
    if (with_scaling) k.op.loss_scale = scale, k.op.found_nonfinite = found;
    for (int step = 0; step < 3; ++step) {
      std::vector<double> g = testing::uniform_vec(rng, size_t(kN));
      if (with_scaling)
        for (double& x : g) x *= kScale;
      if (flag) g[1] = std::numeric_limits<double>::infinity(), g[2] = std::numeric_limits<double>::quiet_NaN();
      k.b.fill(k.grads, g);
      k.b.run(k.op);
    }
    return std::vector<std::vector<double>>{k.b.values(k.params), k.b.values(k.square_avg),
                                            k.b.values(k.momentum), k.b.values(k.grad_avg)};
  };
  EXPECT_EQ(run(true, 0), run(false, 0));
  std::mt19937 rng(63);
  RmspropBench untouched(c, rng);
  EXPECT_EQ(run(true, 1), (std::vector<std::vector<double>>{untouched.b.values(untouched.params),
                                                            std::vector<double>(kN, 0.0), std::vector<double>(kN, 0.0),
                                                            std::vector<double>(kN, 0.0)}));
}

TEST(RmspropOp, MissingStateIsRefusedNamingIt) {
  std::mt19937 rng(64);
  RmspropBench k(testing::rmsprop_cases()[3], rng);
  k.op.grad_avg = TensorId();
  expect_error([&] { k.b.run(k.op); }, {"RMSPROP_UPDATE", "grad_avg"});
  k.op.grad_avg = k.grad_avg, k.op.momentum_buffer = TensorId();
  expect_error([&] { k.b.run(k.op); }, {"RMSPROP_UPDATE", "momentum"});
  k.op.momentum_buffer = k.momentum, k.op.alpha = 1.5f;
  expect_error([&] { k.b.run(k.op); }, {"RMSPROP_UPDATE", "alpha"});
}

}  // namespace
}  // namespace kiln
