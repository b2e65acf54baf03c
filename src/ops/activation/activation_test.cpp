// The activations' math on the CPU: values at points where PyTorch's functionals give known
// results, derivatives against central differences in float64, and the ops through the registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "ops/activation/activation_contract.h"
#include "ops/activation/activation_cpu.h"
#include "ops/activation/activation_functions.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
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
    {Activation::Tanh, 0, -2.0, -0.9640275800758169},
    {Activation::Mish, 0, 1.0, 0.8650983882673103},
    {Activation::Mish, 0, -2.0, -0.2525014826957089},
    {Activation::Hardsigmoid, 0, 1.0, 0.6666666666666666},
    {Activation::Hardsigmoid, 0, -4.0, 0.0},
    {Activation::Hardsigmoid, 0, 4.0, 1.0},
};

TEST(ActivationCpu, ValuesMatchTheDefinitions) {
  for (const Known& k : kKnown) {
    double y = 0;
    cpu::activation_forward<double>(k.f, k.alpha, &k.x, 1, &y);
    EXPECT_NEAR(y, k.y, 1e-14) << activation_name(k.f) << "(" << k.x << ")";
  }
}

// Every registered activation has known values above: adding one to activation_list.def without
// them fails here.
TEST(ActivationCpu, EveryActivationHasKnownValues) {
  for (const activation::Info& info : activation::kAll) {
    const auto count = std::count_if(std::begin(kKnown), std::end(kKnown), [&](const Known& k) { return k.f == info.kind; });
    EXPECT_GE(count, 2) << info.name << ": add two points of it, from its definition, to kKnown";
  }
}

// A non-default alpha where the function takes one (the default would hide a swapped alpha).
float alpha_of(const activation::Info& info) { return info.alpha == activation::AlphaRule::Unused ? 0.f : 0.7f; }

// Points away from the kinks (0 for the piecewise ones, 6 for ReLU6, +-3 for Hardswish and Hardsigmoid).
std::vector<double> sample_points() {
  std::vector<double> x;
  for (double v = -7.95; v < 8; v += 0.1) x.push_back(v);
  return x;
}

TEST(ActivationCpu, DerivativesMatchCentralDifferencesInDouble) {
  const std::vector<double> x = sample_points();
  const int64_t n = int64_t(x.size());
  const double h = 1e-6;
  for (const activation::Info& info : activation::kAll) {
    SCOPED_TRACE(info.name);
    const Activation f = info.kind;
    const float a = alpha_of(info);
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
               {Activation::Hardswish, 0, -3.0, 0.0}, {Activation::Hardswish, 0, 3.0, 1.0},
               {Activation::Hardsigmoid, 0, -3.0, 0.0}, {Activation::Hardsigmoid, 0, 3.0, 0.0}};
  for (const auto& k : kinks) {
    const double dy = 1.0;
    double dx = -1;
    cpu::activation_backward<double>(k.f, k.alpha, &dy, &k.x, 1, &dx);
    EXPECT_EQ(dx, k.dx) << activation_name(k.f) << "'(" << k.x << ")";
  }
}

// In float64, the derivatives are PyTorch's to the last bit where its backward kernels round their
// own way (values of torch.ops.aten.hardsigmoid_backward / hardswish_backward in float64, PyTorch
// 2.9.1): hard-sigmoid's slope is float's 1/6, not 1/6, and hard-swish's is x / 3 + 1/2, which
// rounds apart from (2x + 3) / 6 at -1 and 2. A float64 step of MobileNetV3 against PyTorch's sees
// the first at 5e-9 of its gradients.
TEST(ActivationCpu, DerivativesInDoubleRoundAsPyTorchs) {
  const struct {
    Activation f;
    double x, dx;
  } points[] = {{Activation::Hardsigmoid, 0.5, 0.1666666716337204},
                {Activation::Hardsigmoid, -2.0, 0.1666666716337204},
                {Activation::Hardswish, -1.0, 0.16666666666666669},
                {Activation::Hardswish, 2.0, 1.1666666666666665}};
  for (const auto& p : points) {
    const double dy = 1.0;
    double dx = -1;
    cpu::activation_backward<double>(p.f, 0.f, &dy, &p.x, 1, &dx);
    EXPECT_EQ(dx, p.dx) << activation_name(p.f) << "'(" << p.x << ")";
  }
}

TEST(ActivationCpu, FloatMatchesDouble) {
  const std::vector<double> x = sample_points();
  const int64_t n = int64_t(x.size());
  const std::vector<float> xf(x.begin(), x.end());
  for (const activation::Info& info : activation::kAll) {
    SCOPED_TRACE(info.name);
    const Activation f = info.kind;
    const float a = alpha_of(info);
    std::vector<double> y(x.size()), dx(x.size()), dy(x.size(), 0.5);
    std::vector<float> yf(x.size()), dxf(x.size()), dyf(x.size(), 0.5f);
    cpu::activation_forward<double>(f, a, x.data(), n, y.data());
    cpu::activation_backward<double>(f, a, dy.data(), x.data(), n, dx.data());
    cpu::activation_forward<float>(f, a, xf.data(), n, yf.data());
    cpu::activation_backward<float>(f, a, dyf.data(), xf.data(), n, dxf.data());
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

// Every name is distinct and parses back to its activation; an unknown one is an error listing them.
TEST(ActivationCpu, EveryNameParsesBackAndUnknownNamesAreErrors) {
  std::set<std::string> names;
  for (const activation::Info& info : activation::kAll) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name << " is listed twice";
    EXPECT_EQ(parse_activation(info.name), info.kind) << info.name;
    EXPECT_STREQ(activation_name(info.kind), info.name);
    EXPECT_NE(std::string(info.torch).find('x'), std::string::npos) << info.name << ": its PyTorch expression";
  }
  EXPECT_EQ(names.size(), size_t(kActivationCount));
  kiln::testing::expect_error([] { parse_activation("swish"); }, {"unknown activation 'swish'", "silu", "tanh"});
}

// The layer checks alpha by the list's rule: an ELU alpha of 0 and a negative LeakyReLU slope are
// errors naming the layer; 0 where alpha is unused, and the PyTorch defaults, compile.
TEST(ActivationCpu, TheLayerChecksAlphaByTheListsRule) {
  for (const activation::Info& info : activation::kAll) {
    SCOPED_TRACE(info.name);
    auto model = [&](float alpha) {
      Blueprint m("act");
      m.input(4, 4, 2).activation(info.kind, alpha, "act");
      CompileOptions o;
      o.batch = 2, o.loss = false;
      return compile(m, o);
    };
    EXPECT_NO_THROW(model(info.default_alpha));
    if (info.alpha == activation::AlphaRule::AboveZero)
      kiln::testing::expect_error([&] { model(0.f); }, {info.name, "'act'", "alpha must be positive"});
    if (info.alpha == activation::AlphaRule::AtLeastZero)
      kiln::testing::expect_error([&] { model(-0.5f); }, {info.name, "'act'", "must be >= 0"});
  }
  // A value past the list (a cast integer) is an error naming the layer, not a read past the table.
  Blueprint m("act");
  m.input(4, 4, 2).activation(Activation(kActivationCount + 3), 0.f, "act");
  CompileOptions o;
  o.batch = 2, o.loss = false;
  kiln::testing::expect_error([&] { compile(m, o); }, {"activation 'act'", "is not a kiln::Activation"});
}

}  // namespace
}  // namespace kiln
