// Ops on the branch stream pair (CudaOptions::branch_streams, src/ir/op_streams.h) against
// the same program on one pair: ResNet blocks with projection shortcuts, three training steps (the
// first run as it is issued, the second captured as a CUDA Graph, the third replayed), fp16 and
// bf16. Every kernel here is chosen without timing and gives the same bytes for the same inputs
// (no tuning, the sum kernel for the statistics, no CUTLASS or folds, deterministic cuDNN plans,
// the plans shared by the process's graph cache), so only the streams differ: every loss,
// parameter and running statistic must be equal bit for bit. A missing wait lets an op read bytes
// another has not finished writing, or overwrite bytes another still reads, which shows as
// different values.
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ir/op_streams.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

// A stem, then two stride-2 blocks with projection shortcuts and an identity block between.
Blueprint projection_blocks() {
  auto body = [](int channels, int stride) {
    Blueprint b("body");
    b.cbr(channels, 3, stride, 1, "conv1").conv(channels, 3, 1, 1, false, "conv2").bn("bn2");
    return b;
  };
  auto projection = [](int channels) {
    Blueprint p("downsample");
    p.conv(channels, 1, 2, 0, false, "0").bn("1");
    return p;
  };
  Blueprint m("projection_blocks");
  m.input(16, 16, 8).cbr(32, 3, 1, 1, "stem");
  m.residual(body(64, 2), projection(64), true, "block1").residual(body(64, 1), std::nullopt, true, "block2");
  m.residual(body(128, 2), projection(128), true, "block3");
  m.global_avgpool("pool").fc(10, true, "fc");
  return m;
}

// Each tensor's bytes: the comparison is bit for bit, and the loss scaler's count is an integer.
using Values = std::map<std::string, std::vector<std::byte>>;

Values train(Precision precision, bool branch, const std::vector<float>& x, const std::vector<int32_t>& labels) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = int(labels.size());
  o.cuda.tune = false, o.cuda.conv_stats = 0, o.cuda.cutlass = 0, o.cuda.fold_taps = 0;
  o.cuda.branch_streams = branch;
  Executable e(compile(projection_blocks(), o), 11);
  const Program& p = e.program();
  if (branch) {  // the streams are in use: the comparison below compares two schedules
    EXPECT_GE(branch_stream_ops(p.forward), 2);
    EXPECT_GE(branch_stream_ops(p.backward), 2);
  }
  write_floats(e, p.input, x);
  e.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  Values v;
  for (int step = 0; step < 3; ++step) {
    e.run_step(StepScalars{0.05f, step, 5});
    v["loss after step " + std::to_string(step)] = read_tensor_bytes(e, p.loss);
  }
  for (const std::vector<int>* ids : {&p.params, &p.buffers})
    for (int id : *ids) v[p.tensors[id].name] = read_tensor_bytes(e, id);
  return v;
}

class OpStreamsGpu : public ::testing::TestWithParam<Precision> {};

TEST_P(OpStreamsGpu, BranchStreamsGiveTheOneStreamBits) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(77);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(32) * 16 * 16 * 8);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> labels(32);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 3 + 1) % 10);
  const Values one = train(GetParam(), false, x, labels), two = train(GetParam(), true, x, labels);
  ASSERT_EQ(one.size(), two.size());
  int compared = 0;
  for (const auto& [name, values] : one) {
    ASSERT_TRUE(two.count(name)) << name;
    EXPECT_TRUE(two.at(name) == values) << name << " differs";
    ++compared;
  }
  EXPECT_GT(compared, 20);
  // The steps trained: a schedule that skipped the update would compare equal too.
  EXPECT_TRUE(one.at("loss after step 0") != one.at("loss after step 2"));
}

INSTANTIATE_TEST_SUITE_P(Precisions, OpStreamsGpu, ::testing::Values(Precision::FP16, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln
