// RMSprop through compile() and an Executable (optimizer "rmsprop"): the update is one
// RMSPROP_UPDATE carrying the settings, its state is the square average and, only where the
// settings need them, the momentum buffer and the gradient average; and a program trained with
// it moves every parameter as RMSprop in double says (rmsprop_reference_test.h, on the gradients
// the program's own backward wrote), step after step, in fp64 and fp32, with dynamic loss
// scaling too.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/optimizer/optimizer_contract.h"
#include "ops/optimizer/rmsprop_reference_test.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::RmspropCase;

// A convolution without bias, its BatchNorm, and a linear layer with bias.
Blueprint small_net() {
  Blueprint b("rmsprop_net");
  b.input(6, 6, 2).conv(4, 3, 1, 1, false, "conv1").bn("bn1").relu("relu1").maxpool(2, 2, 0, "pool1");
  b.flatten("flatten").fc(3, true, "fc");
  return b;
}

constexpr float kLr = 0.01f;

CompileOptions rmsprop_options(Precision precision, const RmspropCase& c) {
  CompileOptions o;
  o.batch = 4;
  o.precision = precision;
  o.optimizer = {"rmsprop"};
  o.optimizer.set("alpha", c.alpha).set("eps", c.eps).set("weight_decay", c.weight_decay);
  o.optimizer.set("momentum", c.momentum).set("centered", c.centered);
  return o;
}

template <class T>
std::vector<double> read_widened(Executable& exe, int id) {
  const std::vector<T> v = exe.read<T>(id);
  return std::vector<double>(v.begin(), v.end());
}

// Elements [offset, offset + n) of a state region, n the parameter's.
std::vector<double> slice(const std::vector<double>& region, size_t offset, size_t n) {
  return std::vector<double>(region.begin() + std::ptrdiff_t(offset), region.begin() + std::ptrdiff_t(offset + n));
}

TEST(RmspropProgram, TheUpdateCarriesTheSettingsAndKeepsOnlyTheStateTheyNeed) {
  for (const RmspropCase& c : testing::rmsprop_cases()) {
    SCOPED_TRACE(c.name);
    const Program p = compile(small_net(), rmsprop_options(Precision::FP32, c));
    ASSERT_EQ(p.update.size(), 1u);
    ASSERT_EQ(p.update[0].kind, OpKind::RMSPROP_UPDATE);
    const RmspropUpdate<TensorId> op = op_fields<RmspropUpdate>(p.update[0]);
    EXPECT_EQ(op.alpha, float(c.alpha));
    EXPECT_EQ(op.eps, float(c.eps));
    EXPECT_EQ(op.weight_decay, float(c.weight_decay));
    EXPECT_EQ(op.momentum, float(c.momentum));
    EXPECT_EQ(op.centered, c.centered);
    std::vector<std::string> state;
    for (int id : p.opt_state_regions) {
      state.push_back(p.tensors[size_t(id)].name);
      EXPECT_EQ(p.tensors[size_t(id)].shape, p.tensors[size_t(p.param_region)].shape);
    }
    std::vector<std::string> want = {"optimizer.square_avg"};
    if (c.momentum != 0) want.push_back("optimizer.rmsprop_momentum_buffer");
    if (c.centered) want.push_back("optimizer.grad_avg");
    EXPECT_EQ(state, want);
  }
}

// Steps of the program, each held to RMSprop from the parameters the step starts with and the
// gradients its backward wrote, with the state the reference carries from step to step.
template <class T>
void check_training(Precision precision, const RmspropCase& c, LossScaleMode scaling, double tol) {
  CompileOptions o = rmsprop_options(precision, c);
  o.loss_scaling.mode = scaling;
  Executable exe(compile(small_net(), o), 5);
  const Program& p = exe.program();
  const testing::RmspropReference ref = testing::rmsprop_reference(c, kLr);
  auto region = [&](const char* name) {
    for (int id : p.opt_state_regions)
      if (p.tensors[size_t(id)].name == name) return id;
    return -1;
  };
  const int square_avg = region("optimizer.square_avg"), momentum = region("optimizer.rmsprop_momentum_buffer"),
            grad_avg = region("optimizer.grad_avg");
  ASSERT_GE(square_avg, 0);
  struct State {
    std::vector<double> v, b, a;
  };
  std::vector<State> state;
  for (int id : p.params) {
    const size_t n = size_t(numel(p.tensors[size_t(id)].shape));
    state.push_back({std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)});
  }
  std::mt19937 rng(9);
  for (int step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<double> x = testing::uniform_vec(rng, size_t(numel(p.tensors[size_t(p.input)].shape)));
    const std::vector<T> input(x.begin(), x.end());
    exe.write(p.input, input.data(), input.size() * sizeof(T));
    const std::vector<int32_t> labels = {0, 2, 1, 2};
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
    const StepScalars s{kLr, step, 1};
    exe.run_forward(s);
    exe.run_backward(s);
    std::vector<std::vector<double>> want;
    for (size_t i = 0; i < p.params.size(); ++i) {
      std::vector<double> w = read_widened<T>(exe, p.params[i]);
      // With loss scaling, the gradient with the scale divided out (Executable::gradient).
      const std::vector<double> g = exe.gradient(p.tensors[size_t(p.params[i])].name);
      ref.step(w.data(), state[i].v.data(), state[i].b.data(), state[i].a.data(), g.data(), int64_t(w.size()));
      want.push_back(std::move(w));
    }
    exe.run_update(s);
    const std::vector<double> v = read_widened<T>(exe, square_avg);
    const std::vector<double> b = momentum >= 0 ? read_widened<T>(exe, momentum) : std::vector<double>();
    const std::vector<double> a = grad_avg >= 0 ? read_widened<T>(exe, grad_avg) : std::vector<double>();
    for (size_t i = 0; i < p.params.size(); ++i) {
      const TensorSpec& t = p.tensors[size_t(p.params[i])];
      const size_t at = t.alias_offset / sizeof(T), n = want[i].size();
      testing::expect_close(t.name, read_widened<T>(exe, p.params[i]), want[i], tol);
      testing::expect_close(t.name + " square_avg", slice(v, at, n), state[i].v, tol);
      if (momentum >= 0) {
        testing::expect_close(t.name + " momentum buffer", slice(b, at, n), state[i].b, tol);
      }
      if (grad_avg >= 0) {
        testing::expect_close(t.name + " grad_avg", slice(a, at, n), state[i].a, tol);
      }
    }
  }
}

TEST(RmspropProgram, Fp64TrainingIsRmsprop) {
  for (const RmspropCase& c : testing::rmsprop_cases()) {
    SCOPED_TRACE(c.name);
    check_training<double>(Precision::FP64, c, LossScaleMode::Off, 1e-13);
  }
}

TEST(RmspropProgram, Fp32TrainingIsRmsprop) {
  for (const RmspropCase& c : testing::rmsprop_cases()) {
    SCOPED_TRACE(c.name);
    check_training<float>(Precision::FP32, c, LossScaleMode::Off, 1e-5);
  }
}

// Dynamic loss scaling in an fp32 program (the CPU runs it, for the tests): the update divides the
// scale out of the gradients the backward scaled.
TEST(RmspropProgram, Fp32TrainingUnderLossScalingIsRmsprop) {
  const RmspropCase& c = testing::rmsprop_cases()[3];
  const Program p = compile(small_net(), [&] {
    CompileOptions o = rmsprop_options(Precision::FP32, c);
    o.loss_scaling.mode = LossScaleMode::Dynamic;
    return o;
  }());
  ASSERT_EQ(p.update.size(), 3u);
  EXPECT_EQ(p.update[0].kind, OpKind::FIND_NONFINITE);
  EXPECT_EQ(p.update[1].kind, OpKind::RMSPROP_UPDATE);
  EXPECT_EQ(p.update[2].kind, OpKind::UPDATE_LOSS_SCALE);
  check_training<float>(Precision::FP32, c, LossScaleMode::Dynamic, 1e-5);
}

}  // namespace
}  // namespace kiln
