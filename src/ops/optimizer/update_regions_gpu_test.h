#pragma once
// What the GPU tests of the fused updates share (optimizer_gpu_test.cpp, rmsprop_gpu_test.cpp): the
// check that a parameter copy is the rounded update, and the device regions of an update in mixed
// precision (a prefix of fp16/bf16 gradients and copies) under loss scaling.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "ops/optimizer/optimizer_cuda.h"
#include "support/gpu_test_util.h"

namespace kiln::update_test {

using namespace gpu_test;

// Every element of `copy` must be exactly `param` rounded to the copy's dtype.
inline void expect_exact_copy(const DeviceTensor& copy, const std::vector<double>& param) {
  const std::vector<double> got = copy.get();
  size_t bad = 0;
  for (size_t i = 0; i < param.size(); ++i) bad += got[i] != round_to(copy.dtype, param[i]);
  EXPECT_EQ(bad, 0u) << name(copy.dtype) << " parameter copy differs from the rounded update";
}

// Elements [0, prefix) of n have fp16/bf16 gradients and copies; the fp32 gradients hold the rest.
struct PrefixCase {
  int64_t prefix, n;
  size_t offset = 0;  // elements of every region; 1 misaligns them all
};
inline const std::vector<PrefixCase> kPrefixCases = {{8, 13},        {13, 13},        {96, 1003},     {1000, 1000},
                                              {99992, 100003}, {96, 1003, 1},  {1000, 1000, 1}, {99992, 100003, 1}};
constexpr double kLossScale = 1024;  // a power of two: dividing it out is exact

inline std::string label(const PrefixCase& k, DType dtype) {
  return std::string(name(dtype)) + " prefix=" + std::to_string(k.prefix) + " n=" + std::to_string(k.n) +
         " offset=" + std::to_string(k.offset);
}

inline std::vector<double> times(std::vector<double> v, double by) {
  for (double& x : v) x *= by;
  return v;
}

// The device state of one prefixed update: fp32 parameters, the gradients in two regions (given
// unscaled, stored times kLossScale), the copy (as long as the parameters and poisoned, so that
// a write past the prefix shows), the loss scale and the skip flag.
struct PrefixRegions {
  const PrefixCase& k;
  DType dtype;
  DeviceTensor param, fp32_grad, compute_grad, copy;
  DeviceBuffer scale{sizeof(float)}, found{sizeof(int32_t)};
  PrefixRegions(const PrefixCase& c, DType d, const std::vector<double>& p)
      : k(c), dtype(d), param(DType::F32, p, c.offset), fp32_grad(DType::F32, size_t(c.n - c.prefix), c.offset),
        compute_grad(d, size_t(c.prefix), c.offset), copy(DeviceTensor::poisoned(d, size_t(c.n), c.offset)) {
    const float s = float(kLossScale);
    scale.upload(&s, sizeof s);
    set_found(0);
  }
  void set_found(int32_t flag) { found.upload(&flag, sizeof flag); }
  // New unscaled gradients: g[0, prefix) representable in the compute dtype.
  std::vector<double> next_gradients(std::mt19937& rng, double stddev) {
    std::vector<double> g = random_values(dtype, size_t(k.prefix), rng, 0.0, stddev);
    const std::vector<double> rest = random_values(DType::F32, size_t(k.n - k.prefix), rng, 0.0, stddev);
    compute_grad.set(times(g, kLossScale));
    fp32_grad.set(times(rest, kLossScale));
    g.insert(g.end(), rest.begin(), rest.end());
    return g;
  }
  cuda::ComputeCopies compute() const { return {k.prefix, dtype, compute_grad.ptr(), copy.ptr()}; }
  cuda::LossScaleInputs scaling() const { return {scale.as<float>(), found.as<int32_t>()}; }
  const float* fp32() const { return k.n > k.prefix ? fp32_grad.f32() : nullptr; }
  // The copy: the prefix exactly the rounded parameters, the rest never written.
  void expect_copy_of(const std::vector<double>& got_p) const {
    const std::vector<double> got = copy.get();
    size_t wrong = 0, written = 0;
    for (int64_t i = 0; i < k.prefix; ++i) wrong += got[i] != round_to(dtype, got_p[i]);
    for (int64_t i = k.prefix; i < k.n; ++i) written += !std::isnan(got[i]);
    EXPECT_EQ(wrong, 0u) << name(dtype) << " copy differs from the rounded update";
    EXPECT_EQ(written, 0u) << "the update wrote the copy past its prefix";
  }
};

inline std::vector<std::vector<uint8_t>> bytes_of(std::initializer_list<const DeviceTensor*> tensors) {
  std::vector<std::vector<uint8_t>> out;
  for (const DeviceTensor* t : tensors) out.push_back(t->buf.download(t->buf.bytes()));
  return out;
}

}  // namespace kiln::update_test
