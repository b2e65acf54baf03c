// Where dynamic loss scaling puts its ops and state in a compiled program: the loss gradient is
// scaled first in backward, the gradients are checked before the optimizer, which reads the scale
// and the flag, and the scale is updated last; fp16 scales by default, bf16 and fp32 do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kiln/compile.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::expect_error;

CompileOptions options(Precision precision, LossScaleMode mode = LossScaleMode::Auto) {
  CompileOptions o;
  o.batch = 4;
  o.precision = precision;
  o.device = precision == Precision::FP32 ? Device::CPU : Device::CUDA;  // compiling needs no GPU
  o.loss_scaling.mode = mode;
  return o;
}

std::vector<OpKind> kinds(const std::vector<Op>& ops) {
  std::vector<OpKind> out;
  for (const Op& op : ops) out.push_back(op.kind);
  return out;
}

bool has(const std::vector<Op>& ops, OpKind kind) {
  return std::any_of(ops.begin(), ops.end(), [&](const Op& op) { return op.kind == kind; });
}

TEST(LossScalingCompile, Fp16ScalesAroundTheWholeStepInOrder) {
  const Program p = compile(zoo::digits_cnn(), options(Precision::FP16));
  ASSERT_GE(p.loss_scale, 0);
  // SOFTMAX_CE reads the scale (its inputs: logits, labels, loss_scale; loss_contract.h) and
  // writes the scaled gradient; the loss itself stays unscaled.
  const Op& ce =
      *std::find_if(p.forward.begin(), p.forward.end(), [](const Op& op) { return op.kind == OpKind::SOFTMAX_CE; });
  EXPECT_EQ(ce.in, (std::vector<int>{p.logits, p.label, p.loss_scale}));
  EXPECT_EQ(ce.out.at(0), p.loss);
  // The update checks every gradient it reads first — the fp32 region (BN's) and the fp16 one of
  // the weights with compute copies, which backward leaves as they are (no cast) — the optimizer
  // reads the scale and the flag, and the scale moves last.
  EXPECT_FALSE(has(p.backward, OpKind::CAST));
  ASSERT_GE(p.grad_region, 0);
  ASSERT_GE(p.compute_grad_region, 0);
  EXPECT_EQ(kinds(p.update),
            (std::vector<OpKind>{OpKind::FIND_NONFINITE, OpKind::SGD_UPDATE, OpKind::UPDATE_LOSS_SCALE}));
  // FindNonFinite's inputs: grads, compute_grads (loss_scale_contract.h).
  EXPECT_EQ(p.update[0].in, (std::vector<int>{p.grad_region, p.compute_grad_region}));
  EXPECT_EQ(p.update[0].out, (std::vector<int>{p.found_nonfinite}));
  // SgdUpdate's inputs: grads, compute_grads, loss_scale, found_nonfinite (optimizer_contract.h).
  EXPECT_EQ(p.update[1].in,
            (std::vector<int>{p.grad_region, p.compute_grad_region, p.loss_scale, p.found_nonfinite}));
  EXPECT_EQ(p.update[2].in, (std::vector<int>{p.found_nonfinite}));
  EXPECT_EQ(p.update[2].out, (std::vector<int>{p.loss_scale, p.loss_scale_clean_steps}));
  EXPECT_EQ(p.update[2].attrs, (std::vector<double>{2.0, 0.5, 2000.0}));
  // Nowhere else: forward and inference never see the scale.
  for (const auto* list : {&p.forward, &p.inference})
    for (OpKind k : {OpKind::FIND_NONFINITE, OpKind::UPDATE_LOSS_SCALE})
      EXPECT_FALSE(has(*list, k)) << op_kind_name(k);
}

TEST(LossScalingCompile, StateIsPersistentAndTheScaleAndCountAreCheckpointed) {
  CompileOptions o = options(Precision::FP16);
  o.loss_scaling.init_scale = 1024.f;
  const Program p = compile(zoo::digits_cnn(), o);
  const TensorSpec &scale = p.tensors[p.loss_scale], &clean = p.tensors[p.loss_scale_clean_steps],
                   &found = p.tensors[p.found_nonfinite];
  EXPECT_EQ(scale.dtype, DType::F32);
  EXPECT_EQ(scale.init, Init::Constant);
  EXPECT_EQ(scale.init_value, 1024.0);
  EXPECT_EQ(clean.dtype, DType::I32);
  EXPECT_EQ(found.dtype, DType::I32);
  for (const TensorSpec* t : {&scale, &clean, &found}) {
    EXPECT_EQ(t->role, TensorRole::Buffer) << t->name;
    EXPECT_EQ(t->shape, (Shape{1})) << t->name;
  }
  auto buffered = [&](int id) { return std::count(p.buffers.begin(), p.buffers.end(), id); };
  EXPECT_EQ(buffered(p.loss_scale), 1);
  EXPECT_EQ(buffered(p.loss_scale_clean_steps), 1);
  EXPECT_EQ(buffered(p.found_nonfinite), 0) << "the flag is rewritten every step";
}

TEST(LossScalingCompile, AdamWReadsTheScaleToo) {
  CompileOptions o = options(Precision::FP16);
  o.optimizer.name = "adamw";
  const Program p = compile(zoo::digits_cnn(), o);
  ASSERT_EQ(kinds(p.update),
            (std::vector<OpKind>{OpKind::FIND_NONFINITE, OpKind::ADAMW_UPDATE, OpKind::UPDATE_LOSS_SCALE}));
  EXPECT_EQ(p.update[1].in,
            (std::vector<int>{p.grad_region, p.compute_grad_region, p.loss_scale, p.found_nonfinite}));
}

TEST(LossScalingCompile, Bf16AndFp32DoNotScaleByDefault) {
  for (Precision precision : {Precision::BF16, Precision::FP32}) {
    SCOPED_TRACE(precision_name(precision));
    const Program p = compile(zoo::digits_cnn(), options(precision));
    EXPECT_EQ(p.loss_scale, -1);
    EXPECT_EQ(p.loss_scale_clean_steps, -1);
    EXPECT_EQ(p.found_nonfinite, -1);
    EXPECT_EQ(kinds(p.update), (std::vector<OpKind>{OpKind::SGD_UPDATE}));
    // grads, compute_grads (bf16 only), no scale, no flag.
    EXPECT_EQ(p.update[0].in, (std::vector<int>{p.grad_region, p.compute_grad_region, -1, -1}));
    EXPECT_EQ(p.compute_grad_region >= 0, precision == Precision::BF16);
    const Op& ce = *std::find_if(p.forward.begin(), p.forward.end(),
                                 [](const Op& op) { return op.kind == OpKind::SOFTMAX_CE; });
    EXPECT_EQ(ce.in.at(2), -1) << "no scale read by the loss";
    EXPECT_EQ(p.find("loss_scale"), -1);
  }
}

TEST(LossScalingCompile, ModesOverrideThePrecisionsDefault) {
  EXPECT_GE(compile(zoo::digits_cnn(), options(Precision::FP32, LossScaleMode::Dynamic)).loss_scale, 0);
  EXPECT_GE(compile(zoo::digits_cnn(), options(Precision::BF16, LossScaleMode::Dynamic)).loss_scale, 0);
  EXPECT_EQ(compile(zoo::digits_cnn(), options(Precision::FP16, LossScaleMode::Off)).loss_scale, -1);
}

TEST(LossScalingCompile, ProgramsWithoutALossDoNotScale) {
  CompileOptions o = options(Precision::FP16);
  o.loss = false;
  EXPECT_EQ(compile(zoo::digits_cnn(), o).loss_scale, -1);
  o.loss_scaling.mode = LossScaleMode::Dynamic;
  expect_error([&] { compile(zoo::digits_cnn(), o); }, {"loss scaling needs a loss", "CompileOptions::loss"});
}

TEST(LossScalingCompile, SettingsOutOfRangeAreErrors) {
  auto with = [](auto set) {
    CompileOptions o = options(Precision::FP16);
    set(o.loss_scaling);
    return o;
  };
  expect_error([&] { compile(zoo::digits_cnn(), with([](LossScaling& s) { s.init_scale = 0; })); }, {"init_scale"});
  expect_error([&] { compile(zoo::digits_cnn(), with([](LossScaling& s) { s.growth_factor = 1; })); },
               {"growth_factor", "> 1"});
  expect_error([&] { compile(zoo::digits_cnn(), with([](LossScaling& s) { s.backoff_factor = 0; })); },
               {"backoff_factor", "(0, 1)"});
  expect_error([&] { compile(zoo::digits_cnn(), with([](LossScaling& s) { s.growth_interval = 0; })); },
               {"growth_interval", ">= 1"});
}

}  // namespace
}  // namespace kiln
