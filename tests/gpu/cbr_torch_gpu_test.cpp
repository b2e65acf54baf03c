// kiln's fused CBR on the GPU against PyTorch (Conv2d + BatchNorm2d + ReLU under autocast,
// channels_last) on the same inputs and weights: bench/torch_cbr_reference.py computes PyTorch's
// side from a safetensors file this test writes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "../support/cbr_block.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"

namespace kiln {
namespace {

using namespace kiln::testing;

bool torch_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  return std::system("python3 -c 'import torch, safetensors; assert torch.cuda.is_available()' >/dev/null 2>&1") == 0;
}

NamedTensor named(const std::string& name, const Shape& shape, const std::vector<float>& v) {
  NamedTensor t{name, DType::F32, shape, std::vector<std::byte>(v.size() * 4)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> floats(const SafetensorsFile& f, const std::string& name) {
  const NamedTensor* t = f.find(name);
  if (!t) throw kiln::Error("PyTorch output lacks " + name);
  std::vector<float> v(t->data.size() / 4);
  std::memcpy(v.data(), t->data.data(), t->data.size());
  return v;
}

// The repository root: KILN_SOURCE_DIR in the environment (binaries built on another machine),
// else where this test was compiled.
std::string source_dir() {
  const char* env = std::getenv("KILN_SOURCE_DIR");
  return env && *env ? env : KILN_SOURCE_DIR;
}

class CbrTorch : public ::testing::TestWithParam<Precision> {};

TEST_P(CbrTorch, MatchesPyTorchConvBnReluUnderAutocast) {
  if (!torch_available()) GTEST_SKIP() << "needs a GPU and python3 with torch and safetensors";
  const Precision precision = GetParam();
  const DType dtype = activation_dtype(precision);
  const auto dir = std::filesystem::temp_directory_path() / "kiln_cbr_torch";
  std::filesystem::create_directories(dir);
  for (const BlockShape& s : {BlockShape{8, 64, 15, 128, 3, 2}, BlockShape{4, 256, 9, 64, 1, 1}}) {
    SCOPED_TRACE(s.str());
    Executable exe(compile(conv_bn_relu_block(s), block_options(s, Device::CUDA, precision, true, true)), 23);
    std::mt19937 rng(5 + s.c);
    const int64_t ho = (s.hw + 2 * s.pad() - s.kernel) / s.stride + 1;
    const auto x = random_values(size_t(s.n) * s.hw * s.hw * s.c, dtype, rng);
    const auto dy = random_values(size_t(s.n) * ho * ho * s.k, dtype, rng);
    const auto w = read_floats(exe, "conv.weight");
    // Non-trivial affine parameters, so dgamma/dbeta and the shift are really exercised.
    std::vector<float> gamma = random_values(size_t(s.k), DType::F32, rng, 0.3f), beta = gamma;
    for (float& g : gamma) g += 1.f;
    for (float& b : beta) b = b * 0.5f;
    write_floats(exe, exe.id("bn.weight"), gamma);
    write_floats(exe, exe.id("bn.bias"), beta);
    write_floats(exe, exe.program().input, x);
    write_floats(exe, exe.program().output_grad, dy);

    const std::string in = (dir / "in.safetensors").string(), out = (dir / "out.safetensors").string();
    save_safetensors(in,
                     {named("x", {s.n, s.hw, s.hw, s.c}, x), named("w", {s.k, s.kernel, s.kernel, s.c}, w),
                      named("gamma", {s.k}, gamma), named("beta", {s.k}, beta), named("dy", {s.n, ho, ho, s.k}, dy)},
                     {{"stride", std::to_string(s.stride)}, {"padding", std::to_string(s.pad())}, {"eps", "1e-5"},
                      {"momentum", "0.1"}, {"precision", precision_name(precision)}});
    const std::string cmd = "python3 " + source_dir() + "/bench/torch_cbr_reference.py " + in + " " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const SafetensorsFile torch = load_safetensors(out);

    exe.run_forward({0.f, 0, 1});
    const auto y = read_floats(exe, "conv");
    const auto running_mean = read_floats(exe, "bn.running_mean"), running_var = read_floats(exe, "bn.running_var");
    exe.run_backward({0.f, 0, 1});
    const double tol = tolerance(precision);
    EXPECT_LT(rel_l2(y, floats(torch, "y")), tol) << "y";
    EXPECT_LT(rel_l2(running_mean, floats(torch, "running_mean")), tol) << "running_mean";
    EXPECT_LT(rel_l2(running_var, floats(torch, "running_var")), tol) << "running_var";
    EXPECT_LT(rel_l2(read_floats(exe, exe.program().tensors[exe.program().input_grad].name), floats(torch, "dx")), tol) << "dx";
    EXPECT_LT(rel_l2(read_floats(exe, "conv.weight.grad"), floats(torch, "dw")), tol) << "dw";
    EXPECT_LT(rel_l2(read_floats(exe, "bn.weight.grad"), floats(torch, "dgamma")), tol) << "dgamma";
    EXPECT_LT(rel_l2(read_floats(exe, "bn.bias.grad"), floats(torch, "dbeta")), tol) << "dbeta";
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, CbrTorch, ::testing::Values(Precision::FP16, Precision::BF16, Precision::FP32),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln
