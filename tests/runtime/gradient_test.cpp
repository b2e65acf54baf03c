// Executable::gradient: a parameter's gradient by name, as the backward left it, unscaled. Read
// straight from Program::grads it equals the raw tensor; with dynamic loss scaling the raw tensor
// holds the scale times the gradient and gradient() gives the gradient of the same program
// without scaling. Names that are no trainable parameter are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

Blueprint small_net() {
  Blueprint m("small");
  m.input(6, 6, 2);
  m.cbr(8, 3, 1, 1, "conv1").maxpool(2, 2, 0, "pool").flatten("flatten").fc(5, true, "fc");
  return m;
}

// One forward and backward of `small_net` on a fixed batch; the executable is left after the
// backward, before any update.
std::unique_ptr<Executable> after_backward(const LossScaling& scaling) {
  CompileOptions o;
  o.batch = 4;
  o.loss_scaling = scaling;
  auto exe = std::make_unique<Executable>(compile(small_net(), o), 3);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(4 * 6 * 6 * 2);
  for (float& v : x) v = normal(rng);
  const std::vector<int32_t> labels = {0, 3, 1, 4};
  exe->write(exe->program().input, x.data(), x.size() * sizeof(float));
  exe->write(exe->program().label, labels.data(), labels.size() * sizeof(int32_t));
  exe->run_forward({0.1f, 0, 1});
  exe->run_backward({0.1f, 0, 1});
  return exe;
}

TEST(Gradient, IsTheBackwardsGradientTensorByParameterName) {
  auto exe = after_backward({});
  const Program& p = exe->program();
  ASSERT_EQ(p.params.size(), 5u);  // conv1.conv.weight, conv1.bn.weight/bias, fc.weight/bias
  for (size_t i = 0; i < p.params.size(); ++i) {
    const std::string& name = p.tensors[p.params[i]].name;
    const std::vector<float> raw = exe->read<float>(p.grads[i]);
    const std::vector<double> got = exe->gradient(name);
    EXPECT_EQ(got, std::vector<double>(raw.begin(), raw.end())) << name;
    double norm = 0;
    for (float g : got) norm += double(g) * g;
    EXPECT_GT(norm, 0) << name << ": the backward wrote no gradient";
  }
}

TEST(Gradient, DividesTheLossScaleOut) {
  auto plain = after_backward({});
  LossScaling dynamic;
  dynamic.mode = LossScaleMode::Dynamic;
  dynamic.init_scale = 1024.f;  // a power of two: scaling and unscaling are exact, so equal to the bit
  auto scaled = after_backward(dynamic);
  const Program& p = scaled->program();
  for (size_t i = 0; i < p.params.size(); ++i) {
    const std::string& name = p.tensors[p.params[i]].name;
    const std::vector<float> raw = scaled->read<float>(p.grads[i]);
    const std::vector<double> want = plain->gradient(name), got = scaled->gradient(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(double(raw[k]), 1024 * want[k]) << name << "[" << k << "]: the raw tensor holds the scaled gradient";
      EXPECT_EQ(got[k], want[k]) << name << "[" << k << "]";
    }
  }
}

TEST(Gradient, RefusesNamesThatAreNoTrainableParameter) {
  auto exe = after_backward({});
  testing::expect_error([&] { exe->gradient("conv1.bn.running_var"); },
                        {"'conv1.bn.running_var' is not a trainable parameter", "conv1.conv.weight"});
  testing::expect_error([&] { exe->gradient("conv9.weight"); }, {"'conv9.weight'", "no gradient"});
}

}  // namespace
}  // namespace kiln
