// A training step replayed as a captured CUDA Graph does what the same program does op by op:
// same losses, parameters and inference logits, step after step, while the learning rate, the
// step count (AdamW's bias correction, dropout's masks) and the batch change between steps. A
// graph that froze any of them at capture would drift from the op-by-op run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

std::unique_ptr<Executable> digits(Precision precision, OptimizerKind optimizer, bool graphs) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = 32;
  o.optimizer.kind = optimizer, o.optimizer.nesterov = optimizer == OptimizerKind::SGD;
  o.optimizer.weight_decay = 5e-4f;
  o.label_smoothing = 0.1f;
  o.cuda.graphs = graphs;
  o.cuda.tune = false;  // both programs take the same (first) plans
  return std::make_unique<Executable>(compile(zoo::digits_cnn(), o), 7);
}

void write_batch(Executable& exe, int step) {
  const Program& p = exe.program();
  std::mt19937 rng(100 + step);
  const std::vector<float> x =
      testing::random_values<float>(DType::F32, size_t(numel(p.tensors[p.input].shape)), rng);
  exe.write(p.input, x.data(), x.size() * sizeof(float));
  std::vector<int32_t> labels(size_t(p.tensors[p.label].shape[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 7 + size_t(step)) % 10);
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
}

struct Trace {
  std::vector<float> losses, params, logits;
};

// Six steps with a changing batch and learning rate, then two inference passes. `last_lr`
// replaces the last step's learning rate (the mutation check below).
Trace run(Executable& exe, float last_lr = -1) {
  Trace t;
  const Program& p = exe.program();
  constexpr int kSteps = 6;
  for (int i = 0; i < kSteps; ++i) {
    write_batch(exe, i);
    const float lr = i == kSteps - 1 && last_lr >= 0 ? last_lr : 0.02f * float(i + 1);
    exe.run_step({lr, i, 3});
    t.losses.push_back(exe.read<float>(p.loss)[0]);
  }
  t.params = exe.read<float>(p.param_region);
  for (int i = 0; i < 2; ++i) {
    write_batch(exe, 50 + i);
    exe.run_inference({0.f, kSteps, 3});
    const std::vector<float> logits = testing::read_floats(exe, p.tensors[p.inference_logits].name);
    t.logits.insert(t.logits.end(), logits.begin(), logits.end());
  }
  return t;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

TEST(CudaGraphs, ReplayedStepsMatchOpByOpSteps) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16}) {
    for (OptimizerKind optimizer : {OptimizerKind::SGD, OptimizerKind::AdamW}) {
      SCOPED_TRACE(std::string(precision_name(precision)) + (optimizer == OptimizerKind::SGD ? " sgd" : " adamw"));
      auto graphed = digits(precision, optimizer, true);
      auto plain = digits(precision, optimizer, false);
      const Trace a = run(*graphed), b = run(*plain);
      // Both run the same kernels in the same order on the same data: identical bits, unless a
      // cuDNN plan reduces in a run-dependent order (then within rounding of a few steps).
      const double param_diff = max_abs_diff(a.params, b.params);
      std::printf("%s %s: losses %s, params max diff %.3g, logits max diff %.3g\n", precision_name(precision),
                  optimizer == OptimizerKind::SGD ? "sgd" : "adamw", a.losses == b.losses ? "identical" : "differ",
                  param_diff, max_abs_diff(a.logits, b.logits));
      for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * std::fabs(b.losses[i]));
      EXPECT_LE(param_diff, 1e-6);
      EXPECT_LE(max_abs_diff(a.logits, b.logits), 1e-4);
      // The comparison catches a replay that kept the captured learning rate: a plain run whose
      // last step used the first step's rate ends elsewhere.
      auto stale = digits(precision, optimizer, false);
      EXPECT_GT(max_abs_diff(run(*stale, 0.02f).params, b.params), 100 * 1e-6);
    }
  }
}

}  // namespace
}  // namespace kiln
