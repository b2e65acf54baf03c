// The static memory plan: no two tensors whose lifetimes overlap share bytes. The check here
// is written independently of verify_memory_plan (from op positions, not from the plan's
// own lifetimes), and runs on real zoo programs.
#include <gtest/gtest.h>

#include <cstdio>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

int root(const Program& p, int id) {
  while (p.tensors[id].alias_of >= 0) id = p.tensors[id].alias_of;
  return id;
}

void expect_no_live_overlap(const Program& p, const MemoryPlan& plan) {
  // Recompute lifetimes from scratch.
  const size_t n = p.tensors.size();
  std::vector<int> first(n, -1), last(n, -1);
  int pos = 0;
  for (const auto* list : {&p.forward, &p.backward, &p.update, &p.inference}) {
    for (const Op& op : *list) {
      auto touch = [&](int id) {
        if (id < 0) return;
        const int r = root(p, id);
        if (first[r] < 0) first[r] = pos;
        last[r] = pos;
      };
      for (int id : op.in) touch(id);
      for (int id : op.out) touch(id);
      ++pos;
    }
  }
  std::vector<int> roots;
  for (size_t i = 0; i < n; ++i) {
    if (p.tensors[i].alias_of >= 0) continue;
    if (p.tensors[i].role != TensorRole::Activation) first[i] = 0, last[i] = pos;
    if (first[i] >= 0) roots.push_back(int(i));
  }
  int64_t violations = 0, shared_pairs = 0;
  for (size_t a = 0; a < roots.size(); ++a) {
    for (size_t b = a + 1; b < roots.size(); ++b) {
      const int i = roots[a], j = roots[b];
      const size_t bi = plan.offset[i], ei = bi + p.tensors[i].bytes();
      const size_t bj = plan.offset[j], ej = bj + p.tensors[j].bytes();
      if (!(bi < ej && bj < ei)) continue;
      ++shared_pairs;
      if (first[i] <= last[j] && first[j] <= last[i]) ++violations;
    }
  }
  EXPECT_EQ(violations, 0);
  EXPECT_GT(shared_pairs, 0) << "activations never share memory: the plan does no reuse";
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(plan.offset[i] % kAlignment, 0u) << p.tensors[i].name;
    EXPECT_LE(plan.offset[i] + p.tensors[i].bytes(), plan.arena_bytes) << p.tensors[i].name;
  }
  EXPECT_NO_THROW(verify_memory_plan(p, plan));
}

void report(const char* name, const MemoryPlan& plan) {
  std::printf("%s: arena %.1f MiB = params %.1f + grads %.1f + optimizer %.1f + buffers %.2f + io %.1f + "
              "activations %.1f MiB (%.1f MiB without sharing)\n",
              name, plan.arena_bytes / 1048576.0, plan.param_bytes / 1048576.0, plan.grad_bytes / 1048576.0,
              plan.opt_state_bytes / 1048576.0, plan.buffer_bytes / 1048576.0, plan.io_bytes / 1048576.0,
              plan.activation_bytes / 1048576.0, plan.activation_sum_bytes / 1048576.0);
}

TEST(MemoryPlan, Vgg16BnHasNoOverlappingLiveTensors) {
  CompileOptions o;
  o.batch = 16;
  const Program p = compile(zoo::vgg16_bn(), o);
  const MemoryPlan plan = plan_memory(p);
  expect_no_live_overlap(p, plan);
  EXPECT_LT(plan.activation_bytes, plan.activation_sum_bytes / 2);
  report("vgg16_bn batch 16", plan);
}

TEST(MemoryPlan, ResNet50HasNoOverlappingLiveTensors) {
  CompileOptions o;
  o.batch = 16;
  o.optimizer.kind = OptimizerKind::AdamW;
  const Program p = compile(zoo::resnet50(), o);
  const MemoryPlan plan = plan_memory(p);
  expect_no_live_overlap(p, plan);
  EXPECT_EQ(plan.param_bytes, plan.grad_bytes);
  EXPECT_EQ(plan.opt_state_bytes, 2 * plan.param_bytes);  // AdamW: m and v
  report("resnet50 batch 16", plan);
}

TEST(MemoryPlan, PlanTextListsLayersTensorsAndTotals) {
  CompileOptions o;
  o.batch = 2;
  const Program p = compile(zoo::digits_cnn(), o);
  const std::string text = format_plan(p, plan_memory(p));
  EXPECT_NE(text.find("CBR layers: 4"), std::string::npos);
  EXPECT_NE(text.find("conv1.conv.weight"), std::string::npos);
  EXPECT_NE(text.find("activations"), std::string::npos);
  EXPECT_NE(text.find("total"), std::string::npos);
}

}  // namespace
}  // namespace kiln
