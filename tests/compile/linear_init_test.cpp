// Linear layers start as PyTorch starts them: nn.Linear's default U(±1/sqrt(in)) for weight and
// bias, or, with an init_std (torchvision's VGG classifier, 0.01), weight ~ N(0, std²) and a zero
// bias. Checked on the values an executable holds after construction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

constexpr int kIn = 512, kOut = 256;

std::unique_ptr<Executable> two_linears(float init_std) {
  Blueprint m("mlp");
  m.input(1, 1, kIn).flatten("flat").fc(kOut, true, "fc", init_std).fc(10, true, "head");
  CompileOptions o;
  o.batch = 2;
  return std::make_unique<Executable>(compile(m, o), 3);
}

struct Moments {
  double mean, std;
};

Moments moments(const std::vector<float>& v) {
  double sum = 0, sq = 0;
  for (float x : v) sum += x, sq += double(x) * x;
  const double mean = sum / double(v.size());
  return {mean, std::sqrt(sq / double(v.size()) - mean * mean)};
}

// n = 131,072 draws: the sample std of a normal is within 1% of the true one with near certainty
// (its relative standard error is 1/sqrt(2n) = 0.2%), the mean within 4 standard errors of 0.
TEST(LinearInit, InitStdDrawsNormalWeightsAndZeroBiases) {
  const auto exe = two_linears(0.05f);
  const std::vector<float> w = exe->read<float>(exe->id("fc.weight")), b = exe->read<float>(exe->id("fc.bias"));
  const Moments m = moments(w);
  EXPECT_NEAR(m.std, 0.05, 0.05 * 0.01);
  EXPECT_LT(std::fabs(m.mean), 4 * 0.05 / std::sqrt(double(w.size())));
  // A normal reaches past 3 std (a uniform of that std never passes 1.73 std).
  EXPECT_GT(*std::max_element(w.begin(), w.end()), 3 * 0.05);
  EXPECT_EQ(b, std::vector<float>(kOut, 0.f));
}

TEST(LinearInit, DefaultIsNnLinearsUniform) {
  const auto exe = two_linears(0.f);
  const double bound = 1 / std::sqrt(double(kIn));
  const std::vector<float> w = exe->read<float>(exe->id("fc.weight")), b = exe->read<float>(exe->id("fc.bias"));
  for (const std::vector<float>* v : {&w, &b})
    for (float x : *v) ASSERT_LE(std::fabs(x), bound);
  EXPECT_NEAR(moments(w).std, bound / std::sqrt(3.0), bound / std::sqrt(3.0) * 0.01);  // U(-a, a): std a/sqrt(3)
  EXPECT_GT(moments(b).std, bound / 4);  // drawn, not zero
}

TEST(LinearInit, BadInitStdIsAnErrorNamingTheLayer) {
  Blueprint m("mlp");
  testing::expect_error([&] { m.fc(4, true, "head", -0.01f); }, {"head", "init_std"});
  testing::expect_error([&] { m.fc(4, true, "head", std::nanf("")); }, {"head", "init_std"});
}

// torchvision's vgg16_bn initializes its three classifier layers from N(0, 0.01²).
TEST(LinearInit, Vgg16BnClassifierUsesTorchvisionsInit) {
  int linears = 0;
  const Blueprint vgg = zoo::vgg16_bn();
  for (const BlueprintNode& n : vgg.nodes()) {
    if (n.kind != LayerKind::Linear) continue;
    EXPECT_EQ(n.attrs.get<LinearAttrs>(n.name).init, WeightInit::normal(0.01f)) << n.name;
    EXPECT_EQ(n.attrs.get<LinearAttrs>(n.name).bias_init, BiasInit::Zeros) << n.name;
    ++linears;
  }
  EXPECT_EQ(linears, 3);
}

}  // namespace
}  // namespace kiln
