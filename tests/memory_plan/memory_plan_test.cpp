// The static memory plan: no two tensors whose lifetimes overlap share bytes. The check here
// is written independently of verify_memory_plan (from op positions, not from the plan's
// own lifetimes), and runs on real zoo programs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/blueprint.h"
#include "support/cpu_test_util.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

int root(const Program& p, int id) {
  while (p.tensors[id].alias_of >= 0) id = p.tensors[id].alias_of;
  return id;
}

// Pairs of tensors that share bytes while both are live, with lifetimes recomputed from scratch.
// `overlapping`: an op marked side_work_outlives also uses its tensors during the next op of its
// list (the GPU's rule).
int64_t live_overlaps(const Program& p, const MemoryPlan& plan, bool overlapping, int64_t* shared = nullptr) {
  const size_t n = p.tensors.size();
  std::vector<int> first(n, -1), last(n, -1);
  int pos = 0;
  for (const auto* list : {&p.forward, &p.backward, &p.update, &p.inference}) {
    for (size_t k = 0; k < list->size(); ++k) {
      auto touch = [&](int id) {
        if (id < 0) return;
        const int r = root(p, id);
        if (first[r] < 0) first[r] = pos;
        last[r] = pos;
      };
      for (const Op* op : {k > 0 && overlapping && (*list)[k - 1].side_work_outlives ? &(*list)[k - 1] : nullptr,
                           &(*list)[k]}) {
        if (!op) continue;
        for (int id : op->in) touch(id);
        for (int id : op->out) touch(id);
      }
      ++pos;
    }
  }
  // Storage the caller reads or writes outside the step lives through all of it: a root with a
  // role other than Activation, or one that such a tensor views (logits that are a flatten's view).
  std::vector<bool> outside(n, false);
  for (size_t i = 0; i < n; ++i)
    if (p.tensors[i].role != TensorRole::Activation) outside[size_t(root(p, int(i)))] = true;
  std::vector<int> roots;
  for (size_t i = 0; i < n; ++i) {
    if (p.tensors[i].alias_of >= 0) continue;
    if (outside[i]) first[i] = 0, last[i] = pos;
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
  if (shared) *shared = shared_pairs;
  return violations;
}

void expect_no_live_overlap(const Program& p, const MemoryPlan& plan) {
  int64_t shared_pairs = 0;
  EXPECT_EQ(live_overlaps(p, plan, p.options.device == Device::CUDA, &shared_pairs), 0);
  EXPECT_GT(shared_pairs, 0) << "activations never share memory: the plan does no reuse";
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    // Views sit where their region puts them (a half-precision copy of a 256-byte aligned fp32
    // parameter starts 128-byte aligned); every allocation is aligned.
    if (p.tensors[i].alias_of < 0) {
      EXPECT_EQ(plan.offset[i] % kAlignment, 0u) << p.tensors[i].name;
    }
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
  o.optimizer.name = "adamw";
  const Program p = compile(zoo::resnet50(), o);
  const MemoryPlan plan = plan_memory(p);
  expect_no_live_overlap(p, plan);
  EXPECT_EQ(plan.param_bytes, plan.grad_bytes);
  EXPECT_EQ(plan.opt_state_bytes, 2 * plan.param_bytes);  // AdamW: m and v
  report("resnet50 batch 16", plan);
}

// On the GPU the CBR's and the block end's wgrad may still run beside the next op: the plan keeps
// their tensors through it. The same program with no op outliving its side work (the CPU's
// placement, compile/op_streams.h) gives those bytes to the next op's tensors, which the GPU's
// rule counts as a clash, so the check below can fail.
TEST(MemoryPlan, OnTheGpuSideWorkKeepsItsTensorsThroughTheNextOp) {
  CompileOptions o;
  o.device = Device::CUDA, o.precision = Precision::FP16, o.batch = 8;
  const Program p = compile(zoo::resnet50(), o);
  int outliving = 0;
  for (const Op& op : p.backward) outliving += op.side_work_outlives ? 1 : 0;
  EXPECT_EQ(outliving, 33 + 16 + 4);  // every CBR and conv_bn backward (bodies and downsamples)
  for (const Op& op : p.forward) EXPECT_FALSE(op.side_work_outlives) << op_kind_name(op.kind);
  expect_no_live_overlap(p, plan_memory(p));

  Program cpu_rule = p;
  for (Op& op : cpu_rule.backward) op.side_work_outlives = false;
  const MemoryPlan tight = plan_memory(cpu_rule);
  EXPECT_EQ(live_overlaps(cpu_rule, tight, false), 0);
  EXPECT_GT(live_overlaps(p, tight, true), 0);  // the GPU's ops, on the bytes planned without the overlap
  EXPECT_LE(tight.arena_bytes, plan_memory(p).arena_bytes);
}

// A head that ends in a 1x1 convolution and a flatten (timm's resnetv2 with use_conv, as PyTorch's
// exporters write it): the logits are the flatten's view of the convolution's output, an
// activation. The plan keeps that storage through the step, so the logits read after the backward
// pass are those of the forward; planned as an activation, the backward reused its bytes (an
// imported resnetv2_18 read logits 1.0 of the largest logit away, float64, CPU).
Blueprint conv_head_ending_in_flatten() {
  Blueprint m("conv_head_ending_in_flatten");
  m.input(6, 6, 3);
  m.conv(8, 3, 1, 1, false, "stem").relu("stem.act");
  m.adaptive_avgpool(1, 1, "head.pool");
  m.conv(5, 1, 1, 0, true, "head.fc").flatten("head.flatten");
  return m;
}

TEST(MemoryPlan, LogitsThatViewAnActivationAreReadableAfterTheStep) {
  CompileOptions o;
  o.batch = 2, o.precision = Precision::FP64;
  Executable exe(compile(conv_head_ending_in_flatten(), o), 1);
  const Program& p = exe.program();
  ASSERT_GE(p.tensors[p.logits].alias_of, 0) << "the logits should be a view, the case this test is about";
  EXPECT_EQ(p.tensors[root(p, p.logits)].role, TensorRole::Activation);
  EXPECT_TRUE(p.memory.lifetime[p.logits].persistent);
  EXPECT_TRUE(p.memory.lifetime[p.inference_logits].persistent);
  EXPECT_EQ(live_overlaps(p, p.memory, false), 0);
  EXPECT_NO_THROW(verify_memory_plan(p, p.memory));

  exe.init_state(3);
  const std::vector<double> input = testing::uniform_vec(5, size_t(numel(p.tensors[p.input].shape)));
  const std::vector<int32_t> labels{1, 4};
  exe.write(p.input, input.data(), input.size() * sizeof(double));
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  exe.run_forward({0.f, 0, 1});
  const std::vector<double> after_forward = exe.read<double>(p.logits);
  exe.run_backward({0.f, 0, 1});
  EXPECT_EQ(exe.read<double>(p.logits), after_forward);
  exe.run_update({0.1f, 0, 1});
  EXPECT_EQ(exe.read<double>(p.logits), after_forward);
  double largest = 0;
  for (double v : after_forward) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 0);  // real logits, not a zeroed buffer
  exe.run_inference({});
  const std::vector<double> inference = exe.read<double>(p.inference_logits);
  exe.run_forward({0.f, 1, 1});
  exe.run_backward({0.f, 1, 1});
  EXPECT_EQ(exe.read<double>(p.inference_logits), inference);
}

// The same for the input's gradient (CompileOptions::input_grad) of a network that starts with a
// flatten: it is the flatten's view of the linear layer's input gradient, read after the step.
TEST(MemoryPlan, AnInputGradientThatViewsAnActivationIsKeptThroughTheStep) {
  Blueprint m("flatten_first");
  m.input(2, 2, 3);
  m.flatten("flatten").fc(6, true, "fc1").relu("act").fc(4, true, "fc2");
  CompileOptions o;
  o.batch = 2, o.precision = Precision::FP64, o.input_grad = true;
  const Program p = compile(m, o);
  ASSERT_GE(p.input_grad, 0);
  ASSERT_GE(p.tensors[p.input_grad].alias_of, 0) << "the input gradient should be a view, the case here";
  EXPECT_TRUE(p.memory.lifetime[p.input_grad].persistent);
  EXPECT_EQ(live_overlaps(p, p.memory, false), 0);
  EXPECT_NO_THROW(verify_memory_plan(p, p.memory));
}

// verify_memory_plan refuses a plan that reuses the storage of a tensor read after the step.
TEST(MemoryPlan, VerifyRefusesAPlanThatReusesTheLogitsStorage) {
  CompileOptions o;
  o.batch = 2;
  const Program p = compile(conv_head_ending_in_flatten(), o);
  MemoryPlan reused = p.memory;
  reused.lifetime[size_t(root(p, p.logits))].persistent = false;
  reused.lifetime[size_t(p.logits)].persistent = false;
  testing::expect_error([&] { verify_memory_plan(p, reused); }, {"head.flatten", "head.fc", "reused within"});
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

// The plan is part of the compiled Program: compile() makes it, the Executable places tensors by
// it as it stands (it never plans), and a Program whose plan does not cover its tensors is refused.
TEST(MemoryPlan, TheCompiledProgramHoldsThePlanTheExecutableUses) {
  CompileOptions o;
  o.batch = 2;
  const Program p = compile(zoo::digits_cnn(), o);
  ASSERT_EQ(p.memory.offset.size(), p.tensors.size());
  const MemoryPlan fresh = plan_memory(p);
  EXPECT_EQ(p.memory.offset, fresh.offset);
  EXPECT_EQ(p.memory.arena_bytes, fresh.arena_bytes);
  EXPECT_EQ(live_overlaps(p, p.memory, false), 0);

  // The Executable takes the program's plan, even one that is not plan_memory's: every offset
  // moved up by 512 bytes in a larger arena is where the tensors land.
  Program shifted = p;
  for (size_t& offset : shifted.memory.offset) offset += 512;
  shifted.memory.arena_bytes += 512;
  Executable exe(shifted, 1);
  EXPECT_EQ(exe.plan().offset, shifted.memory.offset);
  const int input = exe.program().input;
  EXPECT_EQ(static_cast<char*>(exe.tensor(input).data) - static_cast<char*>(exe.tensor(0).data),
            std::ptrdiff_t(shifted.memory.offset[input]) - std::ptrdiff_t(shifted.memory.offset[0]));

  Program unplanned = p;
  unplanned.memory = MemoryPlan{};
  testing::expect_error([&] { Executable refused(unplanned, 1); },
                        {"memory plan covers 0 of its", "as compile() returns it"});
}

}  // namespace
}  // namespace kiln
