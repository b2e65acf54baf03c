// STOCHASTIC_DEPTH_FWD / STOCHASTIC_DEPTH_BWD on the GPU through the CUDA registry, against the CPU
// ops on the same values: for the same seed, layer key and step the GPU keeps the same samples (masks
// equal bit for bit in fp32, fp16 and bf16), y and dx are the CPU's fp32 products rounded once to the
// dtype, and dx = dy * mask[n] / (1 - p). A compiled CUDA program draws the CPU program's masks, and
// replayed as a CUDA Graph it draws each step's own (the seed and step read on the device).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/elementwise/elementwise_contract.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"
#include "support/gpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using namespace gpu_test;

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr int kLayer = 3;
constexpr uint32_t kLayerKey = 0xC0FFEEu;  // lowering's hash of the layer's name
constexpr uint64_t kSeed = 1234;

struct Case {
  Shape shape;
  size_t offset = 0;  // elements: 1 takes the kernels' unaligned path
};
// One element; samples of one element each; samples of 7 (groups of 8 cross samples); samples of
// 135, misaligned; 64 samples of 4,096 (256K elements).
const Case kCases[] = {{{1, 1}}, {{300, 1}}, {{33, 7}}, {{7, 3, 5, 9}, 1}, {{64, 8, 8, 64}}};

int64_t samples(const Case& k) { return k.shape[0]; }

// The ops of layer 3, "features.2.0.stochastic_depth", on either backend; `scalars` carries the
// seed and step.
struct Ops {
  testing::OpBench bench{kLayer, "features.2.0.stochastic_depth"};
  cuda::CudaBackend* backend = nullptr;  // nullptr: the CPU

  void run(const Op& op, std::vector<TensorArg> in, std::vector<TensorArg> out) {
    const Device device = backend ? Device::CUDA : Device::CPU;
    const OpCall call{op, bench.program, std::move(in), std::move(out), bench.scalars, backend};
    find_op(device, op.kind)(call);
    if (backend) sync();
  }
};

struct Result {
  std::vector<uint8_t> mask;
  std::vector<double> y, dx;
};

Op forward_op(float p) { return make_op(StochasticDepthForward<TensorId>{0, 1, 2, p, kLayerKey}, kLayer); }
Op backward_op(float p) { return make_op(StochasticDepthBackward<TensorId>{3, 2, 4, p}, kLayer); }

// The CPU ops (fp32: the CPU runs no fp16/bf16) on the dtype-rounded values.
Result run_cpu(const Case& k, float p, int64_t step, const std::vector<double>& x, const std::vector<double>& dy) {
  Ops ops;
  ops.bench.scalars.seed = kSeed, ops.bench.scalars.step = step;
  std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end()), y(x.size()), dx(x.size());
  std::vector<uint8_t> mask(size_t(samples(k)));
  testing::OpBench& b = ops.bench;
  const Shape mask_shape{samples(k)};
  ops.run(forward_op(p), {b.arg(k.shape, xf.data(), DType::F32)},
          {b.arg(k.shape, y.data(), DType::F32), b.arg(mask_shape, mask.data(), DType::U8)});
  ops.run(backward_op(p), {b.arg(k.shape, dyf.data(), DType::F32), b.arg(mask_shape, mask.data(), DType::U8)},
          {b.arg(k.shape, dx.data(), DType::F32)});
  return {mask, {y.begin(), y.end()}, {dx.begin(), dx.end()}};
}

Result run_gpu(cuda::CudaBackend& backend, DType dtype, const Case& k, float p, int64_t step,
               const std::vector<double>& x_values, const std::vector<double>& dy_values) {
  Ops ops;
  ops.backend = &backend;
  ops.bench.scalars.seed = kSeed, ops.bench.scalars.step = step;
  const size_t n = x_values.size();
  const DeviceTensor x(dtype, x_values, k.offset), dy(dtype, dy_values, k.offset);
  DeviceTensor y = DeviceTensor::poisoned(dtype, n, k.offset), dx = DeviceTensor::poisoned(dtype, n, k.offset);
  DeviceBytes mask(size_t(samples(k)), k.offset);
  mask.poison(0xFF);  // neither 0 nor 1: an unwritten byte fails the comparison
  testing::OpBench& b = ops.bench;
  const Shape mask_shape{samples(k)};
  ops.run(forward_op(p), {b.arg(k.shape, x.ptr(), dtype)},
          {b.arg(k.shape, y.ptr(), dtype), b.arg(mask_shape, mask.ptr(), DType::U8)});
  ops.run(backward_op(p), {b.arg(k.shape, dy.ptr(), dtype), b.arg(mask_shape, mask.ptr(), DType::U8)},
          {b.arg(k.shape, dx.ptr(), dtype)});
  return {mask.get(), y.get(), dx.get()};
}

// --- Comparisons (one failure each, so the mutation check can expect exactly one) ---

void expect_same_mask(const std::string& what, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << want.size() << " mask bytes differ from the CPU's, first at "
                     << first << " (got " << int(got[first]) << ", want " << int(want[first]) << ")";
}

// Bit for bit: both backends multiply in fp32 by the same fp32 scale; the GPU then rounds once
// to its dtype, so the CPU's product rounded to that dtype is exact.
void expect_cpu_product(const std::string& what, DType dtype, const std::vector<double>& got,
                        const std::vector<double>& cpu) {
  ASSERT_EQ(got.size(), cpu.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (!(got[i] == testing::round_to(dtype, float(cpu[i]))) && bad++ == 0) first = i;  // NaN fails
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << cpu.size() << " values differ from the CPU's product "
                     << "rounded to " << name(dtype) << ", first at " << first << ": got " << got[first]
                     << ", the CPU's " << cpu[first];
}

// dx against dy * mask[n] / (1 - p) in float64 (dropout_gpu_test.cpp's bound: the fp32 scale and
// product each round by at most 2^-24, the store to the dtype by half an ulp; fp16 subnormals by
// half their step).
void expect_stochastic_depth(const std::string& what, DType dtype, const std::vector<double>& dx,
                             const std::vector<double>& dy, const std::vector<uint8_t>& mask, float p) {
  const double store = dtype == DType::F16 ? std::ldexp(1.0, -11) : dtype == DType::BF16 ? std::ldexp(1.0, -8)
                                                                                         : std::ldexp(1.0, -24);
  const double rel = store + std::ldexp(1.0, -22);
  const double subnormal = dtype == DType::F16 ? std::ldexp(1.0, -25) : 0.0;
  const size_t row = dy.size() / mask.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < dy.size(); ++i) {
    const double want = mask[i / row] ? dy[i] / (1.0 - double(p)) : 0.0;
    if (!(std::abs(dx[i] - want) <= rel * std::abs(want) + subnormal) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << dy.size() << " values are not dy * mask[n] / (1 - p), "
                     << "first at " << first << ": got " << dx[first] << " from dy " << dy[first] << ", mask "
                     << int(mask[first / row]);
}

std::string case_name(DType dtype, const Case& k, float p, int64_t step) {
  return std::string(name(dtype)) + " shape " + shape_str(k.shape) + " offset " + std::to_string(k.offset) + " p " +
         std::to_string(p) + " step " + std::to_string(step);
}

TEST(StochasticDepthGpu, MasksAndValuesMatchTheCpuOps) {
  KILN_REQUIRE_GPU();
  register_cuda_ops();
  cuda::CudaBackend backend(0);
  std::mt19937 rng(61);
  for (DType dtype : kDtypes)
    for (const Case& k : kCases)
      for (float p : {0.f, 0.2f, 0.5f, 1.f})
        for (int64_t step : {0, 7}) {
          SCOPED_TRACE(case_name(dtype, k, p, step));
          const size_t n = size_t(numel(k.shape));
          const std::vector<double> x = random_values(dtype, n, rng), dy = random_values(dtype, n, rng);
          const Result cpu = run_cpu(k, p, step, x, dy);
          const Result gpu = run_gpu(backend, dtype, k, p, step, x, dy);
          expect_same_mask("mask", gpu.mask, cpu.mask);
          expect_cpu_product("y", dtype, gpu.y, cpu.y);
          expect_cpu_product("dx", dtype, gpu.dx, cpu.dx);
          expect_stochastic_depth("dx", dtype, gpu.dx, dy, gpu.mask, p);
        }
}

// The masks are random, not merely equal: about 1 - p of the samples are kept, and another step
// draws another mask. Mutation check: the comparison the test above relies on reports the mask of
// step 7 as different from the CPU's mask of step 0.
TEST(StochasticDepthGpu, MaskKeepsOneMinusPAndChangesWithTheStep) {
  KILN_REQUIRE_GPU();
  register_cuda_ops();
  cuda::CudaBackend backend(0);
  std::mt19937 rng(62);
  const Case k{{100000, 3}};
  const float p = 0.3f;
  const size_t n = size_t(numel(k.shape));
  const std::vector<double> x = random_values(DType::BF16, n, rng), dy = random_values(DType::BF16, n, rng);
  const Result step0 = run_gpu(backend, DType::BF16, k, p, 0, x, dy);
  const Result step7 = run_gpu(backend, DType::BF16, k, p, 7, x, dy);
  size_t kept = 0;
  for (uint8_t m : step0.mask) kept += m;
  EXPECT_NEAR(double(kept) / double(samples(k)), 1.0 - p, 0.01);  // 100,000 draws: the deviation is 0.0015
  const Result cpu0 = run_cpu(k, p, 0, x, dy);
  expect_same_mask("mask of step 0", step0.mask, cpu0.mask);
  EXPECT_NONFATAL_FAILURE(expect_same_mask("mask of step 7", step7.mask, cpu0.mask), "differ from the CPU's");
}

TEST(StochasticDepthGpu, ErrorsNameTheOpAndTheFix) {
  KILN_REQUIRE_GPU();
  register_cuda_ops();
  cuda::CudaBackend backend(0);
  Ops ops;
  ops.backend = &backend;
  testing::OpBench& b = ops.bench;
  const Shape shape{4, 8}, mask_shape{4};
  const DeviceTensor x(DType::F16, std::vector<double>(32, 0.5)), y(DType::F16, 32), dx(DType::F16, 32);
  const DeviceBytes mask(32);
  testing::expect_error(
      [&] {
        ops.run(forward_op(1.5f), {b.arg(shape, x.ptr(), DType::F16)},
                {b.arg(shape, y.ptr(), DType::F16), b.arg(mask_shape, mask.ptr(), DType::U8)});
      },
      {"STOCHASTIC_DEPTH_FWD 'features.2.0.stochastic_depth'", "p = 1.5", "[0, 1]"});
  testing::expect_error(
      [&] {
        ops.run(backward_op(-0.5f), {b.arg(shape, x.ptr(), DType::F16), b.arg(mask_shape, mask.ptr(), DType::U8)},
                {b.arg(shape, dx.ptr(), DType::F16)});
      },
      {"STOCHASTIC_DEPTH_BWD 'features.2.0.stochastic_depth'", "p = -0.5"});
  testing::expect_error(  // dropout's mask, one byte an element
      [&] {
        ops.run(forward_op(0.5f), {b.arg(shape, x.ptr(), DType::F16)},
                {b.arg(shape, y.ptr(), DType::F16), b.arg(shape, mask.ptr(), DType::U8)});
      },
      {"STOCHASTIC_DEPTH_FWD 'features.2.0.stochastic_depth'", "one U8 per sample"});
  testing::expect_error(
      [&] {
        ops.run(forward_op(0.5f), {b.arg(shape, x.ptr(), DType::F16)},
                {b.arg(shape, y.ptr(), DType::F32), b.arg(mask_shape, mask.ptr(), DType::U8)});
      },
      {"STOCHASTIC_DEPTH_FWD 'features.2.0.stochastic_depth'", "output", "must match"});
}

// --- A compiled program: a residual block whose body ends in a stochastic depth (no BatchNorm,
// whose GPU statistics reductions are not bit-reproducible run to run) ---

constexpr int kBatch = 16;
constexpr uint64_t kStepSeed = 3;

Blueprint residual_model() {
  Blueprint body("body");
  body.conv(8, 3, 1, 1, true, "conv").relu("act").conv(8, 3, 1, 1, true, "conv2").stochastic_depth(0.4f, "sd");
  Blueprint m("stochastic_depth");
  m.input(8, 8, 3).conv(8, 3, 1, 1, true, "stem").residual(body, std::nullopt, true, "block");
  m.global_avgpool("pool").fc(10, true, "fc");
  return m;
}

std::unique_ptr<Executable> residual_program(Device device, Precision precision, bool graphs) {
  CompileOptions o;
  o.device = device, o.precision = precision, o.batch = kBatch;
  o.cuda.graphs = graphs;
  o.cuda.tune = false;  // both GPU programs take the same (first) plans
  return std::make_unique<Executable>(compile(residual_model(), o), 7);
}

std::string mask_name(const Program& p) {
  for (const Layer& l : p.graph.layers)
    if (l.kind == LayerKind::StochasticDepth) return l.name + ":mask";
  return "(no stochastic depth layer)";
}

void write_batch(Executable& exe, int step) {
  const Program& p = exe.program();
  std::mt19937 rng(200 + step);
  const std::vector<float> x = random_values<float>(DType::F32, size_t(numel(p.tensors[p.input].shape)), rng);
  exe.write(p.input, x.data(), x.size() * sizeof(float));
  std::vector<int32_t> labels(static_cast<size_t>(kBatch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 3 + size_t(step)) % 10);
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
}

// The GPU program's forward draws the CPU program's mask, step by step, in every precision.
TEST(StochasticDepthGpu, ProgramDrawsTheCpuProgramsMasks) {
  KILN_REQUIRE_GPU();
  auto cpu = residual_program(Device::CPU, Precision::FP32, false);
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    auto gpu = residual_program(Device::CUDA, precision, false);
    const std::string mask = mask_name(gpu->program());
    for (int64_t step : {0, 1, 2}) {
      SCOPED_TRACE(std::string(precision_name(precision)) + " step " + std::to_string(step));
      write_batch(*cpu, int(step)), write_batch(*gpu, int(step));
      cpu->run_forward({0.1f, step, kStepSeed});
      gpu->run_forward({0.1f, step, kStepSeed});
      const std::vector<uint8_t> want = cpu->read<uint8_t>(cpu->id(mask));
      ASSERT_EQ(want.size(), size_t(kBatch));
      EXPECT_GT(std::count(want.begin(), want.end(), 1), 0);
      EXPECT_GT(std::count(want.begin(), want.end(), 0), 0);
      expect_same_mask(mask, gpu->read<uint8_t>(gpu->id(mask)), want);
    }
  }
}

// Training steps replayed as a CUDA Graph equal the same steps op by op (fp32: the same plans, no
// BatchNorm, so within what two op-by-op runs differ by, which cuda_graph_gpu_test.cpp measures as
// 0): each replay draws its step's mask. A replay that kept the captured step's mask would match a
// run whose every later step draws the mask of step 1 instead: that run ends far away.
TEST(StochasticDepthGpu, ReplayedStepsDrawEachStepsMask) {
  KILN_REQUIRE_GPU();
  auto run = [](bool graphs, bool frozen_step) {
    auto exe = residual_program(Device::CUDA, Precision::FP32, graphs);
    for (int i = 0; i < 5; ++i) {
      write_batch(*exe, i);
      exe->run_step({0.05f, frozen_step && i > 0 ? 1 : i, kStepSeed});
    }
    return exe->read<float>(exe->program().param_region);
  };
  const std::vector<float> replayed = run(true, false), plain = run(false, false), again = run(false, false),
                           frozen = run(false, true);
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = a.size() == b.size() ? 0 : INFINITY;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, double(std::abs(a[i] - b[i])));
    return d;
  };
  const double drift = max_diff(replayed, plain), run_drift = max_diff(again, plain), frozen_gap = max_diff(frozen, plain);
  std::printf("params, max difference: replayed vs op by op %.3g, two op-by-op runs %.3g, a frozen step's masks %.3g\n",
              drift, run_drift, frozen_gap);
  EXPECT_LE(drift, 10 * run_drift);
  EXPECT_GT(frozen_gap, 100 * std::max(run_drift, 1e-7));
}

}  // namespace
}  // namespace kiln
