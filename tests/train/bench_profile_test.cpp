// kiln bench's reports. --profile's floors rest on each op's work: a backward op that computes the data
// gradient and the weight gradient counts two passes of its forward's multiply-adds, one that
// computes only the weight gradient (a convolution of the data batch) one.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kiln/bench.h"
#include "kiln/compile.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

TEST(BenchProfile, BackwardOpsCountTheirDataAndWeightGradientPasses) {
  CompileOptions c;
  c.device = Device::CPU;
  c.batch = 2;
  c.input_hwc = {16, 16, 3};
  BenchOptions b;
  b.steps = 1, b.warmup = 0, b.profile = true;
  const BenchResult r = bench_training(zoo::by_name("resnet18", 10), c, b);
  std::map<std::string, double> forward;  // layer -> its forward op's flops
  for (const OpProfile& o : r.profile)
    if (o.kind == "CONV_BN_FWD" || o.kind == "CBR_FWD") forward[o.layer] = o.flops;
  int conv_bn = 0, cbr = 0;
  for (const OpProfile& o : r.profile) {
    if (o.kind != "CONV_BN_BWD" && o.kind != "CBR_BWD" && o.kind != "CBR_BWD_FIRST") continue;
    ASSERT_TRUE(forward.count(o.layer)) << o.kind << " " << o.layer;
    ASSERT_GT(forward[o.layer], 0) << o.layer;
    // ResNet-18's only convolution of the data batch is the stem's CBR (CBR_BWD_FIRST).
    const double passes = o.kind == "CBR_BWD_FIRST" ? 1 : 2;
    EXPECT_DOUBLE_EQ(o.flops, passes * forward[o.layer]) << o.kind << " " << o.layer;
    (o.kind == "CONV_BN_BWD" ? conv_bn : cbr)++;
  }
  EXPECT_GT(conv_bn, 0);  // the residual block ends were fused, so the rule was exercised
  EXPECT_GT(cbr, 0);
}

// kiln bench prints the first step's parts: each is timed, none negative, and together they stay
// within the first step's time (the rest is the synthetic batch's drawing and copying).
TEST(BenchProfile, TheFirstStepsPartsAddUpToNoMoreThanIt) {
  CompileOptions c;
  c.device = Device::CPU;
  c.batch = 4;
  c.input_hwc = {32, 32, 3};
  BenchOptions b;
  b.steps = 1, b.warmup = 0;
  const BenchResult r = bench_training(zoo::by_name("resnet18", 10), c, b);
  const double parts[] = {r.compile_seconds, r.start.backend, r.start.allocate, r.start.init_state,
                          r.start.prepare_ops, r.step_one_seconds};
  double sum = 0;
  for (double p : parts) {
    EXPECT_GE(p, 0);
    sum += p;
  }
  EXPECT_GT(r.start.init_state, 0);  // ResNet-18's 11 million parameters take measurable time
  EXPECT_GT(r.step_one_seconds, 0);
  EXPECT_LE(sum, r.first_step_seconds);
  EXPECT_GT(sum, 0.5 * r.first_step_seconds);  // the parts are most of it, not a stray clock
}

}  // namespace
}  // namespace kiln
