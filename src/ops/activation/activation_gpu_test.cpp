// Every activation on the GPU in fp32, fp16 and bf16, through a compiled program (forward,
// backward with dX, inference), against the CPU's fp32 program and against PyTorch's functional
// of the same name (bench/torch_activation_reference.py) on the same values.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "kiln/checkpoint.h"
#include "support/cbr_block.h"

namespace kiln {
namespace {

using namespace kiln::testing;

const std::pair<Activation, float> kFunctions[] = {
    {Activation::ReLU6, 0.f}, {Activation::LeakyReLU, 0.1f}, {Activation::ELU, 0.7f},
    {Activation::SiLU, 0.f},  {Activation::Hardswish, 0.f}, {Activation::GELU, 0.f},
    {Activation::GELUTanh, 0.f}, {Activation::Sigmoid, 0.f}, {Activation::Tanh, 0.f}};

bool have_gpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

bool torch_available() {
  return have_gpu() &&
         std::system("python3 -c 'import torch, safetensors; assert torch.cuda.is_available()' >/dev/null 2>&1") == 0;
}

std::string source_dir() {
  const char* env = std::getenv("KILN_SOURCE_DIR");
  return env && *env ? env : KILN_SOURCE_DIR;
}

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

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double norm = 0;
  for (float v : ref) norm += double(v) * v;
  ASSERT_GT(norm, 0) << what << ": the reference is all zeros";
  const double err = rel_l2(got, ref);
  EXPECT_LT(err, tol) << what << ": relative L2 error " << err;
}

class ActivationGpu : public ::testing::TestWithParam<Precision> {};

TEST_P(ActivationGpu, MatchesCpuAndPyTorch) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Precision precision = GetParam();
  const DType dtype = activation_dtype(precision);
  std::mt19937 rng(7);
  // Spread over [-8, 8]: every branch of the piecewise functions (ReLU6 clips at 6).
  const size_t n = 4 * 9 * 9 * 16;
  std::vector<float> x = random_values(n, dtype, rng, 3.f), dy = random_values(n, dtype, rng);
  const double tol = tolerance(precision);

  std::string functions;
  std::map<std::string, Result> gpu;
  for (auto [f, alpha] : kFunctions) {
    SCOPED_TRACE(activation_name(f));
    const Result cpu = run(f, alpha, Device::CPU, Precision::FP32, x, dy);
    const Result got = run(f, alpha, Device::CUDA, precision, x, dy);
    expect_close(got.y, cpu.y, tol, "y vs cpu");
    expect_close(got.dx, cpu.dx, tol, "dx vs cpu");
    expect_close(got.inference, cpu.y, tol, "inference y vs cpu");
    gpu[activation_name(f)] = got;
    functions += (functions.empty() ? "" : ",") + std::string(activation_name(f)) + ":" + std::to_string(alpha);
  }

  if (!torch_available()) GTEST_SKIP() << "compared with the CPU; PyTorch (python3 with torch, safetensors) missing";
  const auto dir = std::filesystem::temp_directory_path() / "kiln_activation_torch";
  std::filesystem::create_directories(dir);
  const std::string stem = (dir / precision_name(precision)).string(), in = stem + ".in.safetensors",
                    out = stem + ".out.safetensors";
  auto named = [](const std::string& name, const std::vector<float>& v) {
    NamedTensor t{name, DType::F32, {int64_t(v.size())}, std::vector<std::byte>(v.size() * 4)};
    std::memcpy(t.data.data(), v.data(), t.data.size());
    return t;
  };
  save_safetensors(in, {named("x", x), named("dy", dy)},
                   {{"precision", precision_name(precision)}, {"functions", functions}});
  std::filesystem::remove(out);
  const std::string cmd = "python3 " + source_dir() + "/bench/torch_activation_reference.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const SafetensorsFile torch = load_safetensors(out);
  auto floats = [&](const std::string& name) {
    const NamedTensor* t = torch.find(name);
    std::vector<float> v(t ? t->data.size() / 4 : 0);
    if (t) std::memcpy(v.data(), t->data.data(), t->data.size());
    return v;
  };
  for (const auto& [name, got] : gpu) {
    SCOPED_TRACE(name);
    expect_close(got.y, floats("y_" + name), tol, "y vs torch");
    expect_close(got.dx, floats("dx_" + name), tol, "dx vs torch");
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ActivationGpu, ::testing::Values(Precision::FP16, Precision::BF16, Precision::FP32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln
