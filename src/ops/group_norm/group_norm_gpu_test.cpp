// The group_norm family on the GPU: the kernels against the host's float64 reference
// (group_norm_test_reference.h) for F32, F16 and BF16 activations, channel groups a multiple of 16
// bytes and not, aligned and not, one chunk of positions and many, flat features; every result
// within its rounding bound, the same bits on a second run, and the bounds shown to catch
// statistics over the wrong channels or missing a chunk. Then CUDA programs: forward, backward and
// inference (captured and replayed) against the reference, and a training step replayed from a
// CUDA Graph.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/group_norm/group_norm_cuda.h"
#include "ops/group_norm/group_norm_test_reference.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"
#include "support/replayed_step.h"

namespace kiln {
namespace {

using namespace gpu_test;
using group_norm_test::Bound;
using group_norm_test::Extents;
using group_norm_test::outside_bound;

constexpr double kFp32Unit = 0x1p-24;  // the kernels' arithmetic, and the fp32 results' store
constexpr float kEps = 1e-3f;

// Unit roundoff of a stored activation.
double unit_of(DType dt) { return dt == DType::F16 ? 0x1p-11 : dt == DType::BF16 ? 0x1p-8 : 0x1p-24; }

std::string label(DType dt, const Extents& e, size_t offset) {
  return std::string(name(dt)) + " n=" + std::to_string(e.n) + " hw=" + std::to_string(e.hw) + " c=" +
         std::to_string(e.c) + " groups=" + std::to_string(e.groups) + " offset=" + std::to_string(offset);
}

// Activations rounded to dt, each (sample, group) at an offset of its own (2 + the group) with a
// spread of its own: statistics over the wrong channels show, and the variance is of values away
// from zero. The weight and bias are fp32.
struct Inputs {
  std::vector<double> x, weight, bias, dy;
};

Inputs inputs(DType dt, const Extents& e, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> spread(0.5, 2.0);
  std::vector<double> scale(size_t(e.statistics()));
  for (double& s : scale) s = spread(rng);
  Inputs in;
  for (int64_t i = 0; i < e.elements(); ++i) {
    const int64_t img = i / (e.hw * e.c), ch = i % e.c, s = e.statistic(img, ch);
    in.x.push_back(double(round_to(dt, float(2.0 + double(s % e.groups) + scale[size_t(s)] * normal(rng)))));
  }
  for (int64_t ch = 0; ch < e.c; ++ch)
    in.weight.push_back(double(float(1 + 0.5 * normal(rng)))), in.bias.push_back(double(float(0.5 * normal(rng))));
  in.dy = random_values<double>(dt, size_t(e.elements()), rng);
  return in;
}

// One forward (saving the statistics) and one backward on the device.
struct DeviceRun {
  std::vector<double> y, mean, rstd, dx, dweight, dbias;
};

DeviceRun run(DType dt, const Extents& e, const Inputs& in, size_t offset, bool want_dx) {
  const GroupNormGeom g{e.n, e.hw, e.c, e.groups};
  const size_t map = size_t(e.elements()), stats = size_t(e.statistics()), c = size_t(e.c);
  DeviceTensor x(dt, in.x, offset), dy(dt, in.dy, offset), w(DType::F32, in.weight), b(DType::F32, in.bias);
  DeviceTensor y = DeviceTensor::poisoned(dt, map, offset), dx = DeviceTensor::poisoned(dt, map, offset);
  DeviceTensor mean = DeviceTensor::poisoned(DType::F32, stats), rstd = DeviceTensor::poisoned(DType::F32, stats);
  DeviceTensor dw = DeviceTensor::poisoned(DType::F32, c), db = DeviceTensor::poisoned(DType::F32, c);
  DeviceTensor workspace = DeviceTensor::poisoned(DType::F32, size_t(group_norm_gpu::workspace(g).floats));
  cuda::group_norm_forward(dt, g, x.ptr(), w.f32(), b.f32(), kEps, y.ptr(), mean.f32(), rstd.f32(), workspace.f32(),
                           nullptr, "group_norm gpu test");
  workspace.poison();  // the backward must not read what the forward left there
  cuda::group_norm_backward(dt, g, dy.ptr(), x.ptr(), w.f32(), mean.f32(), rstd.f32(), want_dx ? dx.ptr() : nullptr,
                            dw.f32(), db.f32(), workspace.f32(), nullptr, "group_norm gpu test");
  sync();
  return {y.get(), mean.get(), rstd.get(), want_dx ? dx.get() : std::vector<double>{}, dw.get(), db.get()};
}

// The y of a forward that saves no statistics.
std::vector<double> run_unsaved(DType dt, const Extents& e, const Inputs& in, size_t offset) {
  const GroupNormGeom g{e.n, e.hw, e.c, e.groups};
  DeviceTensor x(dt, in.x, offset), w(DType::F32, in.weight), b(DType::F32, in.bias);
  DeviceTensor y = DeviceTensor::poisoned(dt, size_t(e.elements()), offset);
  DeviceTensor workspace = DeviceTensor::poisoned(DType::F32, size_t(group_norm_gpu::workspace(g).floats));
  cuda::group_norm_forward(dt, g, x.ptr(), w.f32(), b.f32(), kEps, y.ptr(), nullptr, nullptr, workspace.f32(), nullptr,
                           "group_norm gpu test");
  sync();
  return y.get();
}

void expect_within(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                   const Bound& bound, double store, int ops) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const group_norm_test::Misses m = outside_bound(got, want, bound, store, kFp32Unit, ops);
  EXPECT_EQ(m.count, 0) << what << " off at " << m.first << ": got " << (m.count ? got[size_t(m.first)] : 0.0)
                        << ", want " << (m.count ? want[size_t(m.first)] : 0.0);
}

// Groups of 5 channels (one channel at a time); groups of 8 over 300 positions (16-byte groups
// for fp16/bf16, two of them for fp32, in 5 chunks); flat features; one group of 32 channels over
// 3136 positions (49 chunks); a group a channel; more samples than a grid's 65535 rows.
const std::vector<Extents> kExtents = {{3, 37, 10, 2},  {2, 300, 64, 8},  {4, 1, 48, 3},
                                       {2, 3136, 32, 1}, {1, 49, 16, 16}, {70000, 1, 8, 2}};

TEST(GroupNormGpu, KernelsMatchTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const Extents& e : kExtents)
      for (size_t offset : {size_t{0}, size_t{1}}) {
        const std::string what = label(dt, e, offset);
        SCOPED_TRACE(what);
        const Inputs in = inputs(dt, e, rng);
        const DeviceRun got = run(dt, e, in, offset, true);
        const group_norm_test::Forward f = group_norm_test::forward(e, in.x, in.weight, in.bias, kEps);
        expect_within("y", got.y, f.y, f.y_bound, unit_of(dt), 4);
        expect_within("mean", got.mean, f.mean, f.mean_bound, kFp32Unit, 1);
        expect_within("rstd", got.rstd, f.rstd, f.rstd_bound, kFp32Unit, 3);
        // The backward from the statistics as the device saved them.
        const group_norm_test::Backward b = group_norm_test::backward(e, in.x, in.dy, in.weight, got.mean, got.rstd);
        expect_within("dx", got.dx, b.dx, b.dx_bound, unit_of(dt), 8);
        expect_within("dweight", got.dweight, b.dweight, b.dweight_bound, kFp32Unit, 3);
        expect_within("dbias", got.dbias, b.dbias, b.dbias_bound, kFp32Unit, 0);
        // Every sum's order is fixed: the same bits again, without dx the same parameter gradients,
        // without saved statistics the same y.
        const DeviceRun again = run(dt, e, in, offset, false);
        ASSERT_EQ(again.y, got.y);
        ASSERT_EQ(again.mean, got.mean);
        ASSERT_EQ(again.rstd, got.rstd);
        ASSERT_EQ(again.dweight, got.dweight);
        ASSERT_EQ(again.dbias, got.dbias);
        ASSERT_EQ(run_unsaved(dt, e, in, offset), got.y);
      }
}

// The bounds in each dtype are tight enough to catch a normalization over the wrong channels (one
// group for the 8), and a mean and parameter gradients missing the last chunk of positions (44 of
// 300).
TEST(GroupNormGpu, TheBoundsCatchWrongStatisticsAndAMissingChunk) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(32);
  const Extents e{2, 300, 64, 8};
  ASSERT_EQ(group_norm_gpu::chunks({e.n, e.hw, e.c, e.groups}).count, 5);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(name(dt));
    const Inputs in = inputs(dt, e, rng);
    const DeviceRun got = run(dt, e, in, 0, true);
    const group_norm_test::Forward right = group_norm_test::forward(e, in.x, in.weight, in.bias, kEps);
    const group_norm_test::Backward grads = group_norm_test::backward(e, in.x, in.dy, in.weight, got.mean, got.rstd);
    EXPECT_EQ(outside_bound(got.y, right.y, right.y_bound, unit_of(dt), kFp32Unit, 4).count, 0);
    EXPECT_EQ(outside_bound(got.mean, right.mean, right.mean_bound, kFp32Unit, kFp32Unit, 1).count, 0);
    EXPECT_EQ(outside_bound(got.rstd, right.rstd, right.rstd_bound, kFp32Unit, kFp32Unit, 3).count, 0);
    EXPECT_EQ(outside_bound(got.dx, grads.dx, grads.dx_bound, unit_of(dt), kFp32Unit, 8).count, 0);
    EXPECT_EQ(outside_bound(got.dweight, grads.dweight, grads.dweight_bound, kFp32Unit, kFp32Unit, 3).count, 0);
    EXPECT_EQ(outside_bound(got.dbias, grads.dbias, grads.dbias_bound, kFp32Unit, kFp32Unit, 0).count, 0);

    // y and dx normalized with one group's statistics: a dx of the missing chunk's size (its means of
    // g and g * xhat off by about 1%) would hide below bf16's rounding in many elements.
    const Extents merged{e.n, e.hw, e.c, 1};
    const group_norm_test::Forward one_group = group_norm_test::forward(merged, in.x, in.weight, in.bias, kEps);
    const group_norm_test::Backward one_group_grads =
        group_norm_test::backward(merged, in.x, in.dy, in.weight, one_group.mean, one_group.rstd);
    EXPECT_GT(outside_bound(got.y, one_group.y, right.y_bound, unit_of(dt), kFp32Unit, 4).count, e.elements() / 2);
    EXPECT_GT(outside_bound(got.dx, one_group_grads.dx, grads.dx_bound, unit_of(dt), kFp32Unit, 8).count,
              e.elements() / 2);
    // rstd's bound allows for variances of values far from zero (these groups sit up to 9 from it),
    // so it is held to the sample's rstd rather than to a chunk's difference.
    std::vector<double> sample_rstd;
    for (int64_t s = 0; s < e.statistics(); ++s) sample_rstd.push_back(one_group.rstd[size_t(s / e.groups)]);
    EXPECT_GT(outside_bound(got.rstd, sample_rstd, right.rstd_bound, kFp32Unit, kFp32Unit, 3).count, e.statistics() / 2);

    const Extents shorter{e.n, 256, e.c, e.groups};
    Inputs cut = in;
    cut.x.clear(), cut.dy.clear();
    for (int64_t img = 0; img < e.n; ++img)
      for (int64_t p = 0; p < shorter.hw; ++p)
        for (int64_t ch = 0; ch < e.c; ++ch) cut.x.push_back(in.x[e.at(img, p, ch)]), cut.dy.push_back(in.dy[e.at(img, p, ch)]);
    const group_norm_test::Forward short_stats = group_norm_test::forward(shorter, cut.x, in.weight, in.bias, kEps);
    const group_norm_test::Backward short_grads =
        group_norm_test::backward(shorter, cut.x, cut.dy, in.weight, got.mean, got.rstd);
    EXPECT_GT(outside_bound(got.mean, short_stats.mean, right.mean_bound, kFp32Unit, kFp32Unit, 1).count,
              e.statistics() / 2);
    EXPECT_GT(outside_bound(got.dweight, short_grads.dweight, grads.dweight_bound, kFp32Unit, kFp32Unit, 3).count,
              e.c / 2);
    EXPECT_GT(outside_bound(got.dbias, short_grads.dbias, grads.dbias_bound, kFp32Unit, kFp32Unit, 0).count, e.c / 2);
  }
}

TEST(GroupNormGpu, RefusesExtentsItCannotNormalize) {
  KILN_REQUIRE_GPU();
  DeviceTensor x(DType::F32, 12), w(DType::F32, 12), y(DType::F32, 12), ws(DType::F32, 1024);
  testing::expect_error(
      [&] {
        cuda::group_norm_forward(DType::F32, GroupNormGeom{1, 1, 12, 5}, x.ptr(), w.f32(), w.f32(), kEps, y.ptr(),
                                 nullptr, nullptr, ws.f32(), nullptr, "t");
      },
      {"group_norm_forward", "groups = 5", "groups dividing c"});
}

// --- Programs ---

// A group norm on the input (6 x 5 x 16 in 4 groups), its weight and bias drawn at random.
Blueprint on_input() {
  Blueprint m("on_input");
  m.input(6, 5, 16).group_norm(4, kEps, "gn");
  return m;
}

TEST(GroupNormGpu, ProgramForwardBackwardAndInference) {
  KILN_REQUIRE_GPU();
  const Extents e{3, 30, 16, 4};
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    CompileOptions o;
    o.device = Device::CUDA, o.precision = precision, o.batch = 3, o.loss = false, o.input_grad = true;
    Executable exe(compile(on_input(), o), 1);
    const Program& p = exe.program();
    std::mt19937 rng(33);
    const Inputs in = inputs(dt, e, rng);
    testing::write_floats(exe, p.input, testing::cast<float>(in.x));
    testing::write_floats(exe, p.output_grad, testing::cast<float>(in.dy));
    testing::write_floats(exe, exe.id("gn.weight"), testing::cast<float>(in.weight));
    testing::write_floats(exe, exe.id("gn.bias"), testing::cast<float>(in.bias));
    const StepScalars s{0.f, 0, 1};
    exe.run_forward(s);
    const std::vector<float> y = testing::read_floats(exe, p.tensors[p.logits].name);
    exe.run_backward(s);
    const std::vector<float> dx = testing::read_floats(exe, p.tensors[p.input_grad].name);
    const group_norm_test::Forward f = group_norm_test::forward(e, in.x, in.weight, in.bias, kEps);
    const group_norm_test::Backward b = group_norm_test::backward(e, in.x, in.dy, in.weight, f.mean, f.rstd);
    testing::expect_close_to_reference("y", y, f.y, tolerance(dt));
    testing::expect_close_to_reference("d(input)", dx, b.dx, tolerance(dt));
    testing::expect_close_to_reference("gn.weight's gradient", exe.gradient("gn.weight"), b.dweight, tolerance(dt));
    testing::expect_close_to_reference("gn.bias's gradient", exe.gradient("gn.bias"), b.dbias, tolerance(dt));
    // Inference three times on new data: op by op, captured, then replayed from the CUDA Graph.
    for (int r = 0; r < 3; ++r) {
      const Inputs other = inputs(dt, e, rng);
      testing::write_floats(exe, p.input, testing::cast<float>(other.x));
      exe.run_inference(s);
      const std::vector<float> yi = testing::read_floats(exe, p.tensors[p.inference_logits].name);
      testing::expect_close_to_reference("inference y, run " + std::to_string(r), yi,
                                         group_norm_test::forward(e, other.x, in.weight, in.bias, kEps).y, tolerance(dt));
    }
  }
}

// A training step through conv -> group norm -> ReLU -> classifier at learning rate 0: steps on
// batches A, B and A again (the third replayed from the graph the second captured) must give A's
// gradients, not B's: a replay that skipped or froze the normalization would not.
Blueprint classifier() {
  Blueprint m("classifier");
  m.input(6, 6, 8).conv(16, 3, 1, 1, false, "c").group_norm(4, 1e-5f, "gn").relu("relu");
  m.flatten("flat").fc(4, true, "head");
  return m;
}

TEST(GroupNormGpu, ReplayedTrainingStepGivesTheSameGradients) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    const testing::ReplayedStep step = testing::replayed_step(classifier(), precision,
                                                              {"c.weight", "gn.weight", "gn.bias"}, 34);
    EXPECT_LT(step.replay, tolerance(dt)) << "the replayed step's gradients are not batch A's";
    EXPECT_GT(step.other_batch, 10 * tolerance(dt)) << "batches A and B give alike gradients";
  }
}

}  // namespace
}  // namespace kiln
