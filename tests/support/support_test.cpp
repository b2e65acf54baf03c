// The shared test helpers themselves: the host fp16/bf16 converter on known bit patterns and
// round trips (it was also compared with CUDA's host conversions on all 2^32 floats), the
// gradient checker on functions with known derivatives and on wrong gradients, the op bench's
// tensors, and the scoped environment variable.
#include <gtest/gtest.h>
#include <gtest/gtest-spi.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/half_host.h"
#include "support/op_bench.h"
#include "support/scoped_env.h"

namespace kiln::testing {
namespace {

TEST(HalfHost, Fp16KnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.f), 0xc000);
  EXPECT_EQ(float_to_half(-0.f), 0x8000);
  EXPECT_EQ(float_to_half(65504.f), 0x7bff);                       // largest finite
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);                     // below the tie: stays finite
  EXPECT_EQ(float_to_half(65520.f), 0x7c00);                       // the tie rounds to even: infinity
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_half(std::ldexp(1.f, -14)), 0x0400);          // smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1.f, -24)), 0x0001);          // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.f, -25)), 0x0000);          // tie with zero: even
  EXPECT_EQ(float_to_half(std::ldexp(3.f, -26)), 0x0001);          // above the tie
  EXPECT_EQ(float_to_half(1.f + std::ldexp(1.f, -11)), 0x3c00);    // tie: even (down)
  EXPECT_EQ(float_to_half(1.f + std::ldexp(3.f, -11)), 0x3c02);    // tie: even (up)
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::quiet_NaN()), 0x7fff);
  EXPECT_EQ(half_to_float(0x3555), 0x1.554p-2f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(half_to_float(0x83ff), -std::ldexp(1023.f, -24));
  EXPECT_TRUE(std::isnan(half_to_float(0xfe01)));
}

TEST(HalfHost, Bf16KnownBitPatterns) {
  EXPECT_EQ(float_to_bf16(1.f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808000)), 0x3f80);  // tie: even (down)
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f818000)), 0x3f82);  // tie: even (up)
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3f808001)), 0x3f81);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0x7fff);
  EXPECT_EQ(float_to_bf16(bits_to_float(0xffffffff)), 0x7fff);  // a NaN that must not wrap to -0
  EXPECT_EQ(bf16_to_float(0xc0a0), -5.f);
}

TEST(HalfHost, EveryHalfAndBf16ValueRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = uint16_t(h);
    if (!std::isnan(half_to_float(bits))) {
      ASSERT_EQ(float_to_half(half_to_float(bits)), bits) << std::hex << h;
    }
    if (!std::isnan(bf16_to_float(bits))) {
      ASSERT_EQ(float_to_bf16(bf16_to_float(bits)), bits) << std::hex << h;
    }
  }
}

TEST(HalfHost, EncodeDecodeAndRoundByDType) {
  const std::vector<double> v = {1.0, 1.0 / 3, -1e-6, 70000.0};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const std::vector<double> back = decode<double>(dt, encode(dt, v));
    ASSERT_EQ(back.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(back[i], double(round_to(dt, float(v[i]))));
    EXPECT_EQ(rounded(dt, v), back);
  }
  EXPECT_TRUE(std::isinf(round_to(DType::F16, 70000.f)));
  EXPECT_EQ(round_to(DType::BF16, 70000.f), 70144.f);
}

TEST(GradCheck, NumericGradientOfKnownFunctions) {
  // f(x) = sum x_i^3 + x_0 x_1: df/dx_i = 3 x_i^2 (+ x_1 or x_0).
  const std::vector<double> x = {0.5, -1.25, 2.0};
  const auto f = [](const std::vector<double>& v) {
    return v[0] * v[0] * v[0] + v[1] * v[1] * v[1] + v[2] * v[2] * v[2] + v[0] * v[1];
  };
  const std::vector<double> g = numeric_gradient(f, x, 1e-6);
  const std::vector<double> want = {3 * 0.25 - 1.25, 3 * 1.5625 + 0.5, 3 * 4.0};
  expect_gradient_matches(want, g, 1e-8, GradError::PerElement, "cubic");
  // central_difference restores the value it moves, exactly.
  double value = 0.1;
  EXPECT_NEAR(central_difference([&] { return std::sin(value); }, value, 1e-6), std::cos(0.1), 1e-9);
  EXPECT_EQ(value, 0.1);
  EXPECT_EQ(weighted_sum(std::vector<float>{1.f, 2.f}, {3.0, -0.5}), 2.0);
}

TEST(GradCheck, ErrorMeasures) {
  const std::vector<double> numeric = {10.0, 0.5, -2.0}, analytic = {10.1, 0.55, -2.0};
  EXPECT_NEAR(gradient_error(analytic, numeric, GradError::Relative).error, 0.1 / 10, 1e-12);
  EXPECT_NEAR(gradient_error(analytic, numeric, GradError::PerElement).error, 0.05, 1e-12);
  EXPECT_EQ(gradient_error(analytic, numeric, GradError::PerElement).worst, 1u);
  EXPECT_NEAR(gradient_error(analytic, numeric, GradError::Absolute).error, 0.1, 1e-12);
  const std::vector<double> nan = {10.0, std::nan(""), -2.0};
  EXPECT_TRUE(std::isnan(gradient_error(nan, numeric, GradError::Relative).error));
}

TEST(GradCheck, WrongGradientsFail) {
  const std::vector<double> numeric = {1.0, 2.0, 3.0}, off = {1.0, 2.001, 3.0};
  EXPECT_NONFATAL_FAILURE(expect_gradient_matches(off, numeric, 1e-6, GradError::PerElement, "w", 4),
                          "worst at [4]");
  EXPECT_NONFATAL_FAILURE(expect_gradient_matches(off, numeric, 1e-4, GradError::Relative, "w"), "analytic");
  const std::vector<double> nan = {1.0, std::nan(""), 3.0};
  EXPECT_NONFATAL_FAILURE(expect_gradient_matches(nan, numeric, 1e-6, GradError::Absolute, "w"), "analytic");
  expect_gradient_matches(off, numeric, 1e-3, GradError::Absolute, "within tolerance");
}

TEST(Compare, ErrorMeasuresAndCloseness) {
  const std::vector<double> want = {3.0, -4.0};
  const std::vector<float> got = {3.f, -4.5f};
  EXPECT_DOUBLE_EQ(rel_err(got, want), 0.5 / 4);
  EXPECT_DOUBLE_EQ(mixed_err(got, want), 0.5 / 5);
  EXPECT_DOUBLE_EQ(rel_l2(got, want), 0.5 / 5);
  EXPECT_TRUE(std::isnan(rel_l2(std::vector<double>{1.0}, want)));
  expect_close("close", got, want, 0.11);
  EXPECT_NONFATAL_FAILURE(expect_close("far", got, want, 0.09), "relative L2 error");
  const std::vector<double> unwritten = {3.0, std::nan("")};
  EXPECT_NONFATAL_FAILURE(expect_close("poisoned", unwritten, want, 1.0), "not finite");
  EXPECT_FATAL_FAILURE(expect_close_to_reference("zeros", std::vector<double>{0.0}, std::vector<double>{0.0}, 1.0),
                       "reference norm");
}

TEST(OpBench, TensorsHoldTheirDTypesAndBindById) {
  OpBench b(2, "head", LayerKind::Linear);
  EXPECT_EQ(b.layer(), 2);
  EXPECT_EQ(b.layer_spec().name, "head");
  const int f = b.add("f", {2, 2}, DType::F32, 1), d = b.add("d", {1.5, -2.0}), z = b.add("z", {3}, DType::F16);
  std::mt19937 rng(1);
  const std::vector<double> u = uniform_vec(rng, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.data<float>(f)[i], float(u[size_t(i)]));
  EXPECT_EQ(b.values(d), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(b.values<uint16_t>(z), (std::vector<uint16_t>{0, 0, 0}));
  b.fill(z, {1.0, -2.0});
  EXPECT_EQ(b.values<uint16_t>(z), (std::vector<uint16_t>{0x3c00, 0xc000, 0}));
  EXPECT_EQ(b.bound(f).data, b.data<float>(f));
  b.unbound = f;
  EXPECT_FALSE(b.bound(f));
  EXPECT_FALSE(b.bound(-1));
  float x = 0;
  const TensorArg a = b.arg({1}, &x);
  EXPECT_EQ(a.dtype(), DType::F64);
  EXPECT_EQ(b.arg({1}, &x, DType::I32).dtype(), DType::I32);
  EXPECT_EQ(a.shape(), (Shape{1}));  // still valid after more args
}

TEST(ScopedEnv, SetsOrUnsetsAndRestores) {
  const char* name = "KILN_SUPPORT_TEST_VARIABLE";
  unsetenv(name);
  {
    ScopedEnv set(name, "1");
    EXPECT_STREQ(std::getenv(name), "1");
    {
      ScopedEnv unset(name, nullptr);
      EXPECT_EQ(std::getenv(name), nullptr);
    }
    EXPECT_STREQ(std::getenv(name), "1");
  }
  EXPECT_EQ(std::getenv(name), nullptr);
}

}  // namespace
}  // namespace kiln::testing
