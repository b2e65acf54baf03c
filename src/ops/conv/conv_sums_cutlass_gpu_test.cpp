// kiln's CUTLASS convolution with sums (conv_sums_cutlass.h) against float64 references of the
// same rounded inputs, in fp16 and bf16: the output, the per-channel sums of the output as
// stored, repeatable bits, and the shapes it refuses.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ops/conv/conv_sums_cutlass.h"
#include "ops/conv/conv_sums_gpu_check_test.h"
#include "ops/conv/conv_test_reference.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;
using namespace conv_test;

// ResNet's kinds of 1x1 layers of stride 1, small: output channels below, at and past a tile's 64,
// pixel counts that do not fill the last tile of 128, images whose tiles cross into the next image.
std::vector<ConvShape> shapes(DType io) {
  return {
      shape(2, 14, 14, 64, 256, 1, 1, 0, io),  // a bottleneck's expanding 1x1
      shape(2, 14, 14, 256, 64, 1, 1, 0, io),  // its reducing 1x1
      shape(3, 7, 9, 256, 64, 1, 1, 0, io),    // non-square, 189 pixels
      shape(1, 9, 9, 16, 24, 1, 1, 0, io),     // few channels: 24 of a 64-wide tile, 81 pixels
      shape(2, 9, 9, 96, 136, 1, 1, 0, io),    // 136 channels: a third, mostly empty tile
  };
}

// The bound on |got - want| relative to a result's sum of |terms|: fp32 accumulation (well under
// 1e-5 for these term counts) plus the output's rounding to its dtype (2^-11 fp16, 2^-8 bf16).
double bound(DType io) { return io == DType::F16 ? 1e-3 : 8e-3; }

bool skip_reason(std::string& why) {
  if (!cuda::cutlass_kernels_built()) why = "built without CUTLASS's headers";
  else if (!cuda::cutlass_fprop_sums_supported(shape(1, 8, 8, 64, 64, 1, 1, 0, DType::BF16)))
    why = "the GPU is not compute capability 9.0";
  return !why.empty();
}

TEST(ConvSumsCutlassGpu, OutputAndStatisticsMatchFloat64AndRepeat) {
  KILN_REQUIRE_GPU();
  std::string why;
  if (skip_reason(why)) GTEST_SKIP() << why;
  std::mt19937 rng(37);
  for (DType io : {DType::F16, DType::BF16}) {
    for (const ConvShape& s : shapes(io)) {
      SCOPED_TRACE(label(s));
      ASSERT_TRUE(cuda::cutlass_fprop_sums_supported(s));
      expect_fprop_sums_match_float64(
          s, cuda::cutlass_fprop_sums_workspace_bytes(s), bound(io), rng,
          [&](const void* x, const void* w, void* y, float* sum, float* sqsum, void* scratch) {
            cuda::cutlass_fprop_sums(s, x, w, y, sum, sqsum, scratch, nullptr, "test");
          });
    }
  }
}

TEST(ConvSumsCutlassGpu, UnsupportedShapesAreErrorsNamingTheLimits) {
  KILN_REQUIRE_GPU();
  const ConvShape stem = shape(2, 16, 16, 3, 64, 7, 2, 3, DType::BF16);       // 3 input channels
  const ConvShape odd_k = shape(1, 8, 8, 64, 36, 3, 1, 1, DType::BF16);       // 36 output channels
  const ConvShape f32 = shape(1, 8, 8, 64, 64, 1, 1, 0, DType::F32);          // io not fp16/bf16
  const ConvShape three = shape(2, 14, 14, 64, 64, 3, 1, 1, DType::BF16);     // not a GEMM: 3x3
  const ConvShape strided = shape(2, 8, 8, 512, 128, 1, 2, 0, DType::BF16);   // not a GEMM: stride 2
  for (const ConvShape& s : {stem, odd_k, f32, three, strided}) EXPECT_FALSE(cuda::cutlass_fprop_sums_supported(s));
  testing::expect_error(
      [&] { cuda::cutlass_fprop_sums(stem, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, "conv1"); },
      {"conv1", "multiples of 8"});
  testing::expect_error(
      [&] { cuda::cutlass_fprop_sums(f32, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, "conv2"); },
      {"conv2", "fp16 or bf16"});
  testing::expect_error(
      [&] { cuda::cutlass_fprop_sums(three, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, "conv3"); },
      {"conv3", "1x1 convolutions of stride 1", "3x3"});
}

}  // namespace
}  // namespace kiln
