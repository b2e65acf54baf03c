// host_expf (activation_exp.h), the float e^x of the CPU's Sigmoid, SiLU and ELU: within 2 units in
// the last place of the correctly rounded e^x over the normal results, the edges of float's range,
// and NaN kept, alone and through the SiLU kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/activation/activation_cpu.h"
#include "ops/activation/activation_exp.h"

namespace kiln {
namespace {

using activation::host_expf;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Units in the last place between two positive floats: their distance in the ordered bit patterns.
int64_t ulps(float a, float b) { return std::abs(int64_t(bits_of(a)) - int64_t(bits_of(b))); }

// Every 4099th float of [-87.3, 88.7] (about 520,000 of them, both signs), against e^x computed in
// double and rounded once to float.
TEST(HostExpf, WithinTwoUlpsOfTheRoundedExpOverTheNormalResults) {
  int64_t worst = 0, checked = 0;
  float worst_x = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
    float x;
    const uint32_t b32 = uint32_t(b);
    std::memcpy(&x, &b32, 4);
    if (!(x >= -87.3f && x <= 88.7f)) continue;
    const float want = float(std::exp(double(x)));
    const int64_t d = ulps(host_expf(x), want);
    if (d > worst) worst = d, worst_x = x;
    ++checked;
  }
  EXPECT_GT(checked, 500000);
  EXPECT_LE(worst, 2) << "at x = " << worst_x;
  // The bound tells a wrong exp apart: e^x of the neighbouring float is many units away where |x| is
  // large (e^(x + u) = e^x (1 + u) with u = x * 2^-23 relative: 80 ulps at x = 80), and a polynomial one
  // degree short (no r^6 term) misses by more than 2 near r = ln2 / 2.
  EXPECT_GT(ulps(host_expf(std::nextafter(80.0f, 100.0f)), float(std::exp(80.0))), 2);
  const double r = 0.34657359;  // ln2 / 2
  const float short_poly = float(1 + r + r * r * (0.5 + r * (1.0 / 6 + r * (1.0 / 24 + r / 120))));
  EXPECT_GT(ulps(short_poly, float(std::exp(r))), 2);
}

TEST(HostExpf, EdgesOfFloatsRangeAndNaN) {
  EXPECT_EQ(host_expf(0.0f), 1.0f);
  EXPECT_EQ(host_expf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(host_expf(-200.0f), 0.0f);
  EXPECT_EQ(host_expf(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(host_expf(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(host_expf(std::numeric_limits<float>::quiet_NaN())));
  // Gradual underflow: e^-100 = 3.72e-44 is a subnormal float (float(e^-100) itself), not 0.
  EXPECT_NEAR(host_expf(-100.0f), float(std::exp(-100.0)), 2e-45);
  EXPECT_GT(host_expf(-100.0f), 0.0f);
  // The largest finite result: e^88.72 = 3.40e38.
  EXPECT_LE(ulps(host_expf(88.72f), float(std::exp(double(88.72f)))), 2);
}

// SiLU in float through the CPU kernel: its values against float64's within float's rounding, NaN
// propagated (a diverging run must not turn NaN into numbers).
TEST(HostExpf, SiluThroughTheKernelKeepsFloatAccuracyAndNaN) {
  std::vector<float> x;
  for (float v = -30.f; v <= 30.f; v += 0.0137f) x.push_back(v);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = int64_t(x.size());
  std::vector<float> y(x.size()), dx(x.size()), ones(x.size(), 1.f);
  cpu::activation_forward<float>(Activation::SiLU, 0.f, x.data(), n, y.data());
  cpu::activation_backward<float>(Activation::SiLU, 0.f, ones.data(), x.data(), n, dx.data());
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    const double xd = x[i], s = 1 / (1 + std::exp(-xd));
    EXPECT_NEAR(y[i], xd * s, 4e-7 * (1 + std::abs(xd * s))) << x[i];
    // The derivative s (1 + x (1 - s)) multiplies s's own rounding (a few 6e-8) by x: 1 - s cancels.
    EXPECT_NEAR(dx[i], s * (1 + xd * (1 - s)), 4e-7 * (1 + std::abs(xd))) << x[i];
  }
  EXPECT_TRUE(std::isnan(y.back()));
  EXPECT_TRUE(std::isnan(dx.back()));
}

}  // namespace
}  // namespace kiln
