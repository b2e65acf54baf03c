// The layer_scale family on the GPU: the kernels against the host's float64 reference
// (layer_scale_test_reference.h) for F32, F16 and BF16, aligned and not, with and without dx: y and
// dx the correctly rounded products bit for bit, dgamma (two-stage fp32 sums through the
// workspace) within its rounding bound and the same on every run; bounds shown to catch a wrong
// result; and CUDA programs: a ConvNeXt-style scale forward, backward and in inference (captured
// and replayed) against host values, and a training step replayed from a CUDA Graph.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/layer_scale/layer_scale_cuda.h"
#include "ops/layer_scale/layer_scale_partials.h"
#include "ops/layer_scale/layer_scale_test_reference.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"
#include "support/replayed_step.h"

namespace kiln {
namespace {

using namespace gpu_test;
using layer_scale_test::correctly_rounded;
using layer_scale_test::Extents;
using layer_scale_test::outside_bound;
using layer_scale_test::Reference;

// `v` correctly rounded to dt: what one rounding of an exact product gives.
double rounded_once(DType dt, double v) {
  if (dt == DType::F16) return correctly_rounded(v, 11, -14);
  if (dt == DType::BF16) return correctly_rounded(v, 8, -126);
  return correctly_rounded(v, 24, -126);
}

std::string label(DType dt, const Extents& e, size_t offset) {
  return std::string(name(dt)) + " rows=" + std::to_string(e.rows) + " c=" + std::to_string(e.c) +
         " offset=" + std::to_string(offset);
}

// y and dx: the exact products (double holds them: at most 48 significant bits) rounded once.
void expect_products(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                     DType dt) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(got[i], rounded_once(dt, want[i])) << what << " at " << i << " (exact " << want[i] << ")";
}

// dgamma in fp32: products (exact for fp16/bf16 factors, one rounding for fp32) and at most rows
// - 1 additions, each within 2^-24 of the magnitudes added so far; stored as fp32 (no further
// rounding).
layer_scale_test::Misses dgamma_misses(const std::vector<double>& got, const std::vector<double>& want,
                                       const Reference& r, const Extents& e) {
  return outside_bound(got, want, r.dgamma_terms, 0.0, 0x1p-24, e.rows + 1);
}

struct DeviceRun {
  std::vector<double> y, dx, dgamma;
};

// The forward, then the backward with or without dx, into poisoned outputs.
DeviceRun run_kernels(DType dt, const Extents& e, const DeviceTensor& x, const DeviceTensor& gamma,
                      const DeviceTensor& dy, bool want_dx, size_t offset) {
  const cpu::LayerScaleGeom g{e.rows, e.c};
  const size_t n = size_t(e.elements()), c = size_t(e.c);
  DeviceTensor y = DeviceTensor::poisoned(dt, n, offset), dx = DeviceTensor::poisoned(dt, n, offset);
  DeviceTensor dgamma = DeviceTensor::poisoned(DType::F32, c);
  DeviceTensor partials = DeviceTensor::poisoned(DType::F32, size_t(layer_scale_partial_chunks(e.rows)) * c);
  cuda::layer_scale_forward(dt, g, x.ptr(), gamma.f32(), y.ptr(), nullptr, "layer_scale gpu test");
  cuda::layer_scale_backward(dt, g, dy.ptr(), x.ptr(), gamma.f32(), want_dx ? dx.ptr() : nullptr, dgamma.f32(),
                             partials.f32(), nullptr, "layer_scale gpu test");
  sync();
  return {y.get(), dx.get(), dgamma.get()};
}

TEST(LayerScaleGpu, KernelsMatchTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  // Channels a multiple of 16 bytes and not; three channels; ConvNeXt's first stage at 56x56;
  // rows past the 512 chunks' cap (137 rows each, the last chunk empty); one row of 768.
  const std::vector<Extents> extents = {{111, 70}, {3 * 49, 64}, {5, 3}, {2 * 3136, 96}, {70000, 8}, {1, 768}};
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const Extents& e : extents)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        const std::string what = label(dt, e, offset);
        SCOPED_TRACE(what);
        const size_t n = size_t(e.elements());
        const std::vector<double> x = random_values<double>(dt, n, rng), dy = random_values<double>(dt, n, rng),
                                  gamma = random_values<double>(DType::F32, size_t(e.c), rng);
        const Reference want = layer_scale_test::reference(e, x, gamma, dy);
        DeviceTensor dx_in(dt, x, offset), ddy(dt, dy, offset), dgamma_in(DType::F32, gamma);
        for (bool want_dx : {true, false}) {
          const DeviceRun got = run_kernels(dt, e, dx_in, dgamma_in, ddy, want_dx, offset);
          expect_products("y", got.y, want.y, dt);
          if (want_dx) {
            expect_products("dx", got.dx, want.dx, dt);
          } else {
            for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(got.dx[i])) << "dx written at " << i;
          }
          const layer_scale_test::Misses m = dgamma_misses(got.dgamma, want.dgamma, want, e);
          ASSERT_EQ(m.count, 0) << "dgamma off at " << m.first << ": got " << got.dgamma[size_t(m.first)] << ", want "
                                << want.dgamma[size_t(m.first)];
          // The same kernels again give the same bits (their order of additions is fixed).
          ASSERT_EQ(run_kernels(dt, e, dx_in, dgamma_in, ddy, want_dx, offset).dgamma, got.dgamma)
              << "dgamma differs between runs";
        }
      }
}

// The checks catch wrong results: dgamma missing a row is outside its bound in every dtype; and for
// fp16 and bf16 the bit-for-bit product check is stricter than fp32 math rounded to them (the
// fp32 product rounded again differs from one rounding at some of these elements), so a kernel
// that rounded twice would fail it.
TEST(LayerScaleGpu, TheChecksCatchWrongResults) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(32);
  const Extents e{3 * 49, 64};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(name(dt));
    const size_t n = size_t(e.elements());
    const std::vector<double> x = random_values<double>(dt, n, rng), dy = random_values<double>(dt, n, rng),
                              gamma = random_values<double>(DType::F32, size_t(e.c), rng);
    DeviceTensor dx_in(dt, x), ddy(dt, dy), dgamma_in(DType::F32, gamma);
    const DeviceRun got = run_kernels(dt, e, dx_in, dgamma_in, ddy, true, 0);
    const Reference right = layer_scale_test::reference(e, x, gamma, dy);
    EXPECT_EQ(dgamma_misses(got.dgamma, right.dgamma, right, e).count, 0);
    std::vector<double> short_dy = dy;
    for (int64_t k = 0; k < e.c; ++k) short_dy[size_t((e.rows - 1) * e.c + k)] = 0;
    const Reference wrong = layer_scale_test::reference(e, x, gamma, short_dy);
    EXPECT_GT(dgamma_misses(got.dgamma, wrong.dgamma, right, e).count, e.c / 2);
  }
  for (DType dt : {DType::F16, DType::BF16}) {
    const size_t n = 1 << 20;
    const std::vector<double> x = random_values<double>(dt, n, rng), g = random_values<double>(DType::F32, n, rng);
    int64_t twice_off = 0;
    for (size_t i = 0; i < n; ++i)
      twice_off += double(testing::round_to(dt, float(x[i] * g[i]))) != rounded_once(dt, x[i] * g[i]);
    EXPECT_GT(twice_off, 0) << name(dt) << ": rounding twice never differs here, the check would not see it";
  }
}

TEST(LayerScaleGpu, RefusesMissingPointersAndWideChannels) {
  KILN_REQUIRE_GPU();
  DeviceTensor x(DType::F32, 8), gamma(DType::F32, 8), y(DType::F32, 8), partials(DType::F32, 8);
  testing::expect_error(
      [&] {
        cuda::layer_scale_backward(DType::F32, cpu::LayerScaleGeom{1, 8}, x.ptr(), x.ptr(), gamma.f32(), nullptr,
                                   y.f32(), nullptr, nullptr, "t");
      },
      {"layer_scale_backward", "partials", "nullptr"});
  testing::expect_error(
      [&] {
        cuda::layer_scale_forward(DType::F32, cpu::LayerScaleGeom{1, int64_t{1} << 32}, x.ptr(), gamma.f32(), y.ptr(),
                                  nullptr, "t");
      },
      {"layer_scale_forward", "c = 4294967296"});
}

// --- Programs ---

// x (6 x 6 x 8) -> layer_scale "features.1.0" -> y, no loss, the input's gradient kept.
Blueprint block_scale() {
  Blueprint m("block_scale");
  m.input(6, 6, 8).layer_scale(1e-6f, "features.1.0");
  return m;
}

TEST(LayerScaleGpu, ProgramForwardBackwardAndInference) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    CompileOptions o;
    o.device = Device::CUDA, o.precision = precision, o.batch = 3, o.loss = false, o.input_grad = true;
    Executable exe(compile(block_scale(), o), 1);
    const Program& p = exe.program();
    const int param = exe.id("features.1.0.layer_scale");
    ASSERT_EQ(p.tensors[size_t(param)].shape, (Shape{8, 1, 1}));
    EXPECT_EQ(exe.read<float>(param), std::vector<float>(8, 1e-6f));  // the fp32 master, as initialized
    std::mt19937 rng(33);
    const Extents e{3 * 36, 8};
    const size_t n = size_t(e.elements());
    const std::vector<double> gamma = random_values<double>(DType::F32, 8, rng);
    const std::vector<double> x = random_values<double>(dt, n, rng), dy = random_values<double>(dt, n, rng);
    testing::write_floats(exe, param, testing::cast<float>(gamma));
    testing::write_floats(exe, p.input, testing::cast<float>(x));
    testing::write_floats(exe, p.output_grad, testing::cast<float>(dy));
    const StepScalars s{0.f, 0, 1};
    exe.run_forward(s);
    const std::vector<float> y = testing::read_floats(exe, p.tensors[size_t(p.logits)].name);
    exe.run_backward(s);
    const std::vector<float> dx = testing::read_floats(exe, p.tensors[size_t(p.input_grad)].name);
    const std::vector<double> dgamma = exe.gradient("features.1.0.layer_scale");
    const Reference want = layer_scale_test::reference(e, x, gamma, dy);
    expect_products("y", testing::cast<double>(y), want.y, dt);
    expect_products("d(input)", testing::cast<double>(dx), want.dx, dt);
    const layer_scale_test::Misses m = dgamma_misses(dgamma, want.dgamma, want, e);
    EXPECT_EQ(m.count, 0) << "dgamma off at " << m.first;
    // Inference three times on new data: op by op, captured, then replayed from the CUDA Graph.
    for (int run = 0; run < 3; ++run) {
      const std::vector<double> xi = random_values<double>(dt, n, rng);
      testing::write_floats(exe, p.input, testing::cast<float>(xi));
      exe.run_inference(s);
      const std::vector<float> yi = testing::read_floats(exe, p.tensors[size_t(p.inference_logits)].name);
      expect_products("inference y, run " + std::to_string(run), testing::cast<double>(yi),
                      layer_scale_test::reference(e, xi, gamma, dy).y, dt);
    }
  }
}

// A training step through a ConvNeXt-style scale: conv 1x1 -> layer_scale -> classifier. At
// learning rate 0 the weights stay; steps on batches A, B and A again (the third replayed from the
// graph the second captured) must give A's gradients, not B's: a replay that skipped or froze the
// scale's sums would not.
Blueprint scaled_classifier() {
  Blueprint m("scaled_classifier");
  m.input(6, 6, 8).conv(16, 1, 1, 0, true, "block.pwconv");
  m.layer_scale(0.5f, "block").flatten("flat").fc(4, true, "head");
  return m;
}

TEST(LayerScaleGpu, ReplayedTrainingStepGivesTheSameGradients) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    const testing::ReplayedStep step = testing::replayed_step(scaled_classifier(), precision,
                                                              {"block.layer_scale", "block.pwconv.weight", "block.pwconv.bias"}, 34);
    EXPECT_LT(step.replay, tolerance(dt)) << "the replayed step's gradients are not batch A's";
    EXPECT_GT(step.other_batch, 10 * tolerance(dt)) << "batches A and B give alike gradients";
  }
}

}  // namespace
}  // namespace kiln
