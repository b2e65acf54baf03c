// The CBR's and the block end's wgrad run on beside the next op (Op::side_work_outlives, placed
// by compile/op_streams.h; the memory plan keeps their tensors through that op). Overlapped, or
// joined at the end of every op (the same program and memory plan with no op's side work
// outliving it), the same fp32 program must train to the same bits: fp32 kernels reduce in a
// fixed order (cuda_graph_gpu_test.cpp measured replayed and op-by-op runs identical), so any
// difference is a race, e.g. a next op writing over the activation or gradient a still-running
// wgrad reads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

struct Trace {
  std::vector<float> losses, params;
};

Trace train(Blueprint (*model)(int), bool overlap, bool graphs) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = Precision::FP32, o.batch = 64;
  o.optimizer.set("momentum", 0.9).set("nesterov", 1).set("weight_decay", 1e-4);
  o.cuda.tune = false;  // both programs take the same (first) plans
  o.cuda.graphs = graphs;
  Program program = compile(model(10), o);
  int outliving = 0;
  for (Op& op : program.backward) {
    outliving += op.side_work_outlives;
    if (!overlap) op.side_work_outlives = false;  // joined: the plan, made for the overlap, still holds
  }
  EXPECT_GT(outliving, 0) << "no op of the program overlaps the next";
  Executable exe(std::move(program), 5);
  const Program& p = exe.program();
  Trace t;
  for (int step = 0; step < 4; ++step) {
    std::mt19937 rng(40 + step);
    const std::vector<float> x =
        testing::random_values<float>(DType::F32, size_t(numel(p.tensors[p.input].shape)), rng);
    exe.write(p.input, x.data(), x.size() * sizeof(float));
    std::vector<int32_t> labels(size_t(o.batch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 3 + size_t(step)) % 10);
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
    exe.run_step({0.05f, step, 9});
    t.losses.push_back(exe.read<float>(p.loss)[0]);
  }
  t.params = exe.read<float>(p.param_region);
  return t;
}

TEST(OpOverlap, OverlappedOpsTrainAsJoinedOnes) {
  KILN_REQUIRE_GPU();
  const std::pair<const char*, Blueprint (*)(int)> models[] = {{"resnet18_cifar", zoo::resnet18_cifar},
                                                               {"vgg16_bn_cifar", zoo::vgg16_bn_cifar}};
  for (const auto& [name, model] : models) {
    for (bool graphs : {false, true}) {
      SCOPED_TRACE(std::string(name) + (graphs ? " replayed" : " op by op"));
      const Trace joined = train(model, false, graphs), overlapped = train(model, true, graphs);
      EXPECT_EQ(overlapped.losses, joined.losses);
      EXPECT_EQ(overlapped.params, joined.params);
      for (float loss : joined.losses) EXPECT_TRUE(std::isfinite(loss)) << loss;
    }
  }
}

}  // namespace
}  // namespace kiln
