// The direct weight gradient (wgrad_direct_cuda.h) against a float64 reference of the same
// rounded inputs, in fp32, fp16 and bf16, with padding, strides and several filter sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/conv/conv_test_reference.h"
#include "ops/conv/wgrad_direct_cuda.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;
using namespace conv_test;

// The bound on |got - want| relative to a weight's sum of |terms|: fp32 accumulation (well under
// 1e-5 for these row counts) plus the output's rounding to its dtype (2^-11 fp16, 2^-8 bf16).
double bound(DType io) { return io == DType::F32 ? 1e-5 : io == DType::F16 ? 1e-3 : 8e-3; }

TEST(WgradDirectGpu, MatchesFloat64InEveryDtype) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(17);
  for (DType io : {DType::F32, DType::F16, DType::BF16}) {
    const std::vector<ConvShape> shapes = {
        shape(4, 7, 5, 1, 8, 3, 1, 1, io),     shape(3, 9, 9, 3, 16, 3, 2, 1, io),
        shape(2, 6, 6, 2, 4, 5, 1, 2, io),     shape(64, 20, 20, 1, 32, 3, 1, 1, io),  // the digits CNN's first layer
        shape(2, 11, 11, 3, 6, 7, 2, 3, io),  // a ResNet-style stem, 7x7 stride 2 (882 weights)
    };
    for (const ConvShape& s : shapes) {
      SCOPED_TRACE(label(s));
      ASSERT_TRUE(cuda::wgrad_direct_supported(s));
      const std::vector<double> x = random_values<double>(io, size_t(s.n * s.h * s.w * s.c), rng);
      const std::vector<double> dy = random_values<double>(io, size_t(s.n * s.ho * s.wo * s.k), rng);
      DeviceTensor dx(io, x), ddy(io, dy);
      DeviceTensor dw = DeviceTensor::poisoned(io, size_t(s.k * s.r * s.s * s.c));
      DeviceBuffer scratch(cuda::wgrad_direct_workspace_bytes(s));
      cuda::wgrad_direct(s, dx.ptr(), ddy.ptr(), dw.ptr(), scratch.get(), nullptr, "test");
      sync();
      const std::vector<double> got = dw.get();
      std::vector<double> want, scale, wrong, wrong_scale;
      wgrad_reference(s, x, dy, false, want, scale);
      wgrad_reference(s, x, dy, true, wrong, wrong_scale);
      // Within the bound, and the same bound rejects the transposed filter (every shape here has
      // r > 1), so the comparison catches that mistake. (Its margin shrinks as rows grow: a
      // weight's error against the sum of its |terms| falls like 1/sqrt(rows); measured on the H200
      // at 25,600 rows in bf16: 0.036 against the bound 0.008.)
      expect_matches("dw", got, want, scale, wrong, s, bound(io));
      // A second run gives the same bits: the partials are added in a fixed order.
      cuda::wgrad_direct(s, dx.ptr(), ddy.ptr(), dw.ptr(), scratch.get(), nullptr, "test");
      sync();
      EXPECT_EQ(dw.get(), got);
    }
  }
}

TEST(WgradDirectGpu, TooManyWeightsIsAnErrorNamingTheLimit) {
  KILN_REQUIRE_GPU();
  const ConvShape s = shape(1, 8, 8, 64, 64, 3, 1, 1, DType::F32);  // 36,864 weights
  EXPECT_FALSE(cuda::wgrad_direct_supported(s));
  testing::expect_error([&] { cuda::wgrad_direct(s, nullptr, nullptr, nullptr, nullptr, nullptr, "conv1"); },
                        {"conv1", "at most 1024 weights", "36864"});
}

}  // namespace
}  // namespace kiln
