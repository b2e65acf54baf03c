// DROPOUT_FWD / DROPOUT_BWD on the GPU through the CUDA registry, against the CPU ops on the same
// values: for the same seed, layer key and step the GPU drops the same elements (masks equal bit
// for bit in fp32, fp16 and bf16), y and dx are the CPU's fp32 products rounded once to the
// dtype, and dx = dy * mask / (1 - p).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
  size_t offset = 0;  // elements (bytes for the mask): 1 takes the kernels' unaligned path
};
// One element; a partial last group of 8, misaligned; a (batch, features) block of 256K.
const Case kCases[] = {{{1}}, {{7, 129}, 1}, {{64, 4096}}};

// The ops of layer 3, "classifier.2", on either backend; `scalars` carries the seed and step.
struct DropoutOps {
  testing::OpBench bench{kLayer, "classifier.2"};
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

Op forward_op(float p) { return make_op(DropoutForward<TensorId>{0, 1, 2, p, kLayerKey}, kLayer); }
Op backward_op(float p) { return make_op(DropoutBackward<TensorId>{3, 2, 4, p}, kLayer); }

// The CPU ops (fp32: the CPU runs no fp16/bf16) on the dtype-rounded values.
Result run_cpu(const Case& k, float p, int64_t step, const std::vector<double>& x, const std::vector<double>& dy) {
  DropoutOps ops;
  ops.bench.scalars.seed = kSeed, ops.bench.scalars.step = step;
  std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end()), y(x.size()), dx(x.size());
  std::vector<uint8_t> mask(x.size());
  testing::OpBench& b = ops.bench;
  ops.run(forward_op(p), {b.arg(k.shape, xf.data(), DType::F32)},
          {b.arg(k.shape, y.data(), DType::F32), b.arg(k.shape, mask.data(), DType::U8)});
  ops.run(backward_op(p), {b.arg(k.shape, dyf.data(), DType::F32), b.arg(k.shape, mask.data(), DType::U8)},
          {b.arg(k.shape, dx.data(), DType::F32)});
  return {mask, {y.begin(), y.end()}, {dx.begin(), dx.end()}};
}

Result run_gpu(cuda::CudaBackend& backend, DType dtype, const Case& k, float p, int64_t step,
               const std::vector<double>& x_values, const std::vector<double>& dy_values) {
  DropoutOps ops;
  ops.backend = &backend;
  ops.bench.scalars.seed = kSeed, ops.bench.scalars.step = step;
  const size_t n = x_values.size();
  const DeviceTensor x(dtype, x_values, k.offset), dy(dtype, dy_values, k.offset);
  DeviceTensor y = DeviceTensor::poisoned(dtype, n, k.offset), dx = DeviceTensor::poisoned(dtype, n, k.offset);
  DeviceBytes mask(n, k.offset);
  mask.poison(0xFF);  // neither 0 nor 1: an unwritten byte fails the comparison
  testing::OpBench& b = ops.bench;
  ops.run(forward_op(p), {b.arg(k.shape, x.ptr(), dtype)},
          {b.arg(k.shape, y.ptr(), dtype), b.arg(k.shape, mask.ptr(), DType::U8)});
  ops.run(backward_op(p), {b.arg(k.shape, dy.ptr(), dtype), b.arg(k.shape, mask.ptr(), DType::U8)},
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

// dx against dy * mask / (1 - p) in float64: the fp32 scale 1/(1 - p) and the fp32 product
// each round by at most 2^-24, the store to the dtype by half an ulp (2^-24 fp32, 2^-11 fp16,
// 2^-8 bf16), all relative to the value; 2^-22 covers the first two with room for their
// second-order terms.
void expect_inverted_dropout(const std::string& what, DType dtype, const std::vector<double>& dx,
                             const std::vector<double>& dy, const std::vector<uint8_t>& mask, float p) {
  const double store = dtype == DType::F16 ? std::ldexp(1.0, -11) : dtype == DType::BF16 ? std::ldexp(1.0, -8)
                                                                                         : std::ldexp(1.0, -24);
  const double rel = store + std::ldexp(1.0, -22);
  // Below fp16's smallest normal (2^-14) the spacing stops shrinking: there the store rounds to
  // half of the subnormal step 2^-24, an absolute bound (measured: 5 of 262,144 values of
  // dy ~ N(0,1) fell there). fp32 and bf16 subnormals lie far below any value drawn here.
  const double subnormal = dtype == DType::F16 ? std::ldexp(1.0, -25) : 0.0;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < dy.size(); ++i) {
    const double want = mask[i] ? dy[i] / (1.0 - double(p)) : 0.0;
    if (!(std::abs(dx[i] - want) <= rel * std::abs(want) + subnormal) && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << dy.size() << " values are not dy * mask / (1 - p), first at "
                     << first << ": got " << dx[first] << " from dy " << dy[first] << ", mask " << int(mask[first]);
}

std::string case_name(DType dtype, const Case& k, float p, int64_t step) {
  return std::string(name(dtype)) + " shape " + shape_str(k.shape) + " offset " + std::to_string(k.offset) + " p " +
         std::to_string(p) + " step " + std::to_string(step);
}

TEST(DropoutGpu, MasksAndValuesMatchTheCpuOps) {
  KILN_REQUIRE_GPU();
  register_cuda_ops();
  cuda::CudaBackend backend(0);
  std::mt19937 rng(51);
  for (DType dtype : kDtypes)
    for (const Case& k : kCases)
      for (float p : {0.f, 0.1f, 0.5f, 1.f})
        for (int64_t step : {0, 7}) {
          SCOPED_TRACE(case_name(dtype, k, p, step));
          const size_t n = size_t(numel(k.shape));
          const std::vector<double> x = random_values(dtype, n, rng), dy = random_values(dtype, n, rng);
          const Result cpu = run_cpu(k, p, step, x, dy);
          const Result gpu = run_gpu(backend, dtype, k, p, step, x, dy);
          expect_same_mask("mask", gpu.mask, cpu.mask);
          expect_cpu_product("y", dtype, gpu.y, cpu.y);
          expect_cpu_product("dx", dtype, gpu.dx, cpu.dx);
          expect_inverted_dropout("dx", dtype, gpu.dx, dy, gpu.mask, p);
        }
}

// The masks are random, not merely equal: about 1 - p of the elements are kept, and another
// step draws another mask. Mutation check: the comparison that the test above relies on reports
// the mask of step 7 as different from the CPU's mask of step 0.
TEST(DropoutGpu, MaskKeepsOneMinusPAndChangesWithTheStep) {
  KILN_REQUIRE_GPU();
  register_cuda_ops();
  cuda::CudaBackend backend(0);
  std::mt19937 rng(52);
  const Case k{{64, 4096}};
  const float p = 0.3f;
  const size_t n = size_t(numel(k.shape));
  const std::vector<double> x = random_values(DType::BF16, n, rng), dy = random_values(DType::BF16, n, rng);
  const Result step0 = run_gpu(backend, DType::BF16, k, p, 0, x, dy);
  const Result step7 = run_gpu(backend, DType::BF16, k, p, 7, x, dy);
  size_t kept = 0;
  for (uint8_t m : step0.mask) kept += m;
  EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.01);  // 262144 draws: the standard deviation is 0.0009
  const Result cpu0 = run_cpu(k, p, 0, x, dy);
  expect_same_mask("mask of step 0", step0.mask, cpu0.mask);
  EXPECT_NONFATAL_FAILURE(expect_same_mask("mask of step 7", step7.mask, cpu0.mask), "differ from the CPU's");
}

TEST(DropoutGpu, ErrorsNameTheOpAndTheFix) {
  KILN_REQUIRE_GPU();
  register_cuda_ops();
  cuda::CudaBackend backend(0);
  DropoutOps ops;
  ops.backend = &backend;
  testing::OpBench& b = ops.bench;
  const Shape shape{4, 8};
  const DeviceTensor x(DType::F16, std::vector<double>(32, 0.5)), y(DType::F16, 32), dx(DType::F16, 32);
  const DeviceBytes mask(32);
  testing::expect_error(
      [&] {
        ops.run(forward_op(1.5f), {b.arg(shape, x.ptr(), DType::F16)},
                {b.arg(shape, y.ptr(), DType::F16), b.arg(shape, mask.ptr(), DType::U8)});
      },
      {"DROPOUT_FWD 'classifier.2'", "p = 1.5", "[0, 1]"});
  testing::expect_error(
      [&] {
        ops.run(backward_op(-0.5f), {b.arg(shape, x.ptr(), DType::F16), b.arg(shape, mask.ptr(), DType::U8)},
                {b.arg(shape, dx.ptr(), DType::F16)});
      },
      {"DROPOUT_BWD 'classifier.2'", "p = -0.5"});
  testing::expect_error(
      [&] {
        ops.run(forward_op(0.5f), {b.arg(shape, x.ptr(), DType::F16)},
                {b.arg(shape, y.ptr(), DType::F16), b.arg(shape, mask.ptr(), DType::F16)});
      },
      {"DROPOUT_FWD 'classifier.2'", "mask", "U8"});
  testing::expect_error(
      [&] {
        ops.run(forward_op(0.5f), {b.arg(shape, x.ptr(), DType::F16)},
                {b.arg(shape, y.ptr(), DType::F32), b.arg(shape, mask.ptr(), DType::U8)});
      },
      {"DROPOUT_FWD 'classifier.2'", "output", "must match"});
}

}  // namespace
}  // namespace kiln
