// Fine-tuning with a frozen backbone (CompileOptions::freeze): the frozen layers compute as in eval
// mode and nothing of theirs changes in training, while the layers after them train as they would
// on top of the same (eval-mode) features.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/memory_plan.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;

CompileOptions options(const std::string& freeze, const std::string& kind = "sgd") {
  CompileOptions o;
  o.batch = 4;
  o.freeze = freeze;
  o.optimizer.name = kind;
  o.optimizer.set("weight_decay", 0.05);  // large, so that a decayed frozen weight would show at once
  return o;
}

template <class T>
void put(Executable& exe, int id, const std::vector<T>& v) {
  exe.write(id, v.data(), v.size() * sizeof(T));
}

// A random batch and labels in `exe`, and BN running statistics away from their defaults (so that
// eval-mode and batch statistics differ).
void feed(Executable& exe, uint32_t seed) {
  std::mt19937 rng(seed);
  const Program& p = exe.program();
  put(exe, p.input, random_values<float>(DType::F32, numel(p.tensors[p.input].shape), rng));
  std::vector<int32_t> labels(p.tensors[p.label].shape[0]);
  for (auto& l : labels) l = int32_t(rng() % 10);
  put(exe, p.label, labels);
  for (int id : p.buffers) {
    const TensorSpec& t = p.tensors[id];
    const bool var = t.name.size() > 3 && t.name.compare(t.name.size() - 3, 3, "var") == 0;
    if (t.role == TensorRole::Buffer)
      put(exe, id, random_values<float>(DType::F32, numel(t.shape), rng, var ? 1.5f : 0.3f, var ? 0.2f : 0.5f));
  }
}

std::vector<std::vector<float>> values(Executable& exe, const std::vector<int>& ids) {
  std::vector<std::vector<float>> out;
  for (int id : ids) out.push_back(exe.read<float>(id));
  return out;
}

// The tensors of the layers named `prefix`... (parameters and BN statistics).
std::vector<int> tensors_of(const Program& p, const std::string& prefix, bool params) {
  std::vector<int> ids;
  for (const auto* list : {&p.params, &p.buffers})
    for (int id : *list)
      if (p.tensors[id].name.rfind(prefix, 0) == 0 && (p.tensors[id].role == TensorRole::Param) == params)
        ids.push_back(id);
  return ids;
}

TEST(Freeze, FrozenLayersAreLeftAsTheyAreAndTheRestTrains) {
  for (const std::string kind : {"sgd", "adamw", "lars"}) {
    SCOPED_TRACE(kind);
    Executable exe(compile(zoo::resnet18_cifar(), options("layer2", kind)), 1);
    feed(exe, 3);
    const Program& p = exe.program();
    const std::vector<int> frozen = tensors_of(p, "layer2", true), frozen_stats = tensors_of(p, "layer1", false);
    const std::vector<int> trained = tensors_of(p, "layer3", true), trained_stats = tensors_of(p, "layer3", false);
    ASSERT_FALSE(frozen.empty());
    ASSERT_FALSE(frozen_stats.empty());
    ASSERT_FALSE(trained.empty());
    const auto frozen_before = values(exe, frozen), stats_before = values(exe, frozen_stats);
    const auto trained_before = values(exe, trained), trained_stats_before = values(exe, trained_stats);
    for (int s = 0; s < 3; ++s) exe.run_step({0.1f, s, 7});
    EXPECT_EQ(values(exe, frozen), frozen_before) << "momentum, weight decay or a gradient moved a frozen weight";
    EXPECT_EQ(values(exe, frozen_stats), stats_before) << "a frozen BatchNorm updated its running statistics";
    const auto trained_after = values(exe, trained), trained_stats_after = values(exe, trained_stats);
    for (size_t i = 0; i < trained.size(); ++i) EXPECT_NE(trained_after[i], trained_before[i]) << p.tensors[trained[i]].name;
    for (size_t i = 0; i < trained_stats.size(); ++i)
      EXPECT_NE(trained_stats_after[i], trained_stats_before[i]) << p.tensors[trained_stats[i]].name;
  }
}

// With everything but the classifier frozen, the training forward is the inference forward: the
// same logits, which batch statistics (a BN left in training mode) would change.
TEST(Freeze, FrozenBatchNormComputesInEvalMode) {
  Executable exe(compile(zoo::resnet18_cifar(), options("layer4")), 1);
  feed(exe, 5);
  const Program& p = exe.program();
  exe.run_inference({});
  const std::vector<float> eval = exe.read<float>(p.inference_logits);
  exe.run_forward({0.f, 0, 7});
  expect_close("training logits of a frozen backbone", exe.read<float>(p.logits), eval, 1e-6);

  Executable trained(compile(zoo::resnet18_cifar(), options("")), 1);
  feed(trained, 5);
  trained.run_forward({0.f, 0, 7});
  EXPECT_GT(rel_err(trained.read<float>(trained.program().logits), eval), 1e-2)
      << "batch statistics give other logits: the comparison above can fail";
}

// The head's gradient is the one of a softmax regression on the frozen features: dW = dlogits^T x
// where x is the (eval-mode) pooled feature, checked in double here.
TEST(Freeze, TheHeadGetsTheGradientOfItsOwnInput) {
  Executable exe(compile(zoo::resnet18_cifar(), options("layer4")), 1);
  feed(exe, 9);
  const Program& p = exe.program();
  exe.run_forward({0.f, 0, 7});
  exe.run_backward({0.f, 0, 7});
  const int fc = int(p.graph.layers.size()) - 1;
  int feature = -1;  // what the head's forward reads: the frozen pool's inference output
  for (const Op& op : p.forward)
    if (op.layer == fc && op.kind == OpKind::LINEAR_FWD) feature = op.in.at(0);
  ASSERT_GE(feature, 0);
  const std::vector<float> x = exe.read<float>(feature);
  const std::vector<float> logits = exe.read<float>(p.logits);
  const std::vector<int32_t> labels = exe.read<int32_t>(p.label);
  const int n = 4, classes = 10, features = int(x.size()) / n;
  std::vector<double> want(size_t(classes) * features, 0.0);
  for (int b = 0; b < n; ++b) {
    double top = -1e300, sum = 0;
    for (int c = 0; c < classes; ++c) top = std::max(top, double(logits[b * classes + c]));
    for (int c = 0; c < classes; ++c) sum += std::exp(double(logits[b * classes + c]) - top);
    for (int c = 0; c < classes; ++c) {
      const double d = (std::exp(double(logits[b * classes + c]) - top) / sum - (c == labels[b])) / n;
      for (int f = 0; f < features; ++f) want[size_t(c) * features + f] += d * x[size_t(b) * features + f];
    }
  }
  const int weight = p.find(p.graph.layers[fc].name + ".weight");
  expect_close("the head's weight gradient", exe.read<float>(p.find(p.graph.layers[fc].name + ".weight.grad")), want,
               1e-5);
  EXPECT_EQ(p.tensors[weight].role, TensorRole::Param);
}

TEST(Freeze, PlanShowsFrozenLayersAndNoBackwardForThem) {
  const Program p = compile(zoo::resnet18_cifar(), options("layer1"));
  const std::string plan = format_plan(p, p.memory);
  EXPECT_TRUE(contains(plan, "[frozen: eval mode, not trained]")) << plan;
  for (const Op& op : p.backward) EXPECT_FALSE(p.graph.layers.at(op.layer).marks.frozen) << p.graph.layers[op.layer].name;
  // Fewer parameters in the optimizer's region than in the whole model.
  const Program all = compile(zoo::resnet18_cifar(), options(""));
  EXPECT_LT(p.params.size(), all.params.size());
  EXPECT_EQ(p.params.size() + p.buffers.size(), all.params.size() + all.buffers.size());
}

TEST(Freeze, BadNamesAreRefusedNamingTheBlocks) {
  expect_error([] { compile(zoo::resnet18_cifar(), options("layer9")); }, {"'layer9'", "layer1", "layer4", "kiln plan"});
  expect_error([] { compile(zoo::resnet18_cifar(), options("fc")); }, {"nothing to train"});
  expect_error([] { compile(zoo::resnet18_cifar(), options("layer2.0.conv2")); },
               {"inside a residual block", "layer2.0"});
}

}  // namespace
}  // namespace kiln
