// GPU elementwise kernels against plain host references on the same rounded inputs, on sizes
// with and without a partial last group of 8 and on misaligned pointers (scalar paths).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/random.h"
#include "kiln/error.h"
#include "support/gpu_test_util.h"
#include "ops/elementwise/elementwise_cpu.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace kiln {
namespace {

using namespace gpu_test;

struct Case {
  int64_t n;
  size_t offset = 0;  // elements (bytes for masks); 1 misaligns every pointer
};
const std::vector<Case> kCases = {{1},      {7},       {8},       {1001},
                                  {100003}, {1 << 20}, {1001, 1}, {100003, 1}};
const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};

std::string label(DType dt, const Case& k) {
  return std::string(name(dt)) + " n=" + std::to_string(k.n) +
         " offset=" + std::to_string(k.offset);
}

TEST(ElementwiseGpu, ReluForwardAndBackward) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (DType dt : kDtypes)
    for (const Case& k : kCases) {
      SCOPED_TRACE(label(dt, k));
      const std::vector<double> xv = random_values(dt, k.n, rng, 0.1, 1.0),
                                dyv = random_values(dt, k.n, rng);
      std::vector<double> want_y(k.n), want_dx(k.n);
      std::vector<uint8_t> want_mask(k.n);
      for (int64_t i = 0; i < k.n; ++i) {
        want_y[i] = xv[i] < 0 ? 0.0 : xv[i];
        want_mask[i] = xv[i] > 0;
        want_dx[i] = want_mask[i] ? dyv[i] : 0.0;
      }
      DeviceTensor x(dt, xv, k.offset), y(dt, k.n, k.offset), dy(dt, dyv, k.offset),
          dx(dt, k.n, k.offset);
      DeviceBytes mask(k.n, k.offset);
      for (uint8_t poison : {0xFF, 0x00}) {
        y.poison(), dx.poison(), mask.poison(poison);
        cuda::relu_forward(dt, x.ptr(), k.n, y.ptr(), mask.ptr(), nullptr, "test");
        cuda::relu_backward(dt, dy.ptr(), mask.ptr(), k.n, dx.ptr(), nullptr, "test");
        sync();
        expect_close("relu y", y.get(), want_y, 1e-12);  // exact: no arithmetic
        EXPECT_EQ(mask.get(), want_mask) << "relu mask";
        expect_close("relu dx", dx.get(), want_dx, 1e-12);
      }
      // Without a mask, and in place.
      cuda::relu_forward(dt, x.ptr(), k.n, x.ptr(), nullptr, nullptr, "test");
      sync();
      expect_close("relu in place", x.get(), want_y, 1e-12);
    }
}

TEST(ElementwiseGpu, ReluPassesNaNThrough) {
  KILN_REQUIRE_GPU();
  std::vector<double> xv = {1.0,  -2.0, std::numeric_limits<double>::quiet_NaN(), 3.0, -0.0, 0.5,
                            -1.0, 2.0,  std::numeric_limits<double>::quiet_NaN()};
  for (DType dt : kDtypes) {
    DeviceTensor x(dt, xv), y(dt, xv.size());
    DeviceBytes mask(xv.size());
    cuda::relu_forward(dt, x.ptr(), xv.size(), y.ptr(), mask.ptr(), nullptr, "test");
    sync();
    const std::vector<double> got = y.get();
    const std::vector<uint8_t> m = mask.get();
    EXPECT_TRUE(std::isnan(got[2]) && std::isnan(got[8])) << name(dt) << ": NaN must pass through";
    EXPECT_EQ(m[2], 0) << name(dt);
    EXPECT_EQ(got[1], 0.0) << name(dt);
    EXPECT_EQ(got[3], 3.0) << name(dt);
  }
}

TEST(ElementwiseGpu, AddAndGradSum) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(32);
  for (DType dt : kDtypes)
    for (const Case& k : kCases) {
      SCOPED_TRACE(label(dt, k));
      const std::vector<double> av = random_values(dt, k.n, rng), bv = random_values(dt, k.n, rng);
      std::vector<double> want(k.n);
      for (int64_t i = 0; i < k.n; ++i) want[i] = av[i] + bv[i];
      DeviceTensor a(dt, av, k.offset), b(dt, bv, k.offset), y(dt, k.n, k.offset);
      y.poison();
      cuda::add(dt, a.ptr(), b.ptr(), k.n, y.ptr(), nullptr, "test");
      sync();
      expect_close("add", y.get(), want, tolerance(dt));

      for (int count : {1, 3, 16, 20}) {  // 20 > kGradSumMaxInputs: two passes
        SCOPED_TRACE("k=" + std::to_string(count));
        std::vector<DeviceTensor> inputs;
        std::vector<const void*> ptrs;
        std::vector<double> sum(k.n, 0.0);
        for (int t = 0; t < count; ++t) {
          const std::vector<double> v = random_values(dt, k.n, rng);
          for (int64_t i = 0; i < k.n; ++i) sum[i] += v[i];
          inputs.emplace_back(dt, v, k.offset);
        }
        for (const DeviceTensor& t : inputs) ptrs.push_back(t.ptr());
        DeviceTensor out(dt, k.n, k.offset);
        out.poison();
        cuda::grad_sum(dt, ptrs.data(), count, k.n, out.ptr(), nullptr, "test");
        sync();
        // fp32 sums rounded once (twice with two passes) to dtype.
        expect_close("grad_sum", out.get(), sum, count > 16 ? 2 * tolerance(dt) : tolerance(dt));
        // Summing into the first input.
        cuda::grad_sum(dt, ptrs.data(), count, k.n, const_cast<void*>(ptrs[0]), nullptr, "test");
        sync();
        expect_close("grad_sum into input 0", inputs[0].get(), sum,
                     count > 16 ? 2 * tolerance(dt) : tolerance(dt));
      }
    }
}

TEST(ElementwiseGpu, CastBetweenAllFloatTypes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(33);
  for (DType src : kDtypes)
    for (DType dst : kDtypes)
      for (const Case& k : kCases) {
        SCOPED_TRACE(std::string(name(src)) + " -> " + label(dst, k));
        // Values spread over many binades, including ones F16 flushes to subnormals.
        std::vector<double> v = random_values(src, k.n, rng, 0.0, 3.0);
        for (int64_t i = 0; i < k.n; i += 5) v[i] = round_to(src, v[i] * 1e-5);
        std::vector<double> want(k.n);
        for (int64_t i = 0; i < k.n; ++i) want[i] = round_to(dst, v[i]);
        DeviceTensor in(src, v, k.offset), out(dst, k.n, k.offset);
        out.poison();
        cuda::cast(src, in.ptr(), dst, out.ptr(), k.n, nullptr, "test");
        sync();
        const std::vector<double> got = out.get();
        size_t bad = 0, first = 0;
        for (int64_t i = 0; i < k.n; ++i)
          if (got[i] != want[i] && bad++ == 0) first = i;
        EXPECT_EQ(bad, 0u) << bad << " elements differ from round-to-nearest-even, first at "
                           << first << ": got " << got[first] << ", want " << want[first]
                           << " (from " << v[first] << ")";
      }
}

TEST(ElementwiseGpu, Fill) {
  KILN_REQUIRE_GPU();
  for (DType dt : kDtypes)
    for (const Case& k : kCases) {
      SCOPED_TRACE(label(dt, k));
      DeviceTensor x(dt, k.n, k.offset);
      x.poison();
      cuda::fill(dt, x.ptr(), k.n, 0.1f, nullptr, "test");
      sync();
      EXPECT_EQ(x.get(), std::vector<double>(k.n, round_to(dt, 0.1f)));
    }
}

TEST(ElementwiseGpu, DropoutMatchesCpuRandomness) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(34);
  const uint64_t seed = 12345, stream = cpu::dropout_stream(/*layer=*/3, /*step=*/17);
  for (DType dt : kDtypes)
    for (const Case& k : kCases)
      for (float p : {0.0f, 0.3f, 0.5f, 1.0f}) {
        SCOPED_TRACE(label(dt, k) + " p=" + std::to_string(p));
        const std::vector<double> xv = random_values(dt, k.n, rng),
                                  dyv = random_values(dt, k.n, rng);
        const double scale = p < 1 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0;
        std::vector<uint8_t> want_mask(k.n);
        std::vector<double> want_y(k.n), want_dx(k.n);
        for (int64_t i = 0; i < k.n; ++i) {
          want_mask[i] = random_uniform(seed, stream, static_cast<uint64_t>(i)) >= p;
          want_y[i] = want_mask[i] ? xv[i] * scale : 0.0;
          want_dx[i] = want_mask[i] ? dyv[i] * scale : 0.0;
        }
        DeviceTensor x(dt, xv, k.offset), y(dt, k.n, k.offset), dy(dt, dyv, k.offset),
            dx(dt, k.n, k.offset);
        DeviceBytes mask(k.n, k.offset);
        y.poison(), dx.poison(), mask.poison(0xFF);
        cuda::dropout_forward(dt, x.ptr(), k.n, p, seed, stream, y.ptr(), mask.ptr(), nullptr,
                              "test");
        cuda::dropout_backward(dt, dy.ptr(), mask.ptr(), k.n, p, dx.ptr(), nullptr, "test");
        sync();
        EXPECT_EQ(mask.get(), want_mask) << "dropout mask differs from the CPU's";
        expect_close("dropout y", y.get(), want_y, tolerance(dt));
        expect_close("dropout dx", dx.get(), want_dx, tolerance(dt));
      }
}

TEST(ElementwiseGpu, RejectsBadArguments) {
  KILN_REQUIRE_GPU();
  DeviceTensor x(DType::F32, 16), y(DType::F32, 16);
  DeviceBytes mask(16);
  EXPECT_THROW(cuda::dropout_forward(DType::F32, x.ptr(), 16, 1.5f, 1, 2, y.ptr(), mask.ptr(),
                                     nullptr, "test"),
               Error);
  EXPECT_THROW(cuda::relu_forward(DType::I32, x.ptr(), 16, y.ptr(), nullptr, nullptr, "test"),
               Error);
  EXPECT_THROW(cuda::grad_sum(DType::F32, nullptr, 0, 16, y.ptr(), nullptr, "test"), Error);
  EXPECT_THROW(cuda::add(DType::F32, x.ptr(), nullptr, 16, y.ptr(), nullptr, "test"), Error);
}

}  // namespace
}  // namespace kiln
