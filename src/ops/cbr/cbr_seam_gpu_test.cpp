// Fusion across layers on the GPU (cbr_seam_cuda.h): one training step of a program with seams
// and of the same program without (same weights, batch and labels), each against the float64 CPU
// program without seams, which is exact to ~1e-15: the loss, every parameter's gradient, the
// weights after an SGD step and the BN running statistics, in fp32, bf16 and fp16.
//
// The bound: the program with seams is as close to the exact step as the one without, within a
// factor 2 and a floor (fp32 1e-4; fp16 2e-3 and bf16 1.6e-2, twice the whole-network comparison's
// floors, tests/gpu/whole_network_equivalence_gpu_test.cpp). A consumer writes its applied input
// with the producer's own expression, so it computes the same values as without seams; the factor 2
// leaves room for a ReLU input within rounding of 0 passing its gradient in one program and not in
// the other. A consumer that skipped its input's BatchNorm + ReLU lands far outside the bound (the
// last test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using testing::activation_dtype;
using testing::write_floats;

// c1 -> c2 (one consumer), c2 -> {c3a, c3b} (two consumers, strided 3x3 and 1x1), c4 -> pool (no
// seam): the CPU suite's network, at channel counts in multiples of 8, as the GPU takes them.
Blueprint seam_net() {
  Blueprint b("seams");
  b.input(12, 12, 8);
  b.cbr(32, 3, 1, 1, "c1").cbr(32, 3, 1, 1, "c2");
  Blueprint left("left"), right("right");
  left.cbr(64, 3, 2, 1, "a");
  right.cbr(64, 1, 2, 0, "b");
  b.residual(left, right, false, "c3");
  b.cbr(32, 3, 1, 1, "c4").maxpool(2, 2, 0, "pool").flatten("flatten").fc(5, true, "fc");
  return b;
}

// A bottleneck whose CBRs feed a CBR and the block end's conv_bn, with a downsample shortcut.
Blueprint bottleneck_net() {
  Blueprint b("blocks");
  b.input(12, 12, 8);
  b.cbr(32, 3, 1, 1, "stem");
  Blueprint body("body"), down("down");
  body.cbr(16, 1, 1, 0, "conv1").cbr(16, 3, 2, 1, "conv2").conv(64, 1, 1, 0, false, "conv3").bn("bn3");
  down.conv(64, 1, 2, 0, false, "conv").bn("bn");
  b.residual(body, down, true, "block");
  b.maxpool(2, 2, 0, "pool").flatten("flatten").fc(5, true, "fc");
  return b;
}

constexpr int kBatch = 8;

CompileOptions options(Device device, Precision precision, bool seams) {
  CompileOptions o;
  o.device = device;
  o.batch = kBatch;
  o.precision = precision;
  o.fuse_seams = seams;
  o.cuda.tune_plans = 2;  // correct plans, not the fastest
  // fp16: a fixed-size first scale whose scaled gradients stay finite (2^16 overflows them here).
  o.loss_scaling.init_scale = 1024.f;
  o.optimizer = {"sgd"};
  o.optimizer.set("momentum", 0.9).set("weight_decay", 1e-3);
  return o;
}

// By tensor name: programs of different precisions order their parameters differently.
struct StepResult {
  double loss = 0;
  std::map<std::string, std::vector<double>> grads, weights, stats;
};

// The batch and the initial weights every program of one comparison starts from: the first
// program draws them, and the others take each parameter of the same name.
struct Start {
  std::vector<double> input;
  std::map<std::string, std::vector<double>> params;
};

bool is_float(DType t) { return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16; }

std::vector<double> read_doubles(Executable& exe, int id) {
  const TensorSpec& t = exe.program().tensors[id];
  if (t.dtype == DType::F64) return exe.read<double>(id);
  const std::vector<float> f = testing::read_floats(exe, t.name);
  return std::vector<double>(f.begin(), f.end());
}

void write_doubles(Executable& exe, int id, const std::vector<double>& v) {
  if (exe.program().tensors[id].dtype == DType::F64) {
    exe.write(id, v.data(), v.size() * sizeof(double));
    return;
  }
  write_floats(exe, id, std::vector<float>(v.begin(), v.end()));
}

StepResult train_step(const Blueprint& blueprint, const CompileOptions& o, Start& start) {
  Executable exe(compile(blueprint, o), 7);
  const Program& p = exe.program();
  for (int id : p.params) {
    const std::string& name = p.tensors[id].name;
    if (start.params.count(name)) write_doubles(exe, id, start.params[name]);
    else start.params[name] = read_doubles(exe, id);
  }
  write_doubles(exe, p.input, start.input);
  const std::vector<int32_t> labels = {0, 3, 1, 4, 2, 2, 0, 1};
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  const StepScalars s{0.05f, 0, 1};
  exe.run_forward(s);
  exe.run_backward(s);
  StepResult r;
  r.loss = read_doubles(exe, p.loss)[0];
  for (int id : p.params) r.grads[p.tensors[id].name] = exe.gradient(p.tensors[id].name);
  exe.run_update(s);
  for (int id : p.params) r.weights[p.tensors[id].name] = read_doubles(exe, id);
  for (int id : p.buffers)  // the BN running statistics (not the loss scale's counters)
    if (is_float(p.tensors[id].dtype)) r.stats[p.tensors[id].name] = read_doubles(exe, id);
  return r;
}

// The largest difference over the largest magnitude of the reference, across one tensor.
double relative_gap(const std::vector<double>& got, const std::vector<double>& want) {
  double gap = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    gap = std::max(gap, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return gap / scale;
}

// Every quantity's gap to the exact step, by name.
struct Gaps {
  std::vector<std::string> what;
  std::vector<double> gap;
};

// Every quantity of the exact step must be in `got` (the same parameters and statistics).
Gaps gaps(const StepResult& got, const StepResult& exact) {
  Gaps g;
  auto add = [&](const std::string& what, const std::map<std::string, std::vector<double>>& have,
                 const std::string& name, const std::vector<double>& want) {
    const auto it = have.find(name);
    if (it == have.end()) throw std::runtime_error("the program under test has no " + what + name);
    g.what.push_back(what + name), g.gap.push_back(relative_gap(it->second, want));
  };
  g.what.push_back("loss"), g.gap.push_back(std::abs(got.loss - exact.loss) / std::abs(exact.loss));
  for (const auto& [name, want] : exact.grads) add("gradient of ", got.grads, name, want);
  for (const auto& [name, want] : exact.weights) add("updated ", got.weights, name, want);
  for (const auto& [name, want] : exact.stats) add("statistic ", got.stats, name, want);
  return g;
}

double floor_of(Precision p) { return p == Precision::FP32 ? 1e-4 : p == Precision::FP16 ? 2e-3 : 1.6e-2; }

// How much further from the exact step the program with seams may land than the one without.
constexpr double kFactor = 2;

void expect_seams_as_exact_as_without(const Blueprint& blueprint, Precision precision) {
  std::mt19937 rng(5);
  Start start;
  start.input = testing::random_values<double>(activation_dtype(precision),
                                               size_t(kBatch) * 12 * 12 * 8, rng);  // already rounded
  const StepResult exact = train_step(blueprint, options(Device::CPU, Precision::FP64, false), start);
  const StepResult plain = train_step(blueprint, options(Device::CUDA, precision, false), start);
  const StepResult fused = train_step(blueprint, options(Device::CUDA, precision, true), start);
  ASSERT_EQ(fused.grads.size(), exact.grads.size());
  const Gaps without = gaps(plain, exact), with = gaps(fused, exact);
  const double floor = floor_of(precision);
  double worst_without = 0, worst_with = 0;
  for (size_t i = 0; i < with.gap.size(); ++i) {
    ASSERT_TRUE(std::isfinite(without.gap[i])) << without.what[i] << " is not finite without seams";
    EXPECT_LE(with.gap[i], std::max(floor, kFactor * without.gap[i]))
        << with.what[i] << ": with seams " << with.gap[i] << ", without " << without.gap[i];
    worst_without = std::max(worst_without, without.gap[i]);
    worst_with = std::max(worst_with, with.gap[i]);
  }
  std::printf("%s %s: worst gap to float64 %.3g without seams, %.3g with (bound: %.3g x without)\n",
              blueprint.name().c_str(), precision_name(precision), worst_without, worst_with, kFactor);
}

class CbrSeamGpu : public ::testing::TestWithParam<Precision> {};

TEST_P(CbrSeamGpu, ChainsAndBranchesTrainAsExactlyAsWithoutSeams) {
  KILN_REQUIRE_GPU();
  expect_seams_as_exact_as_without(seam_net(), GetParam());
}

TEST_P(CbrSeamGpu, ABottlenecksConvBnConsumesASeamAsWithoutIt) {
  KILN_REQUIRE_GPU();
  expect_seams_as_exact_as_without(bottleneck_net(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Precisions, CbrSeamGpu, ::testing::Values(Precision::FP32, Precision::BF16, Precision::FP16),
                         [](const ::testing::TestParamInfo<Precision>& info) {
                           return std::string(precision_name(info.param));
                         });

// The bound is not loose enough to hide a wrong seam: the same network with c1's BatchNorm + ReLU
// left out (c1 a plain convolution, its output read as is by c2) lands outside it in fp16, for
// c2's weight gradient: past ten times the floor and past the factor times the gap without seams.
TEST(CbrSeamGpuBound, CatchesAConsumerThatSkipsItsInputsBatchNorm) {
  KILN_REQUIRE_GPU();
  Blueprint skipped("seams");
  skipped.input(12, 12, 8);
  skipped.conv(32, 3, 1, 1, false, "c1").cbr(32, 3, 1, 1, "c2");
  Blueprint left("left"), right("right");
  left.cbr(64, 3, 2, 1, "a");
  right.cbr(64, 1, 2, 0, "b");
  skipped.residual(left, right, false, "c3");
  skipped.cbr(32, 3, 1, 1, "c4").maxpool(2, 2, 0, "pool").flatten("flatten").fc(5, true, "fc");
  std::mt19937 rng(5);
  Start start;
  start.input = testing::random_values<double>(DType::F16, size_t(kBatch) * 12 * 12 * 8, rng);
  const StepResult exact = train_step(seam_net(), options(Device::CPU, Precision::FP64, false), start);
  const StepResult plain = train_step(seam_net(), options(Device::CUDA, Precision::FP16, false), start);
  // The same weights, c1's BatchNorm's aside (it has none).
  const StepResult wrong = train_step(skipped, options(Device::CUDA, Precision::FP16, true), start);
  // c2 renormalizes what it convolves, so the loss moves little; c2's weight gradient, of the input
  // it was given, does not.
  const std::string c2 = "c2.conv.weight";
  ASSERT_TRUE(wrong.grads.count(c2) && exact.grads.count(c2) && plain.grads.count(c2));
  const double gap = relative_gap(wrong.grads.at(c2), exact.grads.at(c2));
  EXPECT_GT(gap, 10 * floor_of(Precision::FP16));
  EXPECT_GT(gap, kFactor * relative_gap(plain.grads.at(c2), exact.grads.at(c2)))
      << "the bound would hide a skipped BatchNorm";
}

}  // namespace
}  // namespace kiln
