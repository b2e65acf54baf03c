// Mixed precision in a compiled program (compiling needs no GPU): the weights the convolutions and
// GEMMs read have fp16/bf16 copies and fp16/bf16 gradients — their only gradients — laid out as a
// prefix of the parameters' layout; the fp32 gradient region holds the rest. The step has no
// casts of parameters or gradients: the optimizer reads the compute gradients and rewrites the
// copies, and a separate refresh list remakes them after the host writes parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/memory_plan.h"
#include "kiln/zoo.h"

namespace kiln {
namespace {

CompileOptions mixed(Precision precision, const std::string& optimizer = "sgd") {
  CompileOptions o;
  o.batch = 4, o.device = Device::CUDA, o.precision = precision;
  o.optimizer.name = optimizer;  // SGD's default momentum, 0.9
  return o;
}

DType compute_dtype(Precision precision) { return precision == Precision::FP16 ? DType::F16 : DType::BF16; }

size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The digits CNN: conv and linear weights (and linear biases) are copied, BN's are not.
TEST(MixedPrecisionCompile, CopiedWeightsHaveOnlyComputeDtypeGradients) {
  for (Precision precision : {Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(precision));
    const Program p = compile(zoo::digits_cnn(), mixed(precision));
    const DType dtype = compute_dtype(precision);
    ASSERT_GE(p.grad_region, 0);
    ASSERT_GE(p.compute_grad_region, 0);
    ASSERT_GE(p.compute_param_region, 0);

    const int conv_grad = p.find("conv1.conv.weight.grad");
    ASSERT_GE(conv_grad, 0);
    EXPECT_EQ(p.tensors[conv_grad].dtype, dtype);
    EXPECT_EQ(p.tensors[conv_grad].role, TensorRole::ComputeGrad);
    EXPECT_EQ(p.tensors[conv_grad].alias_of, p.compute_grad_region);

    // Copied parameters first, each one's copy and gradient at its element index in the compute
    // regions; the others' fp32 gradients from element 0 of the fp32 region.
    const size_t copied_bytes = size_t(numel(p.tensors[p.compute_grad_region].shape)) * sizeof(float);
    size_t copied = 0, fp32_grad_bytes = 0;
    for (size_t i = 0; i < p.params.size(); ++i) {
      const TensorSpec& param = p.tensors[p.params[i]];
      const TensorSpec& grad = p.tensors[p.grads[i]];
      SCOPED_TRACE(param.name);
      EXPECT_EQ(grad.name, param.name + ".grad");
      EXPECT_EQ(grad.shape, param.shape);
      const int copy = p.find(param.name + ":compute");
      if (copy >= 0) {
        EXPECT_EQ(copied, i) << "copied parameters must come first";
        ++copied;
        const size_t element = param.alias_offset / sizeof(float);
        EXPECT_LT(param.alias_offset, copied_bytes);
        EXPECT_EQ(p.tensors[copy].alias_of, p.compute_param_region);
        EXPECT_EQ(p.tensors[copy].alias_offset, element * dtype_size(dtype));
        EXPECT_EQ(grad.dtype, dtype);
        EXPECT_EQ(grad.role, TensorRole::ComputeGrad);
        EXPECT_EQ(grad.alias_of, p.compute_grad_region);
        EXPECT_EQ(grad.alias_offset, element * dtype_size(dtype));
      } else {
        EXPECT_EQ(grad.dtype, DType::F32);
        EXPECT_EQ(grad.role, TensorRole::Grad);
        EXPECT_EQ(grad.alias_of, p.grad_region);
        ASSERT_GE(param.alias_offset, copied_bytes);
        EXPECT_EQ(grad.alias_offset, param.alias_offset - copied_bytes);
        EXPECT_EQ(grad.alias_offset % kAlignment, 0u);
        fp32_grad_bytes += aligned(param.bytes());
      }
    }
    EXPECT_EQ(copied, 8u) << "4 conv weights, 2 linear weights and 2 linear biases";
    // The fp32 region holds exactly the 8 BN weights and biases (32 or 64 floats, one 256-byte
    // block each); the compute regions the copied prefix, whole 8-element groups (the CUDA
    // kernels' unit).
    EXPECT_EQ(fp32_grad_bytes, 8 * kAlignment);
    EXPECT_EQ(p.tensors[p.grad_region].bytes(), fp32_grad_bytes);
    EXPECT_EQ(p.tensors[p.grad_region].dtype, DType::F32);
    const int64_t prefix = numel(p.tensors[p.compute_grad_region].shape);
    EXPECT_EQ(prefix % 8, 0);
    EXPECT_EQ(numel(p.tensors[p.compute_param_region].shape), prefix);
    EXPECT_EQ(numel(p.tensors[p.param_region].shape), prefix + numel(p.tensors[p.grad_region].shape));
    EXPECT_EQ(p.tensors[p.compute_grad_region].dtype, dtype);
    // No fp32 shadow of a compute gradient, and no second name for one.
    for (const TensorSpec& t : p.tensors) EXPECT_FALSE(ends_with(t.name, ".grad:compute")) << t.name;
  }
}

TEST(MixedPrecisionCompile, TheStepCastsNoParametersOrGradientsAndTheUpdateWritesTheCopies) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    const Program p = compile(zoo::digits_cnn(), mixed(Precision::FP16, optimizer));
    // The one cast left in forward and inference is the fp32 batch's (compile_test.cpp).
    for (const auto* list : {&p.forward, &p.inference})
      for (const Op& op : *list) {
        if (op.kind == OpKind::CAST) {
          EXPECT_EQ(op.in, std::vector<int>{p.input});
        }
      }
    for (const Op& op : p.backward) EXPECT_NE(op.kind, OpKind::CAST);
    // The copies are remade from the masters only by the refresh list.
    ASSERT_EQ(p.refresh_copies.size(), 1u);
    EXPECT_EQ(p.refresh_copies[0].kind, OpKind::CAST);
    EXPECT_EQ(p.refresh_copies[0].in, std::vector<int>{p.param_region});
    EXPECT_EQ(p.refresh_copies[0].out, std::vector<int>{p.compute_param_region});

    // Update list: FIND_NONFINITE (fp16 scales its loss by default), the optimizer, the scale.
    ASSERT_EQ(p.update.size(), 3u);
    EXPECT_EQ(p.update[0].kind, OpKind::FIND_NONFINITE);
    EXPECT_EQ(p.update[0].in, (std::vector<int>{p.grad_region, p.compute_grad_region}));
    const Op& update = p.update[1];
    // Inputs: grads, compute_grads, loss_scale, found_nonfinite; outputs: params, compute_params,
    // then the state (optimizer_contract.h).
    EXPECT_EQ(update.in, (std::vector<int>{p.grad_region, p.compute_grad_region, p.loss_scale, p.found_nonfinite}));
    std::vector<int> out = {p.param_region, p.compute_param_region};
    out.insert(out.end(), p.opt_state_regions.begin(), p.opt_state_regions.end());
    EXPECT_EQ(update.out, out);
    EXPECT_EQ(update.kind, optimizer == "sgd" ? OpKind::SGD_UPDATE : OpKind::ADAMW_UPDATE);
    // Optimizer state spans every parameter, in fp32.
    for (int id : p.opt_state_regions) {
      EXPECT_EQ(p.tensors[id].dtype, DType::F32);
      EXPECT_EQ(p.tensors[id].shape, p.tensors[p.param_region].shape);
    }
  }
}

TEST(MixedPrecisionCompile, Fp32ProgramsHaveNoCopiesAndAGradientPerParameter) {
  CompileOptions o;
  o.batch = 4;
  const Program p = compile(zoo::digits_cnn(), o);
  EXPECT_EQ(p.compute_param_region, -1);
  EXPECT_EQ(p.compute_grad_region, -1);
  EXPECT_TRUE(p.refresh_copies.empty());
  ASSERT_GE(p.grad_region, 0);
  EXPECT_EQ(p.tensors[p.grad_region].shape, p.tensors[p.param_region].shape);
  EXPECT_EQ(p.update.at(0).in, (std::vector<int>{p.grad_region, -1, -1, -1}));
  EXPECT_EQ(p.update.at(0).out, (std::vector<int>{p.param_region, -1, p.opt_state_regions.at(0)}));
}

// A network of linear layers only: every parameter has a copy, so there is no fp32 gradient.
TEST(MixedPrecisionCompile, EveryParameterCopiedLeavesNoFp32GradientRegion) {
  Blueprint m("head");
  m.input(5, 5, 64).flatten("flatten").fc(128, true, "fc1").relu("relu").fc(10, true, "fc2");
  const Program p = compile(m, mixed(Precision::FP16));
  EXPECT_EQ(p.grad_region, -1);
  ASSERT_GE(p.compute_grad_region, 0);
  for (const TensorSpec& t : p.tensors) EXPECT_NE(t.role, TensorRole::Grad) << t.name;
  EXPECT_EQ(numel(p.tensors[p.compute_grad_region].shape), numel(p.tensors[p.param_region].shape));
  ASSERT_EQ(p.update.size(), 3u);
  EXPECT_EQ(p.update[0].in, (std::vector<int>{-1, p.compute_grad_region}));
  EXPECT_EQ(p.update[1].in, (std::vector<int>{-1, p.compute_grad_region, p.loss_scale, p.found_nonfinite}));
  const MemoryPlan plan = plan_memory(p);
  EXPECT_NO_THROW(verify_memory_plan(p, plan));
  EXPECT_EQ(plan.grad_bytes, aligned(p.tensors[p.compute_grad_region].bytes()));
}

// ResNet-50 in fp16: the gradients are the fp16 ones plus BN's in fp32, about half of what a
// gradient per parameter in fp32 took; the plan holds and `kiln plan` shows the refresh list.
TEST(MixedPrecisionCompile, ResNet50GradientsTakeTheComputeDtypeSize) {
  const Program p = compile(zoo::resnet50(), mixed(Precision::FP16));
  const MemoryPlan plan = plan_memory(p);
  EXPECT_NO_THROW(verify_memory_plan(p, plan));
  size_t bn_bytes = 0;
  int64_t copied_elements = 0;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const TensorSpec& param = p.tensors[p.params[i]];
    if (p.tensors[p.grads[i]].role == TensorRole::Grad) bn_bytes += aligned(param.bytes());
    else copied_elements += int64_t(aligned(param.bytes()) / sizeof(float));
  }
  EXPECT_EQ(p.tensors[p.grad_region].bytes(), bn_bytes);
  EXPECT_EQ(numel(p.tensors[p.compute_grad_region].shape), copied_elements);
  EXPECT_EQ(plan.grad_bytes, aligned(p.tensors[p.compute_grad_region].bytes()) + bn_bytes);
  const size_t fp32_params = p.tensors[p.param_region].bytes();
  EXPECT_LT(double(plan.grad_bytes), 0.51 * double(fp32_params)) << "a gradient per parameter in fp32 took all of it";
  std::printf("resnet50 fp16: gradients %.1f MiB (fp16 %.1f + fp32 %.2f), fp32 parameters %.1f MiB\n",
              plan.grad_bytes / 1048576.0, p.tensors[p.compute_grad_region].bytes() / 1048576.0, bn_bytes / 1048576.0,
              fp32_params / 1048576.0);
  EXPECT_NE(format_plan(p, plan).find("copy refresh 1"), std::string::npos);
}

}  // namespace
}  // namespace kiln
