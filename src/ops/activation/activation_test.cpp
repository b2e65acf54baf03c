// The activations' math on the CPU: values at points where PyTorch's functionals give known
// results, derivatives against central differences in float64, and the ops through the registry.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/activation/activation_contract.h"
#include "ops/activation/activation_cpu.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

struct Known {
  Activation f;
  float alpha;
  double x, y;  // y = f(x) from the definitions, evaluated with Python's math module (alphas exact in float)
};

const Known kKnown[] = {
    {Activation::ReLU6, 0, 7.0, 6.0},
    {Activation::ReLU6, 0, 2.5, 2.5},
    {Activation::ReLU6, 0, -1.0, 0.0},
    {Activation::LeakyReLU, 0.25f, -2.0, -0.5},
    {Activation::LeakyReLU, 0.25f, 3.0, 3.0},
    {Activation::ELU, 1.f, -1.0, -0.6321205588285577},
    {Activation::ELU, 0.5f, -2.0, -0.43233235838169365},
    {Activation::SiLU, 0, 1.0, 0.7310585786300049},
    {Activation::SiLU, 0, -2.0, -0.2384058440442351},
    {Activation::Hardswish, 0, 1.0, 0.6666666666666666},
    {Activation::Hardswish, 0, -4.0, 0.0},
    {Activation::Hardswish, 0, 4.0, 4.0},
    {Activation::GELU, 0, 1.0, 0.8413447460685429},
    {Activation::GELU, 0, -0.5, -0.15426876936299344},
    {Activation::GELUTanh, 0, 1.0, 0.8411919906082768},
    {Activation::GELUTanh, 0, -0.5, -0.15428599017485606},
    {Activation::Sigmoid, 0, 0.0, 0.5},
    {Activation::Sigmoid, 0, 2.0, 0.8807970779778823},
    {Activation::Tanh, 0, 0.5, 0.46211715726000974},
};

TEST(ActivationCpu, ValuesMatchTheDefinitions) {
  for (const Known& k : kKnown) {
    double y = 0;
    cpu::activation_forward<double>(k.f, k.alpha, &k.x, 1, &y);
    EXPECT_NEAR(y, k.y, 1e-14) << activation_name(k.f) << "(" << k.x << ")";
  }
}

constexpr Activation kAll[] = {Activation::ReLU6, Activation::LeakyReLU, Activation::ELU,
                               Activation::SiLU,  Activation::Hardswish, Activation::GELU,
                               Activation::GELUTanh, Activation::Sigmoid, Activation::Tanh};

float alpha_of(Activation f) { return f == Activation::LeakyReLU ? 0.1f : f == Activation::ELU ? 0.7f : 0.f; }

// Points away from the kinks (0 for the piecewise ones, 6 for ReLU6, +-3 for Hardswish).
std::vector<double> sample_points() {
  std::vector<double> x;
  for (double v = -7.95; v < 8; v += 0.1) x.push_back(v);
  return x;
}

TEST(ActivationCpu, DerivativesMatchCentralDifferencesInDouble) {
  const std::vector<double> x = sample_points();
  const int64_t n = int64_t(x.size());
  const double h = 1e-6;
  for (Activation f : kAll) {
    SCOPED_TRACE(activation_name(f));
    const float a = alpha_of(f);
    std::vector<double> ones(x.size(), 1.0), dx(x.size()), numeric(x.size());
    cpu::activation_backward<double>(f, a, ones.data(), x.data(), n, dx.data());
    // f'(x_i): central differences of f at each point on its own.
    auto value = [&](const std::vector<double>& v) {
      double y = 0;
      cpu::activation_forward<double>(f, a, v.data(), 1, &y);
      return y;
    };
    for (size_t i = 0; i < x.size(); ++i) numeric[i] = testing::numeric_gradient(value, {x[i]}, h)[0];
    testing::expect_gradient_matches(dx, numeric, 1e-7, testing::GradError::Absolute, "f'(x) over [-7.95, 8)");
  }
}

// At the kinks, the one-sided choice PyTorch's backward kernels make (fp16/bf16 inputs land
// exactly on them).
TEST(ActivationCpu, DerivativesAtTheKinksFollowPyTorch) {
  const struct {
    Activation f;
    float alpha;
    double x, dx;
  } kinks[] = {{Activation::ReLU6, 0, 0.0, 0.0},      {Activation::ReLU6, 0, 6.0, 0.0},
               {Activation::LeakyReLU, 0.25f, 0.0, 0.25}, {Activation::ELU, 0.5f, 0.0, 0.5},
               {Activation::Hardswish, 0, -3.0, 0.0}, {Activation::Hardswish, 0, 3.0, 1.0}};
  for (const auto& k : kinks) {
    const double dy = 1.0;
    double dx = -1;
    cpu::activation_backward<double>(k.f, k.alpha, &dy, &k.x, 1, &dx);
    EXPECT_EQ(dx, k.dx) << activation_name(k.f) << "'(" << k.x << ")";
  }
}

TEST(ActivationCpu, FloatMatchesDouble) {
  const std::vector<double> x = sample_points();
  const int64_t n = int64_t(x.size());
  const std::vector<float> xf(x.begin(), x.end());
  for (Activation f : kAll) {
    SCOPED_TRACE(activation_name(f));
    std::vector<double> y(x.size()), dx(x.size()), dy(x.size(), 0.5);
    std::vector<float> yf(x.size()), dxf(x.size()), dyf(x.size(), 0.5f);
    cpu::activation_forward<double>(f, alpha_of(f), x.data(), n, y.data());
    cpu::activation_backward<double>(f, alpha_of(f), dy.data(), x.data(), n, dx.data());
    cpu::activation_forward<float>(f, alpha_of(f), xf.data(), n, yf.data());
    cpu::activation_backward<float>(f, alpha_of(f), dyf.data(), xf.data(), n, dxf.data());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(yf[i], y[i], 1e-6 * (1 + std::abs(y[i])));
      EXPECT_NEAR(dxf[i], dx[i], 1e-6 * (1 + std::abs(dx[i])));
    }
  }
}

// Through the registry: the op computes the function its attributes name, and a tensor that does
// not match the op's input is an error naming the op, its layer and the tensor's role.
TEST(ActivationOp, RunsThroughTheRegistryAndRejectsMismatchedTensors) {
  kiln::testing::OpBench f(2, "features.act", LayerKind::Activation);
  std::vector<double> x = {-2.0, 0.5, 3.0, 7.0}, y(4), dy = {1, 1, 1, 1}, dx(4), wide(8);
  const Op fwd = make_op(ActivationForward<TensorId>{0, 1, Activation::ReLU6, 0.f}, 2);
  const OpCall call{fwd, f.program, {f.arg({4}, x.data())}, {f.arg({4}, y.data())}, f.scalars};
  find_op(Device::CPU, OpKind::ACTIVATION_FWD)(call);
  EXPECT_EQ(y, (std::vector<double>{0.0, 0.5, 3.0, 6.0}));
  const Op bwd = make_op(ActivationBackward<TensorId>{0, 1, 2, Activation::ReLU6, 0.f}, 2);
  const OpCall bcall{bwd, f.program, {f.arg({4}, dy.data()), f.arg({4}, x.data())}, {f.arg({4}, dx.data())}, f.scalars};
  find_op(Device::CPU, OpKind::ACTIVATION_BWD)(bcall);
  EXPECT_EQ(dx, (std::vector<double>{0.0, 1.0, 1.0, 0.0}));
  const OpCall bad{fwd, f.program, {f.arg({4}, x.data())}, {f.arg({8}, wide.data())}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::ACTIVATION_FWD)(bad); },
                              {"ACTIVATION_FWD", "features.act", "output", "[8]", "must match"});
  const OpCall bad_grad{bwd, f.program, {f.arg({4}, dy.data()), f.arg({4}, x.data(), DType::F32)},
                        {f.arg({4}, dx.data())}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::ACTIVATION_BWD)(bad_grad); },
                              {"ACTIVATION_BWD", "features.act", "input", "F32", "must match"});
}

TEST(ActivationCpu, NamesAreThoseOfPyTorchsFunctionals) {
  EXPECT_STREQ(activation_name(Activation::SiLU), "silu");
  EXPECT_STREQ(activation_name(Activation::GELUTanh), "gelu_tanh");
  EXPECT_STREQ(activation_name(Activation::LeakyReLU), "leaky_relu");
}

}  // namespace
}  // namespace kiln
