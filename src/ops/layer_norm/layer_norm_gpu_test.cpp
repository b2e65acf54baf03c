// The layer norm on the GPU: the kernels against the host's float64 reference
// (layer_norm_test_reference.h) for F32, F16 and BF16 activations with fp32 parameters and
// statistics, rows of every team width (short rows sharing a warp, a warp per row, rows too wide for
// registers), aligned and not, within the rounding bounds and the same bits on every run, with
// bounds shown to catch plausible mistakes; and CUDA programs against the CPU's fp64 program with
// the same weights, forward, backward and inference (captured and replayed), and a training step
// replayed from a CUDA Graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/layer_norm/layer_norm_cuda.h"
#include "ops/layer_norm/layer_norm_test_reference.h"
#include "ops/layer_norm/layer_norm_tiles.h"
#include "support/cbr_block.h"
#include "support/gpu_test_util.h"
#include "support/replayed_step.h"

namespace kiln {
namespace {

using namespace gpu_test;
using layer_norm_test::Extents;
using layer_norm_test::Misses;
using layer_norm_test::outside_bound;

constexpr double kFp32Unit = 0x1p-24;  // the kernels' arithmetic
constexpr float kEps = 1e-6f;

// Unit roundoff of a stored activation, and half the spacing of its subnormals (a result below the
// smallest normal is rounded to that spacing, which a relative bound misses: fp16's start at 2^-14).
double unit_of(DType dt) { return dt == DType::F16 ? 0x1p-11 : dt == DType::BF16 ? 0x1p-8 : kFp32Unit; }
double subnormal_floor(DType dt) { return dt == DType::F16 ? 0x1p-25 : dt == DType::BF16 ? 0x1p-134 : 0x1p-150; }

struct Case {
  int64_t rows, c;
  size_t offset;  // elements: 1 misaligns every activation pointer (the one-element groups)
};

std::string label(DType dt, const Case& k) {
  return std::string(name(dt)) + " rows=" + std::to_string(k.rows) + " c=" + std::to_string(k.c) +
         " offset=" + std::to_string(k.offset);
}

struct HostInputs {
  std::vector<double> x, w, b, dy;
};

// x: rows around means of their own (so that centering matters), rounded to dt; the fp32 weight
// around 1 and bias around 0; dy rounded to dt.
HostInputs host_inputs(DType dt, const Extents& e, std::mt19937& rng) {
  HostInputs in;
  in.x = random_values<double>(dt, size_t(e.elements()), rng);
  for (int64_t r = 0; r < e.rows; ++r)
    for (int64_t k = 0; k < e.c; ++k) {
      double& v = in.x[size_t(r * e.c + k)];
      v = round_to(dt, float(v + double(r % 7) - 2.5));
    }
  in.w = random_values<double>(DType::F32, size_t(e.c), rng, 1.0, 0.5);
  in.b = random_values<double>(DType::F32, size_t(e.c), rng, 0.0, 0.5);
  in.dy = random_values<double>(dt, size_t(e.elements()), rng);
  return in;
}

void expect_untouched(const std::string& what, const std::vector<double>& got) {
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(std::isnan(got[i])) << what << " written at " << i;
}

void expect_within(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& scale, double store, double floor = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Misses m = outside_bound(got, want, scale, store, kFp32Unit, floor);
  ASSERT_EQ(m.count, 0) << what << " off at " << m.first << " (" << m.count << " misses): got "
                        << got[size_t(m.first)] << ", want " << want[size_t(m.first)];
}

// The device's forward: y, and the statistics where asked for.
struct DeviceForward {
  std::vector<double> y, mean, rstd;
};
DeviceForward device_forward(DType dt, const Extents& e, size_t offset, const HostInputs& in, bool save) {
  const cpu::LayerNormGeom g{e.rows, e.c};
  DeviceTensor x(dt, in.x, offset), w(DType::F32, in.w), b(DType::F32, in.b);
  DeviceTensor y = DeviceTensor::poisoned(dt, size_t(e.elements()), offset);
  DeviceTensor mean = DeviceTensor::poisoned(DType::F32, size_t(e.rows)), rstd = DeviceTensor::poisoned(DType::F32, size_t(e.rows));
  cuda::layer_norm_forward(dt, g, x.ptr(), w.f32(), b.f32(), kEps, y.ptr(), save ? mean.f32() : nullptr,
                           save ? rstd.f32() : nullptr, nullptr, "layer_norm gpu test");
  sync();
  return {y.get(), mean.get(), rstd.get()};
}

// The device's backward from the given statistics, writing what is asked for.
struct DeviceBackward {
  std::vector<double> dx, dweight, dbias;
};
DeviceBackward device_backward(DType dt, const Extents& e, size_t offset, const HostInputs& in,
                               const std::vector<double>& mean, const std::vector<double>& rstd, bool want_dx,
                               bool want_params) {
  const cpu::LayerNormGeom g{e.rows, e.c};
  DeviceTensor x(dt, in.x, offset), dy(dt, in.dy, offset), w(DType::F32, in.w);
  DeviceTensor m(DType::F32, mean), s(DType::F32, rstd);
  DeviceTensor dx = DeviceTensor::poisoned(dt, size_t(e.elements()), offset);
  DeviceTensor dw = DeviceTensor::poisoned(DType::F32, size_t(e.c)), db = DeviceTensor::poisoned(DType::F32, size_t(e.c));
  DeviceTensor partials = DeviceTensor::poisoned(DType::F32, size_t(layer_norm_tiles::partial_elements(e.rows, e.c)));
  cuda::layer_norm_backward(dt, g, dy.ptr(), x.ptr(), w.f32(), m.f32(), s.f32(), want_dx ? dx.ptr() : nullptr,
                            want_params ? dw.f32() : nullptr, want_params ? db.f32() : nullptr, partials.f32(),
                            nullptr, "layer_norm gpu test");
  sync();
  return {dx.get(), dw.get(), db.get()};
}

TEST(LayerNormGpu, KernelsMatchTheHost) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  // One channel; teams of 2..16 lanes sharing a warp (c = 8, 16 in fp32); odd channels (one-element
  // groups); ConvNeXt's 96 and 768; registers full (1024); rows too wide for registers (2500, and
  // 768 misaligned); many rows in many tiles and grid strides.
  const std::vector<Case> cases = {{5, 1, 0},     {37, 16, 0},     {37, 16, 1},  {37, 70, 0},   {1000, 96, 0},
                                   {1000, 96, 1}, {300, 768, 0},   {300, 768, 1}, {33, 1024, 0}, {64, 2500, 0},
                                   {70000, 8, 0}, {100000, 96, 0}};
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const Case& k : cases) {
      const std::string what = label(dt, k);
      SCOPED_TRACE(what);
      const Extents e{k.rows, k.c};
      const HostInputs in = host_inputs(dt, e, rng);
      const layer_norm_test::Forward want = layer_norm_test::forward(e, in.x, in.w, in.b, double(kEps));
      const DeviceForward f = device_forward(dt, e, k.offset, in, true);
      expect_within("y", f.y, want.y, want.y_scale, unit_of(dt), subnormal_floor(dt));
      expect_within("mean", f.mean, want.mean, want.mean_scale, 0.0);
      expect_within("rstd", f.rstd, want.rstd, want.rstd_scale, 0.0);
      const DeviceForward inference = device_forward(dt, e, k.offset, in, false);
      ASSERT_EQ(inference.y, f.y) << "the forward without statistics differs";
      expect_untouched("mean (inference)", inference.mean);
      const layer_norm_test::Backward bw = layer_norm_test::backward(e, in.dy, in.x, in.w, f.mean, f.rstd);
      for (int variant = 0; variant < 3; ++variant) {  // everything, dx alone, the parameters alone
        const bool want_dx = variant != 2, want_params = variant != 1;
        const DeviceBackward got = device_backward(dt, e, k.offset, in, f.mean, f.rstd, want_dx, want_params);
        if (want_dx)
          expect_within("dx", got.dx, bw.dx, bw.dx_scale, unit_of(dt), subnormal_floor(dt));
        else
          expect_untouched("dx", got.dx);
        if (!want_params) {
          expect_untouched("dweight", got.dweight);
          expect_untouched("dbias", got.dbias);
          continue;
        }
        expect_within("dweight", got.dweight, bw.dweight, bw.dweight_scale, 0.0);
        expect_within("dbias", got.dbias, bw.dbias, bw.dbias_scale, 0.0);
        // The same kernels again give the same bits (every order of additions is fixed).
        const DeviceBackward again = device_backward(dt, e, k.offset, in, f.mean, f.rstd, want_dx, want_params);
        // (dx left unwritten holds the poison, NaN, which equals nothing: compared where written.)
        if (want_dx) {
          ASSERT_EQ(again.dx, got.dx) << "dx differs between runs";
        }
        ASSERT_EQ(again.dweight, got.dweight) << "dweight differs between runs";
        ASSERT_EQ(again.dbias, got.dbias) << "dbias differs between runs";
      }
    }
}

// The bounds in every dtype catch plausible mistakes: the unbiased variance, dx without its xhat
// term, parameter sums missing a row (more than half of the results concerned miss).
TEST(LayerNormGpu, TheBoundsCatchMistakes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(32);
  const Extents e{500, 16};
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    SCOPED_TRACE(name(dt));
    const HostInputs in = host_inputs(dt, e, rng);
    const DeviceForward f = device_forward(dt, e, 0, in, true);
    const DeviceBackward got = device_backward(dt, e, 0, in, f.mean, f.rstd, true, true);
    auto misses = [&](const std::vector<double>& values, const std::vector<double>& want,
                      const std::vector<double>& scale, double store) {
      return outside_bound(values, want, scale, store, kFp32Unit, subnormal_floor(dt)).count;
    };
    const layer_norm_test::Forward right = layer_norm_test::forward(e, in.x, in.w, in.b, double(kEps));
    const layer_norm_test::Forward unbiased = layer_norm_test::forward(e, in.x, in.w, in.b, double(kEps), 15.0);
    EXPECT_EQ(misses(f.y, right.y, right.y_scale, unit_of(dt)), 0);
    EXPECT_GT(misses(f.y, unbiased.y, right.y_scale, unit_of(dt)), e.elements() / 2) << "the unbiased variance";
    const layer_norm_test::Backward bw = layer_norm_test::backward(e, in.dy, in.x, in.w, f.mean, f.rstd);
    const layer_norm_test::Backward flat = layer_norm_test::backward(e, in.dy, in.x, in.w, f.mean, f.rstd, false);
    EXPECT_EQ(misses(got.dx, bw.dx, bw.dx_scale, unit_of(dt)), 0);
    EXPECT_GT(misses(got.dx, flat.dx, bw.dx_scale, unit_of(dt)), e.elements() / 2) << "dx without the xhat term";
    std::vector<double> short_dy = in.dy;
    for (int64_t k = 0; k < e.c; ++k) short_dy[size_t((e.rows - 1) * e.c + k)] = 0;
    const layer_norm_test::Backward missing = layer_norm_test::backward(e, short_dy, in.x, in.w, f.mean, f.rstd);
    EXPECT_GT(misses(got.dweight, missing.dweight, bw.dweight_scale, 0.0), e.c / 2) << "dweight missing a row";
    EXPECT_GT(misses(got.dbias, missing.dbias, bw.dbias_scale, 0.0), e.c / 2) << "dbias missing a row";
  }
}

TEST(LayerNormGpu, RefusesBadArguments) {
  KILN_REQUIRE_GPU();
  DeviceTensor x(DType::F32, 8), w(DType::F32, 8), b(DType::F32, 8), y(DType::F32, 8), s(DType::F32, 1);
  testing::expect_error(
      [&] {
        cuda::layer_norm_forward(DType::F32, cpu::LayerNormGeom{8, 0}, x.ptr(), w.f32(), b.f32(), kEps, y.ptr(),
                                 nullptr, nullptr, nullptr, "t");
      },
      {"layer_norm_forward", "c = 0"});
  testing::expect_error(
      [&] {
        cuda::layer_norm_forward(DType::F32, cpu::LayerNormGeom{1, 8}, x.ptr(), w.f32(), b.f32(), kEps, y.ptr(),
                                 s.f32(), nullptr, nullptr, "t");
      },
      {"both statistics or neither"});
  testing::expect_error(
      [&] {
        cuda::layer_norm_backward(DType::F32, cpu::LayerNormGeom{1, 8}, y.ptr(), x.ptr(), w.f32(), s.f32(), s.f32(),
                                  nullptr, b.f32(), nullptr, nullptr, nullptr, "t");
      },
      {"workspace", "nullptr"});
}

// --- Programs ---

// ConvNeXt's pattern and a flat one: a biased 3x3 convolution to 32 channels, LayerNorm over each
// position's channels (eps 1e-6), a linear layer at every position, then the flattened features
// normalized as rows (eps 1e-5) before the head.
Blueprint normalized() {
  Blueprint m("normalized");
  m.input(6, 6, 8).conv(32, 3, 1, 1, true, "stem").layer_norm(1e-6f, "ln").fc(16, true, "pw").gelu(false, "act");
  m.flatten("flat").layer_norm(1e-5f, "ln_rows").fc(4, true, "head");
  return m;
}

struct Values {
  std::vector<double> y, dx;
  std::map<std::string, std::vector<double>> grads;
};

void write_values(Executable& exe, int id, const std::vector<double>& v) {
  if (exe.program().tensors[size_t(id)].dtype == DType::F64)
    exe.write(id, v.data(), v.size() * sizeof(double));
  else
    testing::write_floats(exe, id, testing::cast<float>(v));
}
std::vector<double> read_values(Executable& exe, int id) {
  if (exe.program().tensors[size_t(id)].dtype == DType::F64) return exe.read<double>(id);
  return testing::cast<double>(testing::read_floats(exe, exe.program().tensors[size_t(id)].name));
}

Values forward_backward(Executable& exe, const std::vector<double>& x, const std::vector<double>& dy) {
  const Program& p = exe.program();
  write_values(exe, p.input, x);
  write_values(exe, p.output_grad, dy);
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  Values v;
  v.y = read_values(exe, p.logits);
  exe.run_backward(s);
  v.dx = read_values(exe, p.input_grad);
  for (int id : p.params) v.grads[p.tensors[size_t(id)].name] = exe.gradient(p.tensors[size_t(id)].name);
  return v;
}

std::vector<double> inference(Executable& exe, const std::vector<double>& x) {
  write_values(exe, exe.program().input, x);
  exe.run_inference({0.f, 0, 1});
  return read_values(exe, exe.program().inference_logits);
}

// The CUDA program in each precision against the CPU's fp64 program with the same weights (the
// layer norms' weight and bias moved off their ones and zeros; every parameter rounded to fp32 for
// both): logits, the input's gradient, every parameter's gradient and, run three times on new data
// (op by op, captured, replayed), inference, within the comparisons' relative L2 bounds. The bound
// catches a misread layer-norm weight: the fp64 program with ln's weight reversed lands far outside
// (its logits about 0.65 off in relative L2 on the CPU, against 5 x bf16's 3e-2).
TEST(LayerNormGpu, ProgramMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  CompileOptions cpu_options;
  cpu_options.precision = Precision::FP64, cpu_options.batch = 3, cpu_options.loss = false;
  cpu_options.input_grad = true;
  Executable reference(compile(normalized(), cpu_options), 7);
  std::mt19937 rng(33);
  std::map<std::string, std::vector<double>> weights;
  for (int id : reference.program().params) {
    const std::string& param = reference.program().tensors[size_t(id)].name;
    std::vector<double> v = reference.read<double>(id);
    if (param.rfind("ln", 0) == 0)
      v = random_values<double>(DType::F32, v.size(), rng, param.find(".weight") != std::string::npos ? 1.0 : 0.0, 0.5);
    weights[param] = testing::rounded(DType::F32, v);
    write_values(reference, id, weights[param]);
  }
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    CompileOptions o = cpu_options;
    o.device = Device::CUDA, o.precision = precision;
    Executable exe(compile(normalized(), o), 1);
    for (const auto& [param, v] : weights) write_values(exe, exe.id(param), v);
    const Program& p = exe.program();
    const std::vector<double> x = random_values<double>(dt, size_t(numel(p.tensors[p.input].shape)), rng);
    const std::vector<double> dy = random_values<double>(dt, size_t(numel(p.tensors[p.logits].shape)), rng);
    const Values got = forward_backward(exe, x, dy), want = forward_backward(reference, x, dy);
    const double tol = testing::tolerance(precision);
    testing::expect_close_to_reference("logits", got.y, want.y, tol);
    testing::expect_close_to_reference("d(input)", got.dx, want.dx, tol);
    for (const auto& [param, g] : want.grads) testing::expect_close_to_reference(param + "'s gradient", got.grads.at(param), g, tol);
    for (int run = 0; run < 3; ++run) {
      const std::vector<double> xi = random_values<double>(dt, x.size(), rng);
      testing::expect_close_to_reference("inference, run " + std::to_string(run), inference(exe, xi),
                                         inference(reference, xi), tol);
    }
    std::vector<double> reversed = weights.at("ln.weight");
    std::reverse(reversed.begin(), reversed.end());
    write_values(reference, reference.id("ln.weight"), reversed);
    const Values misread = forward_backward(reference, x, dy);
    write_values(reference, reference.id("ln.weight"), weights.at("ln.weight"));
    EXPECT_GT(testing::rel_l2(misread.y, want.y), 5 * tol) << "a reversed ln.weight moves the logits too little";
  }
}

// A training step at learning rate 0 on batches A, B and A again, the third replayed from the CUDA
// Graph the second captured: it must give A's gradients, not B's (a replay that skipped or froze
// the layer norm, or summed its parameter gradients into stale partials, would not).
TEST(LayerNormGpu, ReplayedTrainingStepGivesTheSameGradients) {
  KILN_REQUIRE_GPU();
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    const DType dt = testing::activation_dtype(precision);
    SCOPED_TRACE(name(dt));
    const testing::ReplayedStep step = testing::replayed_step(normalized(), precision,
                                                              {"stem.weight", "ln.weight", "ln.bias", "ln_rows.weight", "ln_rows.bias"}, 34);
    EXPECT_LT(step.replay, tolerance(dt)) << "the replayed step's gradients are not batch A's";
    EXPECT_GT(step.other_batch, 10 * tolerance(dt)) << "batches A and B give alike gradients";
  }
}

}  // namespace
}  // namespace kiln
