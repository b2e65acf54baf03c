// LARS through compile() (optimizer "lars"): the update is one LARS_UPDATE that lists every
// parameter view and keeps its momentum in its own region, and a program trained with it moves
// every parameter as the rule says (lars_reference_test.h, on the gradients the program's own
// backward wrote), step after step, with BatchNorm's scale and shift and the biases taking plain
// momentum steps unless lars_skip_1d is off. compile() refuses a bad trust coefficient by name.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "ops/optimizer/lars_reference_test.h"
#include "ops/optimizer/optimizer_contract.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::LarsReference;

// A convolution without bias, its BatchNorm (1-D scale and shift), and a linear layer with bias.
Blueprint lars_net() {
  Blueprint b("lars_net");
  b.input(6, 6, 2).conv(4, 3, 1, 1, false, "conv1").bn("bn1").relu("relu1").maxpool(2, 2, 0, "pool1");
  b.flatten("flatten").fc(3, true, "fc");
  return b;
}

constexpr float kLr = 0.5f, kMomentum = 0.9f, kWeightDecay = 0.01f, kEta = 0.02f;

CompileOptions lars_options(Precision precision, bool skip_1d) {
  CompileOptions o;
  o.batch = 4;
  o.precision = precision;
  o.optimizer.name = "lars";
  o.optimizer.set("momentum", kMomentum).set("weight_decay", kWeightDecay);
  o.optimizer.set("trust_coefficient", kEta).set("lars_skip_1d", skip_1d);
  return o;
}

template <class T>
std::vector<double> read_widened(Executable& exe, int id) {
  const std::vector<T> v = exe.read<T>(id);
  return std::vector<double>(v.begin(), v.end());
}

// Steps of the program, each held to the rule: from the parameters the step starts with and the
// gradients its backward wrote, with the momentum the reference carries from step to step.
template <class T>
void check_training(Precision precision, bool skip_1d, double tol) {
  Executable exe(compile(lars_net(), lars_options(precision, skip_1d)), 5);
  const Program& p = exe.program();
  ASSERT_EQ(p.update.size(), 1u);
  ASSERT_EQ(p.update[0].kind, OpKind::LARS_UPDATE);
  const LarsUpdate<TensorId> op = op_fields<LarsUpdate>(p.update[0]);
  EXPECT_EQ(std::vector<int>(op.tensors.begin(), op.tensors.end()), p.params);
  EXPECT_EQ(op.skip_1d, skip_1d);
  ASSERT_EQ(p.opt_state_regions.size(), 1u);
  EXPECT_EQ(p.tensors[size_t(p.opt_state_regions[0])].name, "optimizer.lars_momentum_buffer");

  const LarsReference ref{double(kLr), double(kMomentum), double(kWeightDecay), double(kEta)};
  std::vector<std::vector<double>> momentum;
  int plain = 0;
  for (int id : p.params) {
    momentum.emplace_back(size_t(numel(p.tensors[size_t(id)].shape)), 0.0);
    plain += p.tensors[size_t(id)].shape.size() == 1;
  }
  ASSERT_EQ(plain, 3) << "bn1's scale and shift and fc's bias";
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
      const TensorSpec& t = p.tensors[size_t(p.params[i])];
      std::vector<double> w = read_widened<T>(exe, p.params[i]);
      const std::vector<double> g = exe.gradient(t.name);
      ref.step(w.data(), momentum[i].data(), g.data(), int64_t(w.size()), skip_1d && t.shape.size() == 1);
      want.push_back(std::move(w));
    }
    exe.run_update(s);
    const std::vector<double> buffer = read_widened<T>(exe, p.opt_state_regions[0]);
    for (size_t i = 0; i < p.params.size(); ++i) {
      const TensorSpec& t = p.tensors[size_t(p.params[i])];
      EXPECT_LT(testing::lars_err(read_widened<T>(exe, p.params[i]), want[i]), tol) << t.name;
      const auto at = buffer.begin() + std::ptrdiff_t(t.alias_offset / sizeof(T));
      const std::vector<double> v(at, at + std::ptrdiff_t(momentum[i].size()));
      EXPECT_LT(testing::lars_err(v, momentum[i]), tol) << t.name << " momentum";
    }
  }
}

TEST(LarsProgram, Fp64TrainingFollowsTheRule) { check_training<double>(Precision::FP64, true, 1e-12); }
TEST(LarsProgram, Fp32TrainingFollowsTheRule) { check_training<float>(Precision::FP32, true, 1e-6); }
TEST(LarsProgram, WithoutSkipEveryTensorTakesLarsSteps) { check_training<double>(Precision::FP64, false, 1e-12); }

TEST(LarsProgram, ABadTrustCoefficientIsRefusedNamingTheOption) {
  for (double eta : {0.0, -0.001, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    CompileOptions o = lars_options(Precision::FP32, true);
    o.optimizer.set("trust_coefficient", eta);
    testing::expect_error([&] { compile(lars_net(), o); },
                          {"the lars optimizer's trust_coefficient", "trust coefficient",
                           "optimizer.values[\"trust_coefficient\"]", "--lars-eta", "a finite number > 0"});
  }
}

}  // namespace
}  // namespace kiln
