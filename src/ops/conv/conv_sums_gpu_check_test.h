#pragma once
// The check every GPU convolution that sums its own output passes (few_channel_conv_gpu_test.cpp,
// conv_sums_cutlass_gpu_test.cpp): on fresh random inputs of the shape's dtype, y against a float64
// convolution of the same rounded inputs within `bound` of each result's sum of |terms| (a bound
// that must reject a transposed filter), the per-channel sums against float64 sums of y as stored,
// and a second run, into poisoned outputs again, giving the same bytes.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "ops/conv/conv_test_reference.h"
#include "support/gpu_test_util.h"

namespace kiln::conv_test {

// Enqueues the kernel under test: y = conv(x, w) with the sums of y, using `scratch`.
using FpropSumsRun = std::function<void(const void* x, const void* w, void* y, float* sum, float* sqsum, void* scratch)>;

inline void expect_fprop_sums_match_float64(const ConvShape& s, size_t scratch_bytes, double bound, std::mt19937& rng,
                                            const FpropSumsRun& run) {
  using namespace gpu_test;
  const size_t rows = size_t(s.n * s.ho * s.wo), k = size_t(s.k);
  const std::vector<double> x = random_values<double>(s.io, size_t(s.n * s.h * s.w * s.c), rng);
  const std::vector<double> w = random_values<double>(s.io, size_t(s.k * s.r * s.s * s.c), rng);
  DeviceTensor dx(s.io, x), dw(s.io, w);
  DeviceTensor y = DeviceTensor::poisoned(s.io, rows * k);
  DeviceTensor sum = DeviceTensor::poisoned(DType::F32, k), sqsum = DeviceTensor::poisoned(DType::F32, k);
  DeviceBuffer scratch(scratch_bytes);
  auto run_once = [&] {
    run(dx.ptr(), dw.ptr(), y.ptr(), sum.f32(), sqsum.f32(), scratch.get());
    sync();
  };
  run_once();
  const std::vector<double> got = y.get(), got_sum = sum.get(), got_sq = sqsum.get();

  std::vector<double> want, scale, wrong, wrong_scale;
  fprop_reference(s, x, w, false, want, scale);
  fprop_reference(s, x, w, true, wrong, wrong_scale);
  expect_matches("y", got, want, scale, wrong, s, bound);
  // The sums are of y as stored, so the reference sums the GPU's own y, in float64.
  expect_channel_sums(got, k, got_sum, got_sq);

  // The partial sums are added in a fixed order: a second run repeats every byte.
  y.poison(), sum.poison(), sqsum.poison();
  run_once();
  EXPECT_EQ(y.get(), got);
  EXPECT_EQ(sum.get(), got_sum);
  EXPECT_EQ(sqsum.get(), got_sq);
}

}  // namespace kiln::conv_test
