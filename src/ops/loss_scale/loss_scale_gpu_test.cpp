// Loss scaling on the GPU: the kernels against the CPU kernels and the shared update rule, the
// check over fp16/bf16 compute gradients beside the fp32 ones, and an fp16 program on CUDA whose
// step with inf gradients (injected into either gradient region, or from a scale so large that the
// fp16 backward overflows) is skipped, with the scale backed off, all without reading anything
// back between the ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "ops/loss_scale/loss_scale_cpu.h"
#include "ops/loss_scale/loss_scale_cuda.h"
#include "ops/loss_scale/loss_scale_rule.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;

struct Case {
  int64_t n;
  size_t offset = 0;  // elements; 1 misaligns and takes the narrow path
};
const std::vector<Case> kCases = {{1}, {13}, {1000}, {100003}, {1000, 1}, {100003, 1}};

std::string label(const Case& k) { return "n=" + std::to_string(k.n) + " offset=" + std::to_string(k.offset); }

// One float in device memory.
struct DeviceScalar {
  DeviceBuffer buf{sizeof(float)};
  explicit DeviceScalar(float v) { buf.upload(&v, sizeof v); }
  const float* get() const { return buf.as<float>(); }
};

TEST(LossScaleGpu, FindNonFiniteMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(4);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& k : kCases) {
    std::vector<double> clean = random_values(DType::F32, size_t(k.n), rng, 0.0, 1e30);
    std::vector<std::pair<int64_t, float>> injections = {{-1, 0.f}, {0, inf}, {k.n - 1, -inf}, {k.n / 2, nan}};
    for (const auto& [at, bad] : injections) {
      SCOPED_TRACE(label(k) + " at " + std::to_string(at) + " " + std::to_string(bad));
      std::vector<double> g = clean;
      if (at >= 0) g[size_t(at)] = bad;
      const DeviceTensor t(DType::F32, g, k.offset);
      DeviceBuffer found(sizeof(int32_t));
      found.poison(0x01);  // a stale, nonzero flag the op must overwrite
      cuda::find_nonfinite(t.f32(), k.n, found.as<int32_t>(), nullptr, "test");
      sync();
      int32_t got = 0;
      const std::vector<uint8_t> bytes = found.download(sizeof got);
      std::memcpy(&got, bytes.data(), sizeof got);
      const std::vector<float> host(g.begin(), g.end());
      EXPECT_EQ(got, cpu::any_nonfinite<float>(k.n, host.data()) ? 1 : 0);
      EXPECT_EQ(got, at >= 0 ? 1 : 0);
    }
  }
}

// Mixed precision: the fp16/bf16 gradients of the weights with compute copies (`prefix`
// elements) are checked in the same pass as the fp32 ones (`n`, possibly none).
struct MixedCase {
  int64_t prefix, n;
  size_t offset = 0;  // elements of both regions; 1 misaligns them
};
const std::vector<MixedCase> kMixedCases = {{8, 13}, {96, 0}, {13, 0}, {1000, 1003}, {99992, 100003},
                                            {96, 1003, 1}, {99992, 100003, 1}};

TEST(LossScaleGpu, FindNonFiniteChecksTheComputeGradientsToo) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(6);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::F16, DType::BF16})
    for (const MixedCase& k : kMixedCases) {
      const std::vector<double> clean_half = random_values(dtype, size_t(k.prefix), rng, 0.0, 1000.0),
                                clean_fp32 = random_values(DType::F32, size_t(k.n), rng, 0.0, 1e30);
      // (region, index, value): an inf/NaN in one region only; region -1 injects nothing.
      struct Injection {
        int region;  // 0: the compute gradients, 1: the fp32 ones
        int64_t at;
        double value;
      };
      std::vector<Injection> injections = {{-1, 0, 0.0},
                                           {0, 0, inf},
                                           {0, k.prefix - 1, -inf},
                                           {0, k.prefix / 2, nan}};
      if (k.n > 0) injections.push_back({1, k.n - 1, inf});
      for (const Injection& in : injections) {
        SCOPED_TRACE(std::string(name(dtype)) + " prefix=" + std::to_string(k.prefix) + " n=" + std::to_string(k.n) +
                     " offset=" + std::to_string(k.offset) + " region " + std::to_string(in.region) + " at " +
                     std::to_string(in.at) + " " + std::to_string(in.value));
        std::vector<double> half = clean_half, fp32 = clean_fp32;
        if (in.region == 0) half[size_t(in.at)] = in.value;
        if (in.region == 1) fp32[size_t(in.at)] = in.value;
        const DeviceTensor compute(dtype, half, k.offset), x(DType::F32, fp32, k.offset);
        DeviceBuffer found(sizeof(int32_t));
        found.poison(0x01);  // a stale, nonzero flag the op must overwrite
        cuda::find_nonfinite(k.n > 0 ? x.f32() : nullptr, k.n, found.as<int32_t>(), nullptr, "test",
                             cuda::ComputeGrads{compute.ptr(), k.prefix, dtype});
        sync();
        int32_t got = 0;
        std::memcpy(&got, found.download(sizeof got).data(), sizeof got);
        EXPECT_EQ(got, in.region >= 0 ? 1 : 0);
      }
    }
}

TEST(LossScaleGpu, UpdateFollowsTheRuleStepByStep) {
  KILN_REQUIRE_GPU();
  const loss_scale::Rule rule{2.f, 0.5f, 3};
  DeviceBuffer found(sizeof(int32_t)), scale(sizeof(float)), clean(sizeof(int32_t));
  float host_scale = 65536.f;
  int32_t host_clean = 0;
  scale.upload(&host_scale, sizeof host_scale);
  clean.upload(&host_clean, sizeof host_clean);
  for (int32_t flag : {0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0}) {
    found.upload(&flag, sizeof flag);
    cuda::update_loss_scale(found.as<int32_t>(), scale.as<float>(), clean.as<int32_t>(), rule, nullptr, "test");
    sync();
    loss_scale::update(flag != 0, host_scale, host_clean, rule);
    float got_scale = 0;
    int32_t got_clean = 0;
    std::memcpy(&got_scale, scale.download(sizeof(float)).data(), sizeof(float));
    std::memcpy(&got_clean, clean.download(sizeof(int32_t)).data(), sizeof(int32_t));
    EXPECT_EQ(got_scale, host_scale);
    EXPECT_EQ(got_clean, host_clean);
  }
}

// The digits CNN in fp16 on the GPU, where loss scaling is on by default, on one random batch.
struct Fp16Run {
  Executable exe;
  Fp16Run() : exe(program(), 1) {
    const Program& p = exe.program();
    std::mt19937 rng(5);
    const TensorSpec& in = p.tensors[p.input];
    const std::vector<double> pixels = random_values(DType::F32, size_t(numel(in.shape)), rng);
    const std::vector<std::byte> images = testing::encode(in.dtype, pixels);
    exe.write(p.input, images.data(), images.size());
    std::vector<int32_t> labels(size_t(numel(p.tensors[p.label].shape)));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
  }
  static Program program() {
    CompileOptions c;
    c.device = Device::CUDA, c.precision = Precision::FP16, c.batch = 64;
    c.optimizer.set("momentum", 0.9);
    return compile(zoo::digits_cnn(), c);
  }
  const Program& p() const { return exe.program(); }
  std::vector<float> floats(int id) { return exe.read<float>(id); }
  float scale() { return floats(p().loss_scale)[0]; }
  int32_t clean_steps() { return exe.read<int32_t>(p().loss_scale_clean_steps)[0]; }
  void set_scale(float s) { exe.write(p().loss_scale, &s, sizeof s); }
  void set_clean_steps(int32_t c) { exe.write(p().loss_scale_clean_steps, &c, sizeof c); }
};

// An inf in one gradient region only — the fp16 gradient of a convolution weight (which the
// optimizer reads as it is, no fp32 copy beside it), or BN's fp32 gradient — skips the step.
TEST(LossScaleGpu, Fp16ProgramSkipsAStepWithAnInjectedInfAndBacksOff) {
  KILN_REQUIRE_GPU();
  for (const char* grad_name : {"conv2.conv.weight.grad", "conv3.bn.bias.grad"}) {
    SCOPED_TRACE(grad_name);
    Fp16Run run;
    ASSERT_GE(run.p().loss_scale, 0) << "fp16 scales the loss by default";
    EXPECT_EQ(run.scale(), 65536.f);
    run.set_clean_steps(5);
    const StepScalars s{0.05f, 0, 1};
    run.exe.run_forward(s);
    run.exe.run_backward(s);
    const int grad = run.exe.id(grad_name);
    const TensorSpec& spec = run.p().tensors[grad];
    EXPECT_EQ(spec.dtype, std::string(grad_name).find(".conv.") != std::string::npos ? DType::F16 : DType::F32);
    std::vector<std::byte> bytes(spec.bytes());
    run.exe.read(grad, bytes.data(), bytes.size());
    std::vector<double> g = testing::decode<double>(spec.dtype, bytes);
    ASSERT_TRUE(std::all_of(g.begin(), g.end(), [](double v) { return std::isfinite(v); }));
    g[1] = std::numeric_limits<double>::infinity();
    bytes = testing::encode(spec.dtype, g);
    run.exe.write(grad, bytes.data(), bytes.size());
    const std::vector<float> params = run.floats(run.p().param_region),
                             momentum = run.floats(run.p().opt_state_regions[0]);
    std::vector<std::byte> copies(run.p().tensors[run.p().compute_param_region].bytes());
    run.exe.read(run.p().compute_param_region, copies.data(), copies.size());
    run.exe.run_update(s);
    EXPECT_EQ(run.floats(run.p().param_region), params);
    EXPECT_EQ(run.floats(run.p().opt_state_regions[0]), momentum);
    std::vector<std::byte> copies_after(copies.size());
    run.exe.read(run.p().compute_param_region, copies_after.data(), copies_after.size());
    EXPECT_EQ(copies_after, copies) << "the fp16 copies of the weights must be untouched too";
    EXPECT_EQ(run.scale(), 32768.f);
    EXPECT_EQ(run.clean_steps(), 0);
    EXPECT_EQ(run.exe.read<int32_t>(run.p().found_nonfinite)[0], 1);
  }
}

TEST(LossScaleGpu, Fp16OverflowFromAHugeScaleIsSkippedThenAModestOneTrains) {
  KILN_REQUIRE_GPU();
  Fp16Run run;
  // 2^40 times the loss gradient overflows fp16 (max 65504) in the first layer's backward.
  run.set_scale(std::ldexp(1.f, 40));
  const std::vector<float> params = run.floats(run.p().param_region);
  for (int64_t step = 0; step < 2; ++step) {
    const StepScalars s{0.05f, step, 1};
    run.exe.run_forward(s);
    run.exe.run_backward(s);
    run.exe.run_update(s);
  }
  EXPECT_EQ(run.floats(run.p().param_region), params) << "both overflowing steps are skipped";
  EXPECT_EQ(run.scale(), std::ldexp(1.f, 38));
  // A scale the fp16 gradients hold: the step is taken and counted.
  run.set_scale(1024.f);
  const StepScalars s{0.05f, 2, 1};
  run.exe.run_forward(s);
  run.exe.run_backward(s);
  run.exe.run_update(s);
  EXPECT_EQ(run.exe.read<int32_t>(run.p().found_nonfinite)[0], 0);
  EXPECT_NE(run.floats(run.p().param_region), params);
  EXPECT_EQ(run.scale(), 1024.f);
  EXPECT_EQ(run.clean_steps(), 1);
  for (float v : run.floats(run.p().param_region)) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace kiln
