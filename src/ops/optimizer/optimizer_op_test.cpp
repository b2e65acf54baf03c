// The registered update ops: hyper-parameters from the program's options, lr and step from the
// step scalars, and errors for badly bound regions or options.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "ops/common/cpu_test_util.h"
#include "ops/optimizer/optimizer_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
void register_optimizer_cpu();

namespace {

using kiln::testing::expect_error;

// A program holding only flat update regions, each in its own host vector.
struct UpdateBench {
  Program program;
  std::vector<std::vector<double>> memory;
  StepScalars scalars;

  UpdateBench() { register_optimizer_cpu(); }
  int add(const std::string& name, std::vector<double> values) {
    TensorSpec t;
    t.name = name, t.shape = {static_cast<int64_t>(values.size())}, t.dtype = DType::F64;
    program.tensors.push_back(t);
    memory.push_back(std::move(values));
    return static_cast<int>(program.tensors.size()) - 1;
  }
  void run(OpKind kind, std::vector<int> in, std::vector<int> out) {
    const Op op{kind, -1, std::move(in), std::move(out), {}};
    OpCall call{op, program, {}, {}, scalars};
    auto arg = [&](int id) {
      TensorArg a;
      if (id >= 0) a.spec = &program.tensors[id], a.data = memory[id].data();
      return a;
    };
    for (int id : op.in) call.in.push_back(arg(id));
    for (int id : op.out) call.out.push_back(arg(id));
    find_op(Device::CPU, kind)(call);
  }
};

TEST(UpdateOps, BothKindsAreRegistered) {
  register_optimizer_cpu();
  for (OpKind kind : {OpKind::SGD_UPDATE, OpKind::ADAMW_UPDATE})
    EXPECT_NO_THROW(find_op(Device::CPU, kind)) << op_kind_name(kind);
}

const std::vector<double> kGrad{0.5, -1.5, 0.25}, kParam{1.0, -2.0, 0.5};

TEST(UpdateOps, SgdTakesOptionsAndLearningRate) {
  UpdateBench b;
  OptimizerConfig& opt = b.program.options.optimizer;
  opt.momentum = 0.8f, opt.nesterov = true, opt.weight_decay = 0.125f;
  const int g = b.add("grads", kGrad), p = b.add("params", kParam),
            buf = b.add("momentum", {0, 0, 0});
  b.scalars.lr = 0.25f;
  std::vector<double> want = kParam, want_buf(3, 0.0);
  const cpu::SgdHyper h{0.25, opt.momentum, 0.125, true};
  for (int step = 0; step < 3; ++step) {
    b.run(OpKind::SGD_UPDATE, {g}, {p, buf});
    cpu::sgd_update<double>(3, kGrad.data(), want.data(), want_buf.data(), h);
  }
  EXPECT_EQ(b.memory[p], want);
  EXPECT_EQ(b.memory[buf], want_buf);
}

TEST(UpdateOps, SgdWithoutMomentumNeedsNoBuffer) {
  UpdateBench b;
  b.program.options.optimizer.momentum = 0;
  const int g = b.add("grads", kGrad), p = b.add("params", kParam);
  b.scalars.lr = 0.5f;
  b.run(OpKind::SGD_UPDATE, {g}, {p, -1});
  EXPECT_EQ(b.memory[p], (std::vector<double>{0.75, -1.25, 0.375}));
}

TEST(UpdateOps, AdamWBiasCorrectsWithStepPlusOne) {
  UpdateBench b;
  OptimizerConfig& opt = b.program.options.optimizer;
  opt.kind = OptimizerKind::AdamW, opt.weight_decay = 0.0625f;
  const std::vector<double> m0{0.1, 0.2, -0.3}, v0{0.01, 0.02, 0.03};
  const int g = b.add("grads", kGrad), p = b.add("params", kParam), m = b.add("exp_avg", m0),
            v = b.add("exp_avg_sq", v0);
  b.scalars.lr = 0.01f, b.scalars.step = 4;  // four updates already taken: this is update 5
  b.run(OpKind::ADAMW_UPDATE, {g}, {p, m, v});
  std::vector<double> want = kParam, want_m = m0, want_v = v0;
  cpu::adamw_update<double>(3, kGrad.data(), want.data(), want_m.data(), want_v.data(),
                            {double(0.01f), opt.beta1, opt.beta2, opt.eps, 0.0625, 5});
  EXPECT_EQ(b.memory[p], want);
  EXPECT_EQ(b.memory[m], want_m);
  EXPECT_EQ(b.memory[v], want_v);
}

TEST(UpdateOps, RejectBadRegionsAndOptions) {
  UpdateBench b;
  const int g = b.add("grads", kGrad), p = b.add("params", kParam), buf = b.add("momentum", {0, 0});
  b.scalars.lr = 0.1f;
  expect_error(
      [&] {
        b.run(OpKind::SGD_UPDATE, {g}, {p, buf});
      },
      {"SGD_UPDATE", "'momentum'", "2", "3"});
  expect_error([&] { b.run(OpKind::SGD_UPDATE, {g}, {p}); }, {"momentum region is not bound"});
  b.scalars.lr = -1;
  expect_error([&] { b.run(OpKind::SGD_UPDATE, {g}, {p, buf}); }, {"learning rate -1"});
  b.scalars.lr = 0.1f;
  b.program.options.optimizer.momentum = 0, b.program.options.optimizer.nesterov = true;
  expect_error([&] { b.run(OpKind::SGD_UPDATE, {g}, {p}); }, {"nesterov"});
  b.program.options.optimizer.beta2 = 1.0f;
  const int v = b.add("exp_avg_sq", {0, 0, 0});
  expect_error([&] { b.run(OpKind::ADAMW_UPDATE, {g}, {p, v, v}); }, {"ADAMW_UPDATE", "betas"});
}

}  // namespace
}  // namespace kiln
