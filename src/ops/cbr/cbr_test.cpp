// CBR kernels against the naive double reference (conv -> batchnorm(train) -> relu).
#include <gtest/gtest.h>

#include "ops/cbr/cbr_cpu.h"
#include "support/cbr_test_reference.h"
#include "support/scoped_threads.h"

namespace kiln::cbr_test {
namespace {

constexpr double kEps = 1e-5, kMomentum = 0.1;

// Random inputs for one geometry, in double; kernels get them cast to T.
struct Inputs {
  Geometry g;
  std::vector<double> x, w, gamma, beta, running_mean, running_var, dy;
  Inputs(const Geometry& geom, unsigned seed) : g(geom) {
    std::mt19937 rng(seed);
    x = uniform_vec(rng, g.x_numel(), -1, 1);
    w = uniform_vec(rng, g.w_numel(), -0.5, 0.5);
    gamma = uniform_vec(rng, g.k, 0.5, 1.5);
    beta = uniform_vec(rng, g.k, -0.5, 0.5);
    running_mean = uniform_vec(rng, g.k, -0.2, 0.2);
    running_var = uniform_vec(rng, g.k, 0.5, 1.5);
    dy = uniform_vec(rng, g.y_numel(), -1, 1);
  }
};

// Buffers of one kernel run.
template <class T>
struct KernelRun {
  const Inputs& in;
  std::vector<T> x = cast<T>(in.x), w = cast<T>(in.w), gamma = cast<T>(in.gamma),
                 beta = cast<T>(in.beta), running_mean = cast<T>(in.running_mean),
                 running_var = cast<T>(in.running_var), dy = cast<T>(in.dy);
  std::vector<T> conv_out = std::vector<T>(in.g.y_numel()), y = conv_out,
                 mean = std::vector<T>(in.g.k), inv_std = mean;
  std::vector<uint8_t> bits = std::vector<uint8_t>(cpu::cbr_mask_bytes(in.g.y_numel()), 0xAB);
  std::vector<T> dx = std::vector<T>(in.g.x_numel(), T(7)), dw = std::vector<T>(in.g.w_numel()),
                 dgamma = std::vector<T>(in.g.k), dbeta = dgamma, dconv = conv_out;

  void forward() {
    cpu::CbrForwardTensors<T> t;
    t.x = x.data(), t.w = w.data(), t.gamma = gamma.data(), t.beta = beta.data();
    t.conv_out = conv_out.data(), t.y = y.data(), t.saved_mean = mean.data();
    t.saved_inv_std = inv_std.data(), t.bitmask = bits.data();
    t.running_mean = running_mean.data(), t.running_var = running_var.data();
    cpu::cbr_forward<T>(in.g.conv(), t, kEps, kMomentum);
  }
  void backward(bool first_layer) {
    cpu::CbrBackwardTensors<T> t;
    t.dy = dy.data(), t.bitmask = bits.data(), t.conv_out = conv_out.data();
    t.x = x.data(), t.w = w.data(), t.gamma = gamma.data();
    t.saved_mean = mean.data(), t.saved_inv_std = inv_std.data();
    t.dx = first_layer ? nullptr : dx.data();
    t.dw = dw.data(), t.dgamma = dgamma.data(), t.dbeta = dbeta.data(), t.dconv = dconv.data();
    cpu::cbr_backward<T>(in.g.conv(), t);
  }
  std::vector<uint8_t> byte_mask() const {
    std::vector<uint8_t> bytes(in.g.y_numel());
    cpu::cbr_mask_to_bytes(bits.data(), in.g.y_numel(), bytes.data());
    return bytes;
  }
};

// {n, h, w, c, k, kernel, stride, pad}: 1x1 and 3x3, stride 1 and 2, with and without padding,
// odd and non-square sizes, element counts that are not multiples of 8, and two large enough
// to split into several chunks with an odd channel count.
const Geometry kGeometries[] = {
    {2, 5, 5, 3, 4, 3, 1, 1},     // 200 elements
    {3, 7, 5, 3, 5, 3, 2, 1},     // 180 (4 past a byte)
    {2, 3, 3, 4, 6, 1, 1, 0},     // 108
    {2, 5, 5, 2, 3, 1, 2, 0},     // 54
    {1, 7, 7, 2, 3, 3, 1, 0},     // 75
    {2, 6, 9, 3, 7, 3, 2, 2},     // padding 2, 154
    {4, 30, 30, 3, 5, 3, 1, 1},   // 3600 rows of 5 channels: several chunks
    {2, 33, 31, 2, 12, 1, 1, 0},  // 2046 rows of 12 channels: chunks end mid-row-group
};

class CbrVsReference : public ::testing::TestWithParam<Geometry> {};

template <class T>
void check_against_reference(const Geometry& g, double tol) {
  const Inputs in(g, 1234);
  KernelRun<T> run{in};
  run.forward();
  const Forward ref = reference_forward(g, in.x, in.w, in.gamma, in.beta, in.running_mean,
                                        in.running_var, kEps, kMomentum);
  EXPECT_LT(mixed_err(run.conv_out, ref.z), tol);
  EXPECT_LT(mixed_err(run.y, ref.y), tol);
  EXPECT_LT(mixed_err(run.mean, ref.mean), tol);
  EXPECT_LT(mixed_err(run.inv_std, ref.inv_std), tol);
  EXPECT_LT(mixed_err(run.running_mean, ref.running_mean), tol);
  EXPECT_LT(mixed_err(run.running_var, ref.running_var), tol);

  // The bit mask, transcoded, equals the unfused ReLU's byte mask (up to ties at rounding level).
  const std::vector<uint8_t> mask = run.byte_mask();
  int flips = 0;
  for (int64_t i = 0; i < g.y_numel(); ++i) {
    if (mask[i] == ref.mask[i]) continue;
    EXPECT_LT(std::abs(ref.pre[i]), tol) << "mask differs at " << i;
    ++flips;
  }
  EXPECT_LE(flips, 2);
  // Bits past the last element stay clear.
  if (g.y_numel() % 8) {
    EXPECT_EQ(run.bits.back() >> (g.y_numel() % 8), 0);
  }

  run.backward(false);
  const Backward bref = reference_backward(g, ref, in.dy, in.x, in.w, in.gamma);
  EXPECT_LT(mixed_err(run.dbeta, bref.dbeta), tol);
  EXPECT_LT(mixed_err(run.dgamma, bref.dgamma), tol);
  EXPECT_LT(mixed_err(run.dconv, bref.dz), tol);
  EXPECT_LT(mixed_err(run.dw, bref.dw), tol);
  EXPECT_LT(mixed_err(run.dx, bref.dx), tol);
}

TEST_P(CbrVsReference, DoubleMatchesReference) {
  check_against_reference<double>(GetParam(), 1e-10);
}

// Float sums of up to thousands of terms: 1e-4 relative (absolute near zero) is several ulps
// of headroom but still catches any formula error.
TEST_P(CbrVsReference, FloatMatchesReference) { check_against_reference<float>(GetParam(), 1e-4); }

TEST_P(CbrVsReference, FirstLayerSkipsOnlyDx) {
  const Inputs in(GetParam(), 99);
  KernelRun<double> full{in}, first{in};
  full.forward();
  first.forward();
  full.backward(false);
  first.backward(true);
  EXPECT_EQ(first.dw, full.dw);
  EXPECT_EQ(first.dgamma, full.dgamma);
  EXPECT_EQ(first.dbeta, full.dbeta);
  EXPECT_EQ(first.dconv, full.dconv);
  for (double v : first.dx) ASSERT_EQ(v, 7.0) << "first-layer backward wrote dx";
}

template <class T>
void check_inference(const Geometry& g, double tol) {
  const Inputs in(g, 555);
  KernelRun<T> run{in};
  std::vector<T> y(g.y_numel(), T(-3));
  cpu::cbr_inference<T>(g.conv(), run.x.data(), run.w.data(), run.gamma.data(), run.beta.data(),
                        run.running_mean.data(), run.running_var.data(), kEps, y.data());
  std::vector<double> z(g.y_numel(), 0.0), ref(g.y_numel());
  Conv{g}.for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { z[yi] += in.x[xi] * in.w[wi]; });
  for (int64_t i = 0; i < g.y_numel(); ++i) {
    const int64_t k = i % g.k;
    const double bn =
        in.gamma[k] * (z[i] - in.running_mean[k]) / std::sqrt(in.running_var[k] + kEps) +
        in.beta[k];
    ref[i] = std::max(bn, 0.0);
  }
  EXPECT_LT(mixed_err(y, ref), tol);
  // Inference leaves the running statistics alone.
  EXPECT_EQ(run.running_mean, cast<T>(in.running_mean));
  EXPECT_EQ(run.running_var, cast<T>(in.running_var));
}

TEST_P(CbrVsReference, InferenceUsesRunningStats) {
  check_inference<double>(GetParam(), 1e-12);
  check_inference<float>(GetParam(), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Geometries, CbrVsReference, ::testing::ValuesIn(kGeometries));

TEST(CbrMask, TranscodesBitsLeastSignificantFirst) {
  const uint8_t bits[2] = {0b10000101, 0b00000010};
  uint8_t bytes[10];
  cpu::cbr_mask_to_bytes(bits, 10, bytes);
  const uint8_t want[10] = {1, 0, 1, 0, 0, 0, 0, 1, 0, 1};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(bytes[i], want[i]) << i;
  EXPECT_EQ(cpu::cbr_mask_bytes(8), 1);
  EXPECT_EQ(cpu::cbr_mask_bytes(9), 2);
  EXPECT_EQ(cpu::cbr_mask_bytes(75), 10);
}

// Chunked reductions add partial sums in an order fixed by the shape, so the thread count
// must not change a single bit of what CBR itself computes.
TEST(CbrDeterminism, BitwiseSameAtAnyThreadCount) {
  const Inputs in(kGeometries[6], 7);
  KernelRun<float> one{in}, many{in};
  {
    testing::ScopedThreads single(1);
    one.forward();
    one.backward(false);
  }
  {
    testing::ScopedThreads several(3);
    many.forward();
    many.backward(false);
  }
  ASSERT_EQ(one.conv_out, many.conv_out) << "the convolution itself depends on the thread count";
  EXPECT_EQ(one.y, many.y);
  EXPECT_EQ(one.bits, many.bits);
  EXPECT_EQ(one.mean, many.mean);
  EXPECT_EQ(one.inv_std, many.inv_std);
  EXPECT_EQ(one.running_mean, many.running_mean);
  EXPECT_EQ(one.running_var, many.running_var);
  EXPECT_EQ(one.dgamma, many.dgamma);
  EXPECT_EQ(one.dbeta, many.dbeta);
  EXPECT_EQ(one.dconv, many.dconv);
}

}  // namespace
}  // namespace kiln::cbr_test
