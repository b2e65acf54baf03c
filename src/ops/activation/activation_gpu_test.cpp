// Every activation on the GPU in fp32, fp16 and bf16, through a compiled program (forward,
// backward with dX, inference), against the CPU's fp32 program and against PyTorch's functional
// of the same name (bench/torch_activation_reference.py) on the same values.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/checkpoint.h"
#include "support/activations.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace kiln::testing;
using gpu_test::f32_tensor;
using gpu_test::f32_values;
using gpu_test::torch_available;

struct Result {
  std::vector<float> y, dx, inference;
};

// input (N, 9, 9, 16) -> the activation; no loss, dX wanted.
Result run(Activation f, float alpha, Device device, Precision precision, const std::vector<float>& x,
           const std::vector<float>& dy) {
  Blueprint m("act");
  m.input(9, 9, 16).activation(f, alpha, "act");
  CompileOptions o;
  o.device = device, o.precision = precision, o.batch = 4, o.loss = false, o.input_grad = true;
  Executable exe(compile(m, o), 1);
  write_floats(exe, exe.program().input, x);
  write_floats(exe, exe.program().output_grad, dy);
  exe.run_forward({0.f, 0, 1});
  exe.run_backward({0.f, 0, 1});
  exe.run_inference({0.f, 0, 1});
  return {read_floats(exe, "act"), read_floats(exe, exe.program().tensors[exe.program().input_grad].name),
          read_floats(exe, "act:inf")};
}

class ActivationGpu : public ::testing::TestWithParam<Precision> {};

TEST_P(ActivationGpu, MatchesCpuAndPyTorch) {
  KILN_REQUIRE_GPU();
  const Precision precision = GetParam();
  const DType dtype = activation_dtype(precision);
  std::mt19937 rng(7);
  // Spread over [-8, 8]: every branch of the piecewise functions (ReLU6 clips at 6).
  const size_t n = 4 * 9 * 9 * 16;
  std::vector<float> x = random_values(dtype, n, rng, 0.f, 3.f), dy = random_values<float>(dtype, n, rng);
  const double tol = tolerance(precision);

  nlohmann::json functions = nlohmann::json::array();  // what PyTorch computes, from the family's list
  std::map<std::string, Result> gpu;
  for (auto [f, alpha] : every_activation(false)) {
    SCOPED_TRACE(activation_name(f));
    const Result cpu = run(f, alpha, Device::CPU, Precision::FP32, x, dy);
    const Result got = run(f, alpha, Device::CUDA, precision, x, dy);
    expect_close_to_reference("y vs cpu", got.y, cpu.y, tol);
    expect_close_to_reference("dx vs cpu", got.dx, cpu.dx, tol);
    expect_close_to_reference("inference y vs cpu", got.inference, cpu.y, tol);
    gpu[activation_name(f)] = got;
    functions.push_back({{"name", activation_name(f)}, {"alpha", alpha}, {"torch", activation::info(f).torch}});
  }

  if (!torch_available()) GTEST_SKIP() << "compared with the CPU; PyTorch (python3 with torch, safetensors) missing";
  const SafetensorsFile torch =
      gpu_test::torch_reference("torch_activation_reference.py", "kiln_activation_torch", precision_name(precision),
                                {f32_tensor("x", x), f32_tensor("dy", dy)},
                                {{"precision", precision_name(precision)}, {"functions", functions.dump()}});
  for (const auto& [name, got] : gpu) {
    SCOPED_TRACE(name);
    expect_close_to_reference("y vs torch", got.y, f32_values(torch, "y_" + name), tol);
    expect_close_to_reference("dx vs torch", got.dx, f32_values(torch, "dx_" + name), tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ActivationGpu, ::testing::Values(Precision::FP16, Precision::BF16, Precision::FP32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln
