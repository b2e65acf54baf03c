// The few-channel convolutions (few_channel_conv_cuda.h) against float64 references of the same
// rounded inputs, in fp16 and bf16: the forward pass with its per-channel sums, the weight
// gradient, and the shapes they refuse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/conv/conv_sums_gpu_check_test.h"
#include "ops/conv/conv_test_reference.h"
#include "ops/conv/few_channel_conv_cuda.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;
using namespace conv_test;

// The shapes both passes are tested on, as first layers have them.
std::vector<ConvShape> shapes(DType io) {
  return {
      shape(2, 23, 23, 3, 64, 7, 2, 3, io),  // a ResNet-style stem, 7x7 stride 2
      shape(2, 24, 24, 3, 64, 7, 2, 3, io),  // the same; its blocks of 128 pixels cross into the next image
      shape(8, 20, 20, 1, 32, 3, 1, 1, io),  // the digits CNN's first layer
      shape(2, 16, 16, 3, 64, 3, 1, 1, io),  // a VGG first layer
      shape(3, 9, 9, 4, 16, 5, 1, 2, io),
      shape(3, 9, 9, 8, 32, 1, 1, 0, io),    // 1x1; 243 rows, not a multiple of a block's 128
      shape(1, 13, 11, 2, 16, 3, 2, 0, io),  // non-square, no padding
  };
}

// The bound on |got - want| relative to a result's sum of |terms|: fp32 accumulation (well under
// 1e-5 for these term counts) plus the output's rounding to its dtype (2^-11 fp16, 2^-8 bf16).
double bound(DType io) { return io == DType::F16 ? 1e-3 : 8e-3; }

TEST(FewChannelConvGpu, ForwardAndStatisticsMatchFloat64) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(29);
  for (DType io : {DType::F16, DType::BF16}) {
    for (const ConvShape& s : shapes(io)) {
      SCOPED_TRACE(label(s));
      ASSERT_TRUE(cuda::few_channel_conv_supported(s));
      expect_fprop_sums_match_float64(
          s, cuda::few_channel_fprop_workspace_bytes(s), bound(io), rng,
          [&](const void* x, const void* w, void* y, float* sum, float* sqsum, void* scratch) {
            cuda::few_channel_fprop_stats(s, x, w, y, sum, sqsum, scratch, nullptr, "test");
          });
    }
  }
}

TEST(FewChannelConvGpu, WeightGradientMatchesFloat64) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (DType io : {DType::F16, DType::BF16}) {
    for (const ConvShape& s : shapes(io)) {
      SCOPED_TRACE(label(s));
      ASSERT_TRUE(cuda::few_channel_conv_supported(s));
      const std::vector<double> x = random_values<double>(io, size_t(s.n * s.h * s.w * s.c), rng);
      const std::vector<double> dy = random_values<double>(io, size_t(s.n * s.ho * s.wo * s.k), rng);
      DeviceTensor dx(io, x), ddy(io, dy);
      DeviceTensor dw = DeviceTensor::poisoned(io, size_t(s.k * s.r * s.s * s.c));
      DeviceBuffer scratch(cuda::few_channel_wgrad_workspace_bytes(s));
      cuda::few_channel_wgrad(s, dx.ptr(), ddy.ptr(), dw.ptr(), scratch.get(), nullptr, "test");
      sync();
      const std::vector<double> got = dw.get();

      std::vector<double> want, scale, wrong, wrong_scale;
      wgrad_reference(s, x, dy, false, want, scale);
      wgrad_reference(s, x, dy, true, wrong, wrong_scale);
      // (The transposed filter's margin shrinks as rows grow: a weight's error against the sum of
      // its |terms| falls like 1/sqrt(rows); these shapes have at most 3,200 rows.)
      expect_matches("dw", got, want, scale, wrong, s, bound(io));

      // A second run, into a poisoned dw again, gives the same bits.
      dw.poison();
      cuda::few_channel_wgrad(s, dx.ptr(), ddy.ptr(), dw.ptr(), scratch.get(), nullptr, "test");
      sync();
      EXPECT_EQ(dw.get(), got);
    }
  }
}

TEST(FewChannelConvGpu, UnsupportedShapesAreErrorsNamingTheLimits) {
  KILN_REQUIRE_GPU();
  const ConvShape many_channels = shape(1, 8, 8, 16, 32, 3, 1, 1, DType::F16);  // c = 16 > 8
  const ConvShape k48 = shape(1, 8, 8, 3, 48, 3, 1, 1, DType::F16);             // k not 16, 32 or 64
  const ConvShape f32 = shape(1, 8, 8, 3, 32, 3, 1, 1, DType::F32);             // io not fp16/bf16
  const ConvShape big_patch = shape(1, 16, 16, 8, 32, 7, 2, 3, DType::F16);     // 7*7*8 = 392 > 256
  EXPECT_FALSE(cuda::few_channel_conv_supported(many_channels));
  EXPECT_FALSE(cuda::few_channel_conv_supported(k48));
  EXPECT_FALSE(cuda::few_channel_conv_supported(f32));
  EXPECT_FALSE(cuda::few_channel_conv_supported(big_patch));
  testing::expect_error(
      [&] {
        cuda::few_channel_fprop_stats(many_channels, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                      "conv1");
      },
      {"conv1", "at most 8 input channels"});
  testing::expect_error([&] { cuda::few_channel_wgrad(f32, nullptr, nullptr, nullptr, nullptr, nullptr, "conv1"); },
                        {"conv1", "fp16 or bf16"});
}

}  // namespace
}  // namespace kiln
