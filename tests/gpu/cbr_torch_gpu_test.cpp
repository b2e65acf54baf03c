// kiln's fused CBR on the GPU against PyTorch (Conv2d(bias=False) + BatchNorm2d + ReLU,
// channels_last, under autocast in fp16/bf16) on the same inputs and weights, in fp16, bf16 and
// fp32. For each case, three training steps (forward + backward, no update) on fresh inputs:
// each step's y, running mean and variance, dW, dgamma, dbeta and, with input gradients, dX;
// then inference with the running statistics on a fresh input. The cases are middle layers
// (full backward with dX) and first layers (CBR_BWD_FIRST, no dX), among them the 1- and
// 3-channel inputs of a digits CNN and of ImageNet networks (ResNet's 7x7 stride-2 stem).
// bench/torch_cbr_reference.py computes PyTorch's side from a safetensors file this test writes
// (its docstring gives the tensor names and metadata).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;
using gpu_test::f32_tensor;
using gpu_test::f32_values;
using gpu_test::torch_available;

constexpr int kSteps = 3;

struct Case {
  BlockShape shape;
  bool input_grad;  // false: a first layer (CBR_BWD_FIRST, no dX)
  // BlockShape::str()'s form, built without the `"literal" + std::string&&` that GCC 12's
  // -Wrestrict misreports once inlined.
  std::string str() const {
    const BlockShape& s = shape;
    char text[96];
    std::snprintf(text, sizeof text, "N%d C%d %dx%d K%d %dx%d s%d %s", s.n, s.c, s.hw, s.hw, s.k, s.kernel, s.kernel,
                  s.stride, input_grad ? "with dX" : "first layer");
    return text;
  }
};

// K stays a multiple of 8: CBR in fp16/bf16 needs it.
const Case kCases[] = {
    {{8, 64, 15, 128, 3, 2}, true},
    {{4, 256, 9, 64, 1, 1}, true},
    {{8, 64, 15, 128, 3, 2}, false},
    {{16, 1, 28, 32, 3, 1}, false},  // a digits CNN's first conv: one input channel
    {{4, 3, 32, 64, 3, 1}, false},   // RGB input, 3x3 stride 1
    {{4, 3, 56, 64, 7, 2}, false},   // ResNet's stem: 7x7 stride 2, pad 3
};

// Names of per-step tensors: "y0", "dw2", ...
std::string key(const char* name, int step) {
  std::string k = name;
  return k += std::to_string(step);
}

int64_t out_hw(const BlockShape& s) { return (s.hw + 2 * s.pad() - s.kernel) / s.stride + 1; }

// Everything both sides read: per-step x and dy, the inference input, the parameters.
struct CaseInputs {
  std::vector<std::vector<float>> x, dy;
  std::vector<float> x_inf, w, gamma, beta;
};

// Random inputs in the activation dtype; kiln's initialized weight; non-trivial affine
// parameters (written to kiln), so dgamma/dbeta and the shift are really exercised.
CaseInputs make_inputs(Executable& exe, const BlockShape& s, DType dtype, std::mt19937& rng) {
  CaseInputs in;
  const size_t x_size = size_t(s.n) * s.hw * s.hw * s.c, y_size = size_t(s.n) * out_hw(s) * out_hw(s) * s.k;
  for (int i = 0; i < kSteps; ++i) {
    in.x.push_back(random_values<float>(dtype, x_size, rng));
    in.dy.push_back(random_values<float>(dtype, y_size, rng));
  }
  in.x_inf = random_values<float>(dtype, x_size, rng);
  in.w = read_floats(exe, "conv.weight");
  in.gamma = random_values(DType::F32, size_t(s.k), rng, 0.f, 0.3f), in.beta = in.gamma;
  for (float& g : in.gamma) g += 1.f;
  for (float& b : in.beta) b *= 0.5f;
  write_floats(exe, exe.id("bn.weight"), in.gamma);
  write_floats(exe, exe.id("bn.bias"), in.beta);
  return in;
}

// PyTorch's answer for the case (bench/torch_cbr_reference.py).
SafetensorsFile torch_case(size_t index, const Case& c, Precision precision, const CaseInputs& in) {
  const BlockShape& s = c.shape;
  const int64_t ho = out_hw(s);
  std::vector<NamedTensor> tensors;
  for (int i = 0; i < kSteps; ++i) {
    tensors.push_back(f32_tensor(key("x", i), in.x[i], {s.n, s.hw, s.hw, s.c}));
    tensors.push_back(f32_tensor(key("dy", i), in.dy[i], {s.n, ho, ho, s.k}));
  }
  tensors.push_back(f32_tensor("x_inf", in.x_inf, {s.n, s.hw, s.hw, s.c}));
  tensors.push_back(f32_tensor("w", in.w, {s.k, s.kernel, s.kernel, s.c}));
  tensors.push_back(f32_tensor("gamma", in.gamma, {s.k}));
  tensors.push_back(f32_tensor("beta", in.beta, {s.k}));
  return gpu_test::torch_reference(
      "torch_cbr_reference.py", "kiln_cbr_torch", std::string(precision_name(precision)) + "_case" + std::to_string(index),
      tensors,
      {{"stride", std::to_string(s.stride)}, {"padding", std::to_string(s.pad())}, {"eps", "1e-5"},
       {"momentum", "0.1"}, {"precision", precision_name(precision)}, {"steps", std::to_string(kSteps)},
       {"input_grad", c.input_grad ? "1" : "0"}});
}

int count_ops(const std::vector<Op>& ops, OpKind kind) {
  return int(std::count_if(ops.begin(), ops.end(), [&](const Op& op) { return op.kind == kind; }));
}

// A first layer is lowered to CBR_BWD_FIRST and has no input-gradient tensor.
void expect_backward_kind(const Program& p, bool input_grad) {
  EXPECT_EQ(count_ops(p.backward, OpKind::CBR_BWD), input_grad ? 1 : 0);
  EXPECT_EQ(count_ops(p.backward, OpKind::CBR_BWD_FIRST), input_grad ? 0 : 1);
  if (input_grad)
    EXPECT_GE(p.input_grad, 0);
  else
    EXPECT_LT(p.input_grad, 0);
}

// What one step adds to a running statistic: now - (1 - momentum) * before.
std::vector<float> step_part(const std::vector<float>& now, const std::vector<float>& before) {
  std::vector<float> part(now.size());
  for (size_t k = 0; k < now.size() && k < before.size(); ++k) part[k] = now[k] - 0.9f * before[k];
  return part;
}

// One kiln training step on step i's inputs, compared with PyTorch's step i.
void check_step(Executable& exe, const SafetensorsFile& torch, const CaseInputs& in, int i, bool input_grad,
                double tol) {
  SCOPED_TRACE(key("step ", i));
  write_floats(exe, exe.program().input, in.x[i]);
  write_floats(exe, exe.program().output_grad, in.dy[i]);
  const std::vector<float> kiln_var_before = read_floats(exe, "bn.running_var");
  exe.run_forward({0.f, i, 1});
  expect_close_to_reference("y", read_floats(exe, "conv"), f32_values(torch, key("y", i)), tol);
  expect_close_to_reference("running_mean", read_floats(exe, "bn.running_mean"),
                            f32_values(torch, key("running_mean", i)), tol);
  const std::vector<float> kiln_var = read_floats(exe, "bn.running_var"),
                           torch_var = f32_values(torch, key("running_var", i));
  expect_close_to_reference("running_var", kiln_var, torch_var, tol);
  // running_var is mostly 0.9 times the last one; this step's part, momentum * the batch's
  // unbiased variance, compared alone.
  const std::vector<float> torch_var_before =
      i == 0 ? std::vector<float>(torch_var.size(), 1.f) : f32_values(torch, key("running_var", i - 1));
  expect_close_to_reference("running_var update", step_part(kiln_var, kiln_var_before),
                            step_part(torch_var, torch_var_before), tol);
  exe.run_backward({0.f, i, 1});
  if (input_grad)
    expect_close_to_reference("dx", read_floats(exe, exe.program().tensors[exe.program().input_grad].name),
                              f32_values(torch, key("dx", i)), tol);
  expect_close_to_reference("dw", read_floats(exe, "conv.weight.grad"), f32_values(torch, key("dw", i)), tol);
  expect_close_to_reference("dgamma", read_floats(exe, "bn.weight.grad"), f32_values(torch, key("dgamma", i)), tol);
  expect_close_to_reference("dbeta", read_floats(exe, "bn.bias.grad"), f32_values(torch, key("dbeta", i)), tol);
}

class CbrTorch : public ::testing::TestWithParam<Precision> {};

TEST_P(CbrTorch, MatchesPyTorchConvBnReluUnderAutocast) {
  if (!torch_available()) GTEST_SKIP() << "needs a GPU and python3 with torch and safetensors";
  const Precision precision = GetParam();
  const double tol = tolerance(precision);
  for (size_t ci = 0; ci < std::size(kCases); ++ci) {
    const Case& c = kCases[ci];
    SCOPED_TRACE(c.str());
    const BlockShape& s = c.shape;
    Executable exe(compile(conv_bn_relu_block(s), block_options(s, Device::CUDA, precision, true, c.input_grad)), 23);
    expect_backward_kind(exe.program(), c.input_grad);
    std::mt19937 rng(100 + unsigned(ci));
    const CaseInputs in = make_inputs(exe, s, activation_dtype(precision), rng);
    const SafetensorsFile torch = torch_case(ci, c, precision, in);

    for (int i = 0; i < kSteps; ++i) check_step(exe, torch, in, i, c.input_grad, tol);
    // Inference with the running statistics of the last step, on a fresh input.
    write_floats(exe, exe.program().input, in.x_inf);
    exe.run_inference({0.f, kSteps, 1});
    expect_close_to_reference("inference y", read_floats(exe, "conv:inf"), f32_values(torch, "y_inf"), tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CbrTorch, ::testing::Values(Precision::FP16, Precision::BF16, Precision::FP32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln
