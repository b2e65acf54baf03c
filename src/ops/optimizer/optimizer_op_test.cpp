// The registered update ops: hyper-parameters from the op's contract, lr and step from the step
// scalars (LARS: its tensors from the parameter views), and errors for badly bound regions, views
// or hyper-parameters.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>

#include "ops/optimizer/lars_bench_test.h"
#include "ops/optimizer/lars_reference_test.h"
#include "ops/optimizer/optimizer_contract.h"
#include "ops/optimizer/optimizer_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using kiln::testing::expect_error;

// The benches here hold only flat F64 update regions; update ops belong to no layer.
using kiln::testing::OpBench;

const std::vector<double> kGrad{0.5, -1.5, 0.25}, kParam{1.0, -2.0, 0.5};

TEST(UpdateOps, SgdTakesAttributesAndLearningRate) {
  OpBench b;
  OptimizerConfig& opt = b.program.options.optimizer;
  opt.set("momentum", 0.3).set("nesterov", 0).set("weight_decay", 0.5);  // not read: the op carries its own
  const int g = b.add("grads", kGrad), p = b.add("params", kParam),
            buf = b.add("momentum", {0, 0, 0});
  const SgdUpdate<TensorId> sgd{g, p, buf, 0.8f, 0.125f, true};
  b.scalars.lr = 0.25f;
  std::vector<double> want = kParam, want_buf(3, 0.0);
  const cpu::SgdHyper h{0.25, sgd.momentum, 0.125, true};
  for (int step = 0; step < 3; ++step) {
    b.run(sgd);
    cpu::sgd_update<double>(3, kGrad.data(), want.data(), want_buf.data(), h);
  }
  EXPECT_EQ(b.values(p), want);
  EXPECT_EQ(b.values(buf), want_buf);
}

TEST(UpdateOps, SgdWithoutMomentumNeedsNoBuffer) {
  OpBench b;
  const int g = b.add("grads", kGrad), p = b.add("params", kParam);
  b.scalars.lr = 0.5f;
  b.run(SgdUpdate<TensorId>{g, p, -1, 0.f, 0.f, false});
  EXPECT_EQ(b.values(p), (std::vector<double>{0.75, -1.25, 0.375}));
}

TEST(UpdateOps, AdamWBiasCorrectsWithStepPlusOne) {
  OpBench b;
  const std::vector<double> m0{0.1, 0.2, -0.3}, v0{0.01, 0.02, 0.03};
  const int g = b.add("grads", kGrad), p = b.add("params", kParam), m = b.add("exp_avg", m0),
            v = b.add("exp_avg_sq", v0);
  AdamWUpdate<TensorId> adamw{g, p, m, v};
  adamw.weight_decay = 0.0625f;
  b.scalars.lr = 0.01f, b.scalars.step = 4;  // four updates already taken: this is update 5
  b.run(adamw);
  std::vector<double> want = kParam, want_m = m0, want_v = v0;
  cpu::adamw_update<double>(3, kGrad.data(), want.data(), want_m.data(), want_v.data(),
                            {double(0.01f), adamw.beta1, adamw.beta2, adamw.eps, 0.0625, 5});
  EXPECT_EQ(b.values(p), want);
  EXPECT_EQ(b.values(m), want_m);
  EXPECT_EQ(b.values(v), want_v);
}

TEST(UpdateOps, RejectBadRegionsAndHyperParameters) {
  OpBench b;
  const int g = b.add("grads", kGrad), p = b.add("params", kParam), buf = b.add("momentum", {0, 0});
  b.scalars.lr = 0.1f;
  const SgdUpdate<TensorId> with_momentum{g, p, buf, 0.9f, 0.f, false};
  expect_error([&] { b.run(with_momentum); }, {"SGD_UPDATE", "'momentum'", "2", "3"});
  expect_error([&] { b.run(SgdUpdate<TensorId>{g, p, -1, 0.9f, 0.f, false}); },
               {"momentum region is not bound"});
  b.scalars.lr = -1;
  expect_error([&] { b.run(with_momentum); }, {"learning rate -1"});
  b.scalars.lr = 0.1f;
  expect_error([&] { b.run(SgdUpdate<TensorId>{g, p, -1, 0.f, 0.f, true}); }, {"nesterov"});
  const int v = b.add("exp_avg_sq", {0, 0, 0});
  AdamWUpdate<TensorId> adamw{g, p, v, v};
  adamw.beta2 = 1.0f;
  expect_error([&] { b.run(adamw); }, {"ADAMW_UPDATE", "betas"});
}

// Compute copies exist only in fp16/bf16 programs, which run on CUDA: the CPU ops refuse them,
// whichever of the two is bound, before touching anything.
TEST(UpdateOps, CpuRejectsComputeCopies) {
  OpBench b;
  const int g = b.add("grads", kGrad), p = b.add("params", kParam), buf = b.add("momentum", {0, 0, 0}),
            m = b.add("exp_avg", {0, 0, 0}), v = b.add("exp_avg_sq", {0, 0, 0});
  const int half_grads = b.add("grads:compute", {8}, DType::F16), half_params = b.add("params:compute", {8}, DType::F16);
  b.scalars.lr = 0.1f;
  for (bool bind_grads : {true, false}) {
    SCOPED_TRACE(bind_grads ? "compute_grads" : "compute_params");
    SgdUpdate<TensorId> sgd{g, p, buf, 0.9f, 0.f, false};
    AdamWUpdate<TensorId> adamw{g, p, m, v};
    (bind_grads ? sgd.compute_grads : sgd.compute_params) = bind_grads ? half_grads : half_params;
    (bind_grads ? adamw.compute_grads : adamw.compute_params) = bind_grads ? half_grads : half_params;
    expect_error([&] { b.run(sgd); }, {"SGD_UPDATE", "mixed precision", "CUDA"});
    expect_error([&] { b.run(adamw); }, {"ADAMW_UPDATE", "mixed precision", "CUDA"});
  }
  EXPECT_EQ(b.values(p), kParam);
  EXPECT_EQ(b.values(buf), (std::vector<double>{0, 0, 0}));
}

// --- LARS ---

using kiln::testing::LarsBench;
using kiln::testing::LarsReference;

// Tensors as a model has them: a convolution's weight, BatchNorm's scale and shift, a linear
// layer's weight and bias, and a weight whose gradient is zero (trust ratio 1).
const std::vector<testing::NamedShape> kLarsShapes = {{"conv.weight", {4, 3, 2, 2}}, {"bn.weight", {4}},
                                                       {"bn.bias", {4}},           {"fc.weight", {5, 6}},
                                                       {"fc.bias", {5}},           {"fc2.weight", {2, 5}}};
constexpr size_t kZeroGradient = 5;

void check_lars_op(bool skip_1d) {
  LarsBench k(kLarsShapes);
  LarsUpdate<TensorId> lars = k.op();
  lars.momentum = 0.75f, lars.weight_decay = 0.0625f, lars.trust_coefficient = 0.015625f, lars.skip_1d = skip_1d;
  k.b.scalars.lr = 0.25f;
  std::mt19937 rng(21);
  std::vector<double> w = k.random_params(rng), v(w.size(), 0.0);
  const LarsReference ref{0.25, 0.75, 0.0625, 0.015625};
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<double> g = k.random_grads(rng, kZeroGradient);
    k.b.run(lars);
    ref.step(k.segments(skip_1d), w, v, g);
    EXPECT_LT(testing::lars_err(k.b.values(k.params), w), 1e-13);
    EXPECT_LT(testing::lars_err(k.b.values(k.momentum), v), 1e-13);
  }
  k.expect_gaps_untouched();
}

TEST(UpdateOps, LarsTakesItsTensorsFromTheViewsAndMatchesTheRule) { check_lars_op(true); }
TEST(UpdateOps, LarsWithoutSkipGivesOneDimensionalTensorsLarsSteps) { check_lars_op(false); }

// The trust ratio does act: the same op with another trust coefficient moves the 4-D weight by
// another amount, and the BatchNorm scale (1-D, skipped) by the same.
TEST(UpdateOps, LarsTrustCoefficientScalesOnlyTheTensorsItApplies) {
  std::vector<std::vector<double>> after;
  const std::vector<LarsSegment> segments = LarsBench(kLarsShapes).segments(true);
  for (float eta : {0.001f, 0.002f}) {
    LarsBench k(kLarsShapes);
    std::mt19937 rng(22);
    k.random_params(rng);
    k.random_grads(rng, kZeroGradient);
    LarsUpdate<TensorId> lars = k.op();
    lars.trust_coefficient = eta;
    k.b.scalars.lr = 0.5f;
    k.b.run(lars);
    after.push_back(k.b.values(k.params));
  }
  const LarsSegment weight = segments[0], scale = segments[1];
  ASSERT_TRUE(scale.plain);
  EXPECT_NE(after[0][size_t(weight.offset)], after[1][size_t(weight.offset)]);
  EXPECT_EQ(after[0][size_t(scale.offset)], after[1][size_t(scale.offset)]);
}

TEST(UpdateOps, LarsRejectsBadViewsAndHyperParameters) {
  LarsBench k(kLarsShapes);
  std::mt19937 rng(23);
  const std::vector<double> w = k.random_params(rng);
  k.random_grads(rng, kZeroGradient);
  k.b.scalars.lr = 0.1f;
  for (float eta : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    LarsUpdate<TensorId> lars = k.op();
    lars.trust_coefficient = eta;
    expect_error([&] { k.b.run(lars); }, {"LARS_UPDATE", "trust_coefficient", "--lars-eta"});
  }
  LarsUpdate<TensorId> negative = k.op();
  negative.momentum = -0.5f;
  expect_error([&] { k.b.run(negative); }, {"LARS_UPDATE", "momentum (-0.5)"});

  // A tensor that is no view into the parameter region, and views out of order.
  TensorSpec& second = k.b.program.tensors[size_t(k.views[1])];
  second.alias_of = -1;
  expect_error([&] { k.b.run(k.op()); },
               {"LARS_UPDATE", "'bn.weight'", "not a view into the parameter region 'params'", "F64"});
  second.alias_of = k.params;
  std::swap(k.b.program.tensors[size_t(k.views[0])].alias_offset, second.alias_offset);
  expect_error([&] { k.b.run(k.op()); }, {"LARS_UPDATE", "'bn.weight'", "in order and without overlapping"});
  std::swap(k.b.program.tensors[size_t(k.views[0])].alias_offset, second.alias_offset);
  k.b.program.tensors[size_t(k.views.back())].alias_offset = size_t(k.n) * sizeof(double);
  expect_error([&] { k.b.run(k.op()); }, {"LARS_UPDATE", "'fc2.weight'", "inside the region"});
  EXPECT_EQ(k.b.values(k.params), w) << "a refused update changed the parameters";
}

TEST(UpdateOps, LarsRejectsComputeCopies) {
  LarsBench k(kLarsShapes);
  LarsUpdate<TensorId> lars = k.op();
  lars.compute_grads = k.b.add("grads:compute", {8}, DType::F16);
  k.b.scalars.lr = 0.1f;
  expect_error([&] { k.b.run(lars); }, {"LARS_UPDATE", "mixed precision", "CUDA"});
}

}  // namespace
}  // namespace kiln
