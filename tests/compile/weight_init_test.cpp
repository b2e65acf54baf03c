// Every WeightInit form starts a convolution's filters and a linear layer's matrix as the torch.nn.init
// call it names, with the fan it names: checked on the values an executable holds after
// construction, with fans chosen so that fan-in and fan-out differ (a swapped fan moves the std
// by the square root of their ratio, far outside the 1% bound).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

// conv: C = 64 -> K = 256, 3x3: fan_in 576, fan_out 2304. fc: 1024 -> 128.
constexpr int kC = 64, kK = 256, kIn = 1024, kOut = 128;
constexpr double kConvFanIn = kC * 9, kConvFanOut = kK * 9;

std::unique_ptr<Executable> conv_and_fc(const WeightInit& init, BiasInit bias) {
  Blueprint m("inits");
  m.input(4, 4, kC);
  ConvAttrs conv = ConvAttrs::square(kK, 3, 1, 1, /*bias=*/true);
  conv.init = init, conv.bias_init = bias;
  m.conv(conv, "conv").global_avgpool("pool").flatten("flat");
  m.fc(LinearAttrs{.out_features = kIn, .init = init, .bias_init = bias}, "wide");
  m.fc(LinearAttrs{.out_features = kOut, .init = init, .bias_init = bias}, "fc");
  CompileOptions o;
  o.batch = 2;
  return std::make_unique<Executable>(compile(m, o), 5);
}

struct Moments {
  double mean, std, max_abs;
};

Moments moments(const std::vector<float>& v) {
  double sum = 0, sq = 0, max_abs = 0;
  for (float x : v) sum += x, sq += double(x) * x, max_abs = std::max(max_abs, double(std::fabs(x)));
  const double mean = sum / double(v.size());
  return {mean, std::sqrt(sq / double(v.size()) - mean * mean), max_abs};
}

struct Drawn {
  std::vector<float> conv, fc, conv_bias, fc_bias;
};

Drawn draw(const WeightInit& init, BiasInit bias = BiasInit::Zeros) {
  const auto exe = conv_and_fc(init, bias);
  return {exe->read<float>(exe->id("conv.weight")), exe->read<float>(exe->id("fc.weight")),
          exe->read<float>(exe->id("conv.bias")), exe->read<float>(exe->id("fc.bias"))};
}

// 147,456 and 131,072 draws: a sample std within 1% of the true one (relative standard error
// 1/sqrt(2n) = 0.2%).
void expect_std(const std::vector<float>& v, double std, const char* what) {
  const Moments m = moments(v);
  EXPECT_NEAR(m.std, std, std * 0.01) << what;
  EXPECT_LT(std::fabs(m.mean), 5 * std / std::sqrt(double(v.size()))) << what;
}

TEST(WeightInit, KaimingNormalFansAreTorchs) {
  const Drawn out = draw(WeightInit::kaiming_normal_fan_out());
  expect_std(out.conv, std::sqrt(2 / kConvFanOut), "conv fan_out");
  expect_std(out.fc, std::sqrt(2.0 / kOut), "fc fan_out");
  const Drawn in = draw(WeightInit::kaiming_normal_fan_in());
  expect_std(in.conv, std::sqrt(2 / kConvFanIn), "conv fan_in");
  expect_std(in.fc, std::sqrt(2.0 / kIn), "fc fan_in");
  // A normal reaches past 3 std; a uniform of that std never passes 1.73.
  EXPECT_GT(moments(in.conv).max_abs, 3 * std::sqrt(2 / kConvFanIn));
}

TEST(WeightInit, UniformDrawsStayInsideTheirBound) {
  struct Case {
    WeightInit init;
    double conv_bound, fc_bound;
  };
  const Case cases[] = {
      {WeightInit::kaiming_uniform_fan_in(), std::sqrt(6 / kConvFanIn), std::sqrt(6.0 / kIn)},
      {WeightInit::torch_default(), 1 / std::sqrt(kConvFanIn), 1 / std::sqrt(double(kIn))},
      // kaiming_uniform_(mode="fan_out", nonlinearity="sigmoid"): MNASNet's classifier.
      {WeightInit::scaled(WeightInit::Draw::Uniform, WeightInit::Fan::Out, std::sqrt(3.0)), std::sqrt(3 / kConvFanOut),
       std::sqrt(3.0 / kOut)},
      {WeightInit::uniform(0.07), 0.07, 0.07},
  };
  for (const Case& c : cases) {
    const Drawn d = draw(c.init);
    EXPECT_LE(moments(d.conv).max_abs, c.conv_bound);
    EXPECT_LE(moments(d.fc).max_abs, c.fc_bound);
    EXPECT_GT(moments(d.conv).max_abs, 0.99 * c.conv_bound);  // the whole interval, not a part
    expect_std(d.conv, c.conv_bound / std::sqrt(3.0), "conv");  // U(-a, a): std a / sqrt(3)
    expect_std(d.fc, c.fc_bound / std::sqrt(3.0), "fc");
  }
}

TEST(WeightInit, NormalAndTruncatedNormalTakeTheirStd) {
  const Drawn n = draw(WeightInit::normal(0.02));
  expect_std(n.conv, 0.02, "normal conv");
  expect_std(n.fc, 0.02, "normal fc");
  // torch's trunc_normal_ cuts at ±2 whatever the std: with std 0.02 nothing is cut...
  const Drawn t = draw(WeightInit::trunc_normal(0.02));
  expect_std(t.conv, 0.02, "trunc_normal conv");
  EXPECT_EQ(t.conv, n.conv);  // (a cut that never bites leaves the normal's own draw)
  // ... with std 2 every draw lies inside ±2, and the cut normal's std is 2 x 0.53956 (the std of
  // a standard normal cut at ±1: sqrt(1 - 2 phi(1) / (2 Phi(1) - 1)) = sqrt(1 - 0.70888)); an
  // uncut draw's would be 2, one clamped to ±2 instead of redrawn 1.44.
  const Drawn wide = draw(WeightInit::trunc_normal(2.0));
  EXPECT_LE(moments(wide.conv).max_abs, 2.0);
  EXPECT_GT(moments(wide.conv).max_abs, 1.99);
  expect_std(wide.conv, 2 * 0.539560, "trunc_normal(2) conv");
}

TEST(WeightInit, BiasesAreZeroOrTorchsDefault) {
  const Drawn zeros = draw(WeightInit::normal(0.01), BiasInit::Zeros);
  EXPECT_EQ(zeros.conv_bias, std::vector<float>(kK, 0.f));
  EXPECT_EQ(zeros.fc_bias, std::vector<float>(kOut, 0.f));
  const Drawn torch = draw(WeightInit::normal(0.01), BiasInit::TorchDefault);
  for (float b : torch.conv_bias) ASSERT_LE(std::fabs(b), 1 / std::sqrt(kConvFanIn));
  for (float b : torch.fc_bias) ASSERT_LE(std::fabs(b), 1 / std::sqrt(double(kIn)));
  EXPECT_GT(moments(torch.conv_bias).std, 0.25 / std::sqrt(kConvFanIn));  // drawn, not zero
}

// The forms kiln's first models used keep their program initializers, so those models start from
// the values they always did.
TEST(WeightInit, TheFirstModelsKeepTheirProgramInitializers) {
  const auto kaiming = conv_and_fc(WeightInit::kaiming_normal_fan_out(), BiasInit::Zeros);
  EXPECT_EQ(kaiming->program().tensors[kaiming->id("conv.weight")].init, Init::KaimingNormalFanOut);
  const auto torch = conv_and_fc(WeightInit::torch_default(), BiasInit::TorchDefault);
  EXPECT_EQ(torch->program().tensors[torch->id("fc.weight")].init, Init::UniformFanIn);
  EXPECT_EQ(torch->program().tensors[torch->id("fc.bias")].init, Init::UniformFanIn);
}

}  // namespace
}  // namespace kiln
