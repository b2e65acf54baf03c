// The mul family on the GPU: the kernels against the host's float64 reference (mul_test_reference.h)
// for F32, F16 and BF16, maps of one shape and per-channel gates, aligned and not, products bit
// for bit and a gate's gradient within its rounding bound and the same on every run; and CUDA
// programs: a gate and a same-shape product forward, backward and in inference (captured and
// replayed) against host values, and a training step whose backward is replayed from a CUDA Graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/mul/mul_cuda.h"
#include "ops/mul/mul_test_reference.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"
#include "support/replayed_step.h"

namespace kiln {
namespace {

using namespace gpu_test;
using mul_test::Extents;
using mul_test::outside_bound;
using mul_test::Reference;

// Unit roundoff of a stored result.
double unit_of(DType dt) { return dt == DType::F16 ? 0x1p-11 : dt == DType::BF16 ? 0x1p-8 : 0x1p-24; }

std::string label(DType dt, const Extents& e, size_t offset) {
  return std::string(name(dt)) + " n=" + std::to_string(e.n) + " hw=" + std::to_string(e.hw) +
         " c=" + std::to_string(e.c) + (e.gate ? " gate" : " same") + " offset=" + std::to_string(offset);
}

// Products of two values of dt are exact in fp32 (fp16, bf16) or double (fp32): the one rounding
// to dt is the kernel's.
void expect_products(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                     DType dt) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], double(testing::round_to(dt, float(want[i])))) << what << " at " << i;
}

void expect_untouched(const std::string& what, const std::vector<double>& got) {
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << what << " written at " << i;
}

// A gate's gradient: fp32 products and sums (at most hw + 1 roundings of the terms' magnitude),
// then the result's rounding to dt.
// Half the spacing of dt's subnormals: fp16's start below 2^-14, where a gate gradient of 7e-7 is
// stored 1.7e-8 off (measured on an H100, n=70000 hw=1 c=8), inside 2^-25 but not the relative
// bound.
double subnormal_floor(DType dt) { return dt == DType::F16 ? 0x1p-25 : dt == DType::BF16 ? 0x1p-134 : 0x1p-150; }

mul_test::Misses gate_misses(const std::vector<double>& got, const Reference& want, const Extents& e, DType dt) {
  return outside_bound(got, want.db, want.db_terms, unit_of(dt), 0x1p-24, e.hw + 1, subnormal_floor(dt));
}

TEST(MulGpu, KernelsMatchTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(21);
  // Channels a multiple of 16 bytes and not; a partial last flat group; more images than a grid's
  // 65535 rows; a large map whose gate sums run long.
  const std::vector<Extents> extents = {{3, 37, 70, false}, {3, 37, 70, true},  {4, 49, 64, true},
                                        {5, 7, 3, true},    {2, 3136, 256, true}, {2, 3136, 256, false},
                                        {70000, 1, 8, true}};
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const Extents& e : extents)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        const std::string what = label(dt, e, offset);
        SCOPED_TRACE(what);
        const cpu::MulGeom g{e.n, e.hw, e.c, e.gate};
        const size_t map = size_t(e.map()), bn = size_t(e.b());
        const std::vector<double> a = testing::random_values<double>(dt, map, rng),
                                  b = testing::random_values<double>(dt, bn, rng),
                                  dy = testing::random_values<double>(dt, map, rng);
        const Reference want = mul_test::reference(e, a, b, dy);
        DeviceTensor in_a(dt, a, offset), in_b(dt, b, offset), ddy(dt, dy, offset);
        DeviceTensor y = DeviceTensor::poisoned(dt, map, offset);
        cuda::mul_forward(dt, g, in_a.ptr(), in_b.ptr(), y.ptr(), nullptr, "mul gpu test");
        sync();
        expect_products("y", y.get(), want.y, dt);
        for (int variant = 0; variant < 3; ++variant) {  // both gradients, da alone, db alone
          const bool want_da = variant != 2, want_db = variant != 1;
          DeviceTensor grad_a = DeviceTensor::poisoned(dt, map, offset), grad_b = DeviceTensor::poisoned(dt, bn, offset);
          cuda::mul_backward(dt, g, ddy.ptr(), in_a.ptr(), in_b.ptr(), want_da ? grad_a.ptr() : nullptr,
                             want_db ? grad_b.ptr() : nullptr, nullptr, "mul gpu test");
          sync();
          const std::vector<double> got_a = grad_a.get(), got_b = grad_b.get();
          if (want_da)
            expect_products("da", got_a, want.da, dt);
          else
            expect_untouched("da", got_a);
          if (!want_db) {
            expect_untouched("db", got_b);
            continue;
          }
          if (!e.gate) {
            expect_products("db", got_b, want.db, dt);
            continue;
          }
          const mul_test::Misses m = gate_misses(got_b, want, e, dt);
          ASSERT_EQ(m.count, 0) << "db off at " << m.first << ": got " << got_b[size_t(m.first)] << ", want "
                                << want.db[size_t(m.first)];
          // The same kernel again gives the same bits (its order of additions is fixed).
          DeviceTensor again = DeviceTensor::poisoned(dt, bn, offset);
          cuda::mul_backward(dt, g, ddy.ptr(), in_a.ptr(), in_b.ptr(), want_da ? grad_a.ptr() : nullptr, again.ptr(),
                             nullptr, "mul gpu test");
          sync();
          ASSERT_EQ(again.get(), got_b) << "the gate's gradient differs between runs";
        }
      }
}

// The gate bound in fp16 and bf16 is tight enough to catch a sum that misses a row.
TEST(MulGpu, TheGateBoundCatchesASumMissingARow) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(22);
  const Extents e{3, 49, 64, true};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(name(dt));
    const std::vector<double> a = testing::random_values<double>(dt, size_t(e.map()), rng),
                              b = testing::random_values<double>(dt, size_t(e.b()), rng),
                              dy = testing::random_values<double>(dt, size_t(e.map()), rng);
    DeviceTensor in_a(dt, a), in_b(dt, b), ddy(dt, dy), grad_b = DeviceTensor::poisoned(dt, size_t(e.b()));
    cuda::mul_backward(dt, cpu::MulGeom{e.n, e.hw, e.c, true}, ddy.ptr(), in_a.ptr(), in_b.ptr(), nullptr, grad_b.ptr(),
                       nullptr, "mul gpu test");
    sync();
    std::vector<double> short_dy = dy;
    for (int64_t img = 0; img < e.n; ++img)
      for (int64_t k = 0; k < e.c; ++k) short_dy[size_t(((img + 1) * e.hw - 1) * e.c + k)] = 0;
    const Reference right = mul_test::reference(e, a, b, dy), wrong = mul_test::reference(e, a, b, short_dy);
    EXPECT_EQ(gate_misses(grad_b.get(), right, e, dt).count, 0);
    Reference wrong_sums = right;
    wrong_sums.db = wrong.db;
    EXPECT_GT(gate_misses(grad_b.get(), wrong_sums, e, dt).count, e.n * e.c / 2);
  }
}

TEST(MulGpu, RefusesExtentsWithoutRows) {
  KILN_REQUIRE_GPU();
  DeviceTensor a(DType::F32, 8), b(DType::F32, 8), y(DType::F32, 8);
  testing::expect_error(
      [&] { cuda::mul_forward(DType::F32, cpu::MulGeom{1, 0, 8, true}, a.ptr(), b.ptr(), y.ptr(), nullptr, "t"); },
      {"mul_forward", "hw = 0"});
}

// --- Programs ---

// Per (image, channel), 36 distinct multiples of 1/32 below 4 in magnitude (exact in bf16): the
// 6x6 max pool's maximum is unique, so every device routes its gradient to the same element.
std::vector<double> distinct_map(int64_t n, int64_t hw, int64_t c, std::mt19937& rng) {
  std::vector<double> x(size_t(n * hw * c));
  std::vector<int> pool(255);
  std::iota(pool.begin(), pool.end(), -127);
  for (int64_t img = 0; img < n; ++img)
    for (int64_t k = 0; k < c; ++k) {
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int64_t r = 0; r < hw; ++r) x[size_t((img * hw + r) * c + k)] = pool[size_t(r)] / 32.0;
    }
  return x;
}

// x (6 x 6 x 8) -> g = maxpool 6x6 (the gate N x 1 x 1 x 8); gated = mul(g, x); y = mul(gated, x):
// y = g x^2. Backward: d(gated) = dy x; dx = dy gated + d(gated) g + (at each channel's maximum)
// sum_r d(gated) x, the gate's gradient routed back by the pool.
Blueprint gate_and_square() {
  Blueprint m("gate_and_square");
  m.input(6, 6, 8).maxpool(6, 6, 0, "g");
  const Blueprint::Ref g = m.last();
  m.mul(g, m.source(), "gated");
  m.mul(m.last(), m.source(), "y");
  return m;
}

struct HostValues {
  std::vector<double> y, dx;
};

HostValues gate_and_square_values(const std::vector<double>& x, const std::vector<double>& dy, int64_t n) {
  const int64_t hw = 36, c = 8;
  HostValues v{std::vector<double>(x.size()), std::vector<double>(x.size())};
  for (int64_t img = 0; img < n; ++img)
    for (int64_t k = 0; k < c; ++k) {
      auto at = [&](int64_t r) { return size_t((img * hw + r) * c + k); };
      int64_t arg = 0;
      for (int64_t r = 1; r < hw; ++r)
        if (x[at(r)] > x[at(arg)]) arg = r;
      const double g = x[at(arg)];
      double dg = 0;
      for (int64_t r = 0; r < hw; ++r) {
        const double xi = x[at(r)], gated = g * xi, dgated = dy[at(r)] * xi;
        v.y[at(r)] = gated * xi;
        v.dx[at(r)] = dy[at(r)] * gated + dgated * g;
        dg += dgated * xi;
      }
      v.dx[at(arg)] += dg;
    }
  return v;
}

TEST(MulGpu, ProgramForwardBackwardAndInference) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    CompileOptions o;
    o.device = Device::CUDA, o.precision = precision, o.batch = 3, o.loss = false, o.input_grad = true;
    Executable exe(compile(gate_and_square(), o), 1);
    const Program& p = exe.program();
    ASSERT_EQ(p.graph.count(LayerKind::Mul), 2);
    std::mt19937 rng(23);
    const std::vector<double> x = distinct_map(3, 36, 8, rng);
    const std::vector<double> dy = testing::random_values<double>(dt, x.size(), rng);
    testing::write_floats(exe, p.input, testing::cast<float>(x));
    testing::write_floats(exe, p.output_grad, testing::cast<float>(dy));
    const StepScalars s{0.f, 0, 1};
    exe.run_forward(s);
    const std::vector<float> y = testing::read_floats(exe, p.tensors[p.logits].name);
    exe.run_backward(s);
    const std::vector<float> dx = testing::read_floats(exe, p.tensors[p.input_grad].name);
    const HostValues want = gate_and_square_values(x, dy, 3);
    testing::expect_close_to_reference("y", y, want.y, tolerance(dt));
    testing::expect_close_to_reference("d(input)", dx, want.dx, tolerance(dt));
    // Inference three times on new data: op by op, captured, then replayed from the CUDA Graph.
    for (int run = 0; run < 3; ++run) {
      const std::vector<double> xi = distinct_map(3, 36, 8, rng);
      testing::write_floats(exe, p.input, testing::cast<float>(xi));
      exe.run_inference(s);
      const std::vector<float> yi = testing::read_floats(exe, p.tensors[p.inference_logits].name);
      testing::expect_close_to_reference("inference y, run " + std::to_string(run), yi,
                                         gate_and_square_values(xi, dy, 3).y, tolerance(dt));
    }
  }
}

// A training step through squeeze-and-excitation: c = conv 1x1 (bias) of x; gate = sigmoid(fc2(relu(
// fc1(adaptive_avgpool(1, 1) of c)))) with biased 1x1 convolutions; scale = mul(gate, c); then a
// classifier. At learning rate 0 the weights
// stay; steps on batches A, B and A again (the third replayed from the graph the second captured)
// must give A's gradients, not B's: a replay that skipped or froze the product would not.
Blueprint gated_classifier() {
  Blueprint m("gated_classifier");
  m.input(6, 6, 8).conv(8, 1, 1, 0, true, "c");
  const Blueprint::Ref c = m.last();
  m.adaptive_avgpool(1, 1, "se.avgpool").conv(8, 1, 1, 0, true, "se.fc1").relu("se.activation");
  m.conv(8, 1, 1, 0, true, "se.fc2").sigmoid("se.scale_activation");
  m.mul(m.last(), c, "scale").flatten("flat").fc(4, true, "head");
  return m;
}

TEST(MulGpu, ReplayedTrainingStepGivesTheSameGradients) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    const testing::ReplayedStep step = testing::replayed_step(gated_classifier(), precision,
                                                              {"c.weight", "c.bias", "se.fc1.weight", "se.fc2.bias"}, 24);
    EXPECT_LT(step.replay, tolerance(dt)) << "the replayed step's gradients are not batch A's";
    EXPECT_GT(step.other_batch, 10 * tolerance(dt)) << "batches A and B give alike gradients";
  }
}

}  // namespace
}  // namespace kiln
