// CompileOptions::fuse_grad_sums through whole programs on the CPU: where a block end's output
// feeds the next block's body and shortcut, its backward reads their two gradients and no GRAD_SUM
// writes their sum; the training steps compute the same bits as the program with the sums.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/resblock/resblock_contract.h"
#include "runtime/op_cost.h"

namespace kiln {
namespace {

// A stem, two identity blocks and a projection block: block1's and block2's outputs each feed a
// body and a shortcut (their sums can go), the stem's feeds block1 (its CBR backward reads the
// sum, which stays) and block3's feeds only the pool.
Blueprint three_blocks() {
  auto body = [](int channels, int stride) {
    Blueprint b("body");
    b.cbr(channels, 3, stride, 1, "conv1").conv(channels, 3, 1, 1, false, "conv2").bn("bn2");
    return b;
  };
  Blueprint proj("downsample");
  proj.conv(12, 1, 2, 0, false, "0").bn("1");
  Blueprint m("three_blocks");
  m.input(8, 8, 3).cbr(6, 3, 1, 1, "stem");
  m.residual(body(6, 1), std::nullopt, true, "block1").residual(body(6, 1), std::nullopt, true, "block2");
  m.residual(body(12, 2), proj, true, "block3").global_avgpool("pool").fc(4, true, "fc");
  return m;
}

CompileOptions options(Precision precision, bool fuse_grad_sums) {
  CompileOptions o;
  o.precision = precision, o.batch = 5, o.fuse_grad_sums = fuse_grad_sums;
  o.optimizer.set("momentum", 0.9);
  return o;
}

int count(const std::vector<Op>& ops, OpKind kind) {
  int n = 0;
  for (const Op& op : ops) n += op.kind == kind;
  return n;
}

bool has_tensor(const Program& p, const std::string& name) {
  for (const TensorSpec& t : p.tensors)
    if (t.name == name) return true;
  return false;
}

TEST(GradTerms, BlockEndsReadTheirOutputsTwoGradients) {
  const Program sums = compile(three_blocks(), options(Precision::FP32, false));
  const Program terms = compile(three_blocks(), options(Precision::FP32, true));
  EXPECT_EQ(count(sums.backward, OpKind::GRAD_SUM), 3);
  EXPECT_EQ(count(terms.backward, OpKind::GRAD_SUM), 1);  // the stem's
  int two_terms = 0;
  for (const Op& op : terms.backward)
    if (op.kind == OpKind::BN_ADD_RELU_BWD) two_terms += op_fields<BnAddReluBackward>(op).dy2.present();
  EXPECT_EQ(two_terms, 2);
  // The summed gradients of block1's and block2's outputs are not tensors any more; the stem's is.
  for (const char* name : {"d:block1.relu", "d:block2.relu"}) {
    EXPECT_TRUE(has_tensor(sums, name)) << name;
    EXPECT_FALSE(has_tensor(terms, name)) << name;
  }
  EXPECT_TRUE(has_tensor(terms, "d:stem"));
  EXPECT_EQ(terms.backward.size() + 2, sums.backward.size());
}

// What the steps leave, widened to double (exact for float32): each step's loss, and each
// parameter's gradient before its update; then every parameter and running statistic.
struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<double>> tensors;
};
Trained train(Precision precision, bool fuse_grad_sums, int steps) {
  Executable exe(compile(three_blocks(), options(precision, fuse_grad_sums)), 7);
  const Program& p = exe.program();
  const bool f64 = precision == Precision::FP64;
  auto read = [&](int id) {
    if (f64) return exe.read<double>(id);
    const std::vector<float> v = exe.read<float>(id);
    return std::vector<double>(v.begin(), v.end());
  };
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> x(size_t(numel(p.tensors[p.input].shape)));
  for (double& v : x) v = normal(rng);
  if (f64) {
    exe.write(p.input, x.data(), x.size() * sizeof(double));
  } else {
    const std::vector<float> xf(x.begin(), x.end());
    exe.write(p.input, xf.data(), xf.size() * sizeof(float));
  }
  const std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  Trained out;
  for (int step = 0; step < steps; ++step) {
    const StepScalars s{0.1f, step, 1};
    exe.run_forward(s);
    exe.run_backward(s);
    out.losses.push_back(read(p.loss)[0]);
    for (int id : p.params) out.tensors.push_back(exe.gradient(p.tensors[id].name));
    exe.run_update(s);
  }
  for (const std::vector<int>* ids : {&p.params, &p.buffers})
    for (int id : *ids) out.tensors.push_back(read(id));
  return out;
}

// Three steps with momentum, float32 and float64: every loss, gradient, parameter and running
// statistic the same bits (the terms are added in the activations' dtype as GRAD_SUM adds them).
TEST(GradTerms, TrainingStepsGiveTheSameBitsAsTheSums) {
  for (Precision precision : {Precision::FP32, Precision::FP64}) {
    SCOPED_TRACE(precision == Precision::FP32 ? "fp32" : "fp64");
    const Trained sums = train(precision, false, 3), terms = train(precision, true, 3);
    EXPECT_EQ(terms.losses, sums.losses);
    EXPECT_NE(sums.losses.front(), sums.losses.back()) << "the steps trained nothing";
    ASSERT_EQ(terms.tensors.size(), sums.tensors.size());
    for (size_t i = 0; i < sums.tensors.size(); ++i) EXPECT_EQ(terms.tensors[i], sums.tensors[i]) << "tensor " << i;
  }
}

}  // namespace
}  // namespace kiln
