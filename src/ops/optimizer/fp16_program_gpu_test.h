#pragma once
// What the GPU tests of each fused optimizer check of a compiled fp16 program
// (optimizer_gpu_test.cpp for LARS, rmsprop_gpu_test.cpp): the compute copies stay the rounded
// fp32 masters through the optimizer's steps, and a step whose gradients overflow is skipped
// whole, its masters, optimizer state and copies unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "support/gpu_test_util.h"

namespace kiln::update_test {

// `options` compile the digits CNN in fp16 on the GPU with the optimizer whose update op is
// `update`; three steps at learning rate `lr` and loss scale 1024, then one at 2^40.
inline void expect_fp16_program_keeps_copies_and_skips_overflow(const CompileOptions& options, OpKind update,
                                                                 float lr, unsigned seed) {
  ASSERT_EQ(options.precision, Precision::FP16);
  Executable exe(compile(zoo::digits_cnn(), options), 3);
  const Program& p = exe.program();
  ASSERT_GE(p.compute_param_region, 0);
  ASSERT_EQ(p.update.size(), 3u);  // FIND_NONFINITE, the update, UPDATE_LOSS_SCALE
  EXPECT_EQ(p.update[1].kind, update);
  std::mt19937 rng(seed);
  const TensorSpec& in = p.tensors[size_t(p.input)];
  const std::vector<std::byte> images =
      testing::encode(in.dtype, gpu_test::random_values(DType::F32, size_t(numel(in.shape)), rng));
  exe.write(p.input, images.data(), images.size());
  std::vector<int32_t> labels(size_t(options.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  const size_t prefix = size_t(numel(p.tensors[size_t(p.compute_param_region)].shape));
  auto copies = [&] {
    std::vector<std::byte> bytes(p.tensors[size_t(p.compute_param_region)].bytes());
    exe.read(p.compute_param_region, bytes.data(), bytes.size());
    return bytes;
  };
  auto rounded_masters = [&] {
    const std::vector<float> master = exe.read<float>(p.param_region);
    return testing::encode(DType::F16, std::vector<float>(master.begin(), master.begin() + std::ptrdiff_t(prefix)));
  };
  const float modest = 1024.f;
  exe.write(p.loss_scale, &modest, sizeof modest);
  const std::vector<float> initial = exe.read<float>(p.param_region);
  for (int64_t step = 0; step < 3; ++step) {
    exe.run_step({lr, step, 1});
    EXPECT_EQ(exe.read<int32_t>(p.found_nonfinite)[0], 0) << "step " << step;
    EXPECT_EQ(copies(), rounded_masters()) << "after step " << step;
  }
  EXPECT_NE(exe.read<float>(p.param_region), initial);
  const float huge = std::ldexp(1.f, 40);
  exe.write(p.loss_scale, &huge, sizeof huge);
  const std::vector<float> masters = exe.read<float>(p.param_region);
  std::vector<std::vector<float>> state;
  for (int id : p.opt_state_regions) state.push_back(exe.read<float>(id));
  const std::vector<std::byte> kept = copies();
  exe.run_step({lr, 3, 1});
  EXPECT_EQ(exe.read<int32_t>(p.found_nonfinite)[0], 1);
  EXPECT_EQ(exe.read<float>(p.param_region), masters);
  for (size_t i = 0; i < p.opt_state_regions.size(); ++i)
    EXPECT_EQ(exe.read<float>(p.opt_state_regions[i]), state[i]) << p.tensors[size_t(p.opt_state_regions[i])].name;
  EXPECT_EQ(copies(), kept);
}

}  // namespace kiln::update_test
