// The registered update ops: hyper-parameters from the op's contract, lr and step from the step
// scalars, and errors for badly bound regions or hyper-parameters.
#include <gtest/gtest.h>

#include <functional>
#include <string>

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
  opt.momentum = 0.3f, opt.nesterov = false, opt.weight_decay = 0.5f;  // not read: the op carries its own
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

}  // namespace
}  // namespace kiln
