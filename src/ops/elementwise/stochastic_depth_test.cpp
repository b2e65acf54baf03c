// Stochastic depth (torchvision's StochasticDepth, mode "row"): the CPU kernels and a compiled
// program against float64 loops written here. The mask keeps about 1 - p of the samples, drawn as
// dropout draws (the step's seed, the layer's key, counter-based: the same for the same seed and
// step, another for another); given the mask, y and dx are x and dy times mask[n] / (1 - p); in
// inference, and with p = 0 in training, the layer is the identity and emits no op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/torch/torch_layouts.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/elementwise/elementwise_contract.h"
#include "ops/elementwise/stochastic_depth_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::uniform_vec;
using testing::Vec;

// The reference's own draw: sample r is kept when random_uniform(seed, stream, r) >= p, the stream
// being mix64(key * 1000003 + step) (dropout's, elementwise_cpu.h) and the key FNV-1a of the layer's
// name, written out here.
uint32_t fnv1a(const std::string& name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return h;
}
Bytes expected_mask(int64_t rows, float p, uint64_t seed, uint64_t stream) {
  Bytes m(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) m[size_t(r)] = random_uniform(seed, stream, uint64_t(r)) >= p;
  return m;
}
uint64_t layer_stream(const std::string& layer, int64_t step) {
  return mix64(uint64_t(fnv1a(layer)) * 1000003ULL + uint64_t(step));
}

// mask[r] ? v / (1 - p) : 0 over each row, in float64 (p as the float the layer holds).
Vec reference(const Vec& v, const Bytes& mask, float p) {
  const size_t row = v.size() / mask.size();
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = mask[i / row] ? v[i] / (1.0 - double(p)) : 0.0;
  return out;
}

// max |got - want| / |want| (where want is 0, got must be 0 exactly).
template <class T>
double max_relative_gap(const std::vector<T>& got, const Vec& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(double(got[i]) - want[i]);
    const double e = want[i] == 0 ? (d == 0 ? 0 : INFINITY) : d / std::abs(want[i]);
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

// Bounds: float64 1 / (1 - p) and the product each round by 2^-53 (2^-51 leaves room); float32
// by 2^-24 each (2^-22).
const double kF64Bound = std::ldexp(1.0, -51), kF32Bound = std::ldexp(1.0, -22);

int kept(const Bytes& mask) { return int(std::count(mask.begin(), mask.end(), uint8_t{1})); }

TEST(StochasticDepthCpu, MaskKeepsAboutOneMinusPOfTheSamplesAsDropoutDraws) {
  const int64_t rows = 200000;
  for (float p : {0.1f, 0.3f, 0.7f}) {
    const uint64_t seed = 42, stream = cpu::dropout_stream(5, 17);
    const Vec x = uniform_vec(7, size_t(rows) * 2);
    Vec y(x.size());
    Bytes mask(size_t(rows), 7);
    cpu::stochastic_depth_forward<double>(x.data(), rows, 2, p, seed, stream, y.data(), mask.data());
    EXPECT_EQ(mask, expected_mask(rows, p, seed, stream)) << "p " << p;
    // 200,000 draws: the kept fraction's standard deviation is at most 0.0011.
    EXPECT_NEAR(double(kept(mask)) / double(rows), 1.0 - p, 0.01) << "p " << p;
    // Dropout over `rows` elements with the same seed and stream keeps the same indices.
    Vec xd(size_t(rows), 1.0), yd(static_cast<size_t>(rows));
    Bytes dropout_mask(static_cast<size_t>(rows));
    cpu::dropout_forward<double>(xd.data(), rows, p, seed, stream, yd.data(), dropout_mask.data());
    EXPECT_EQ(mask, dropout_mask) << "p " << p;
  }
}

TEST(StochasticDepthCpu, SameSeedAndStepSameMaskAnotherSeedOrStepAnother) {
  const int64_t rows = 4096, row = 3;
  const Vec x = uniform_vec(8, size_t(rows * row));
  auto draw = [&](uint64_t seed, uint64_t stream, int threads) {
    kiln::testing::ScopedThreads pool(threads);
    Vec y(x.size());
    Bytes mask(static_cast<size_t>(rows));
    cpu::stochastic_depth_forward<double>(x.data(), rows, row, 0.5f, seed, stream, y.data(), mask.data());
    return mask;
  };
  const Bytes a = draw(9, cpu::dropout_stream(2, 0), 1);
  EXPECT_EQ(draw(9, cpu::dropout_stream(2, 0), 3), a);  // the thread count changes nothing
  EXPECT_NE(draw(10, cpu::dropout_stream(2, 0), 1), a);  // another seed
  EXPECT_NE(draw(9, cpu::dropout_stream(2, 1), 1), a);   // another step
  EXPECT_NE(draw(9, cpu::dropout_stream(3, 0), 1), a);   // another layer
}

// y and dx given the mask, in float64 and float32, against the loops above; samples of 60
// elements, a few kept and a few dropped. A reference without the 1 / (1 - p) and one with
// another step's mask are far outside the bounds.
TEST(StochasticDepthCpu, ValuesAndGradientGivenTheMask) {
  const int64_t rows = 9, row = 60, n = rows * row;
  const float p = 0.3f;
  const uint64_t seed = 3, stream = cpu::dropout_stream(4, 5);
  const Vec x = uniform_vec(11, size_t(n)), dy = uniform_vec(12, size_t(n));
  Vec y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  Bytes mask(static_cast<size_t>(rows));
  cpu::stochastic_depth_forward<double>(x.data(), rows, row, p, seed, stream, y.data(), mask.data());
  cpu::stochastic_depth_backward<double>(dy.data(), mask.data(), rows, row, p, dx.data());
  ASSERT_GT(kept(mask), 0);
  ASSERT_LT(kept(mask), rows);
  EXPECT_LE(max_relative_gap(y, reference(x, mask, p)), kF64Bound);
  EXPECT_LE(max_relative_gap(dx, reference(dy, mask, p)), kF64Bound);

  std::vector<float> xf(x.begin(), x.end()), dyf(dy.begin(), dy.end()), yf(static_cast<size_t>(n)), dxf(static_cast<size_t>(n));
  Bytes maskf(static_cast<size_t>(rows));
  cpu::stochastic_depth_forward<float>(xf.data(), rows, row, p, seed, stream, yf.data(), maskf.data());
  cpu::stochastic_depth_backward<float>(dyf.data(), maskf.data(), rows, row, p, dxf.data());
  EXPECT_EQ(maskf, mask);
  // The float inputs are x rounded: the reference takes them as they are.
  EXPECT_LE(max_relative_gap(yf, reference(Vec(xf.begin(), xf.end()), mask, p)), kF32Bound);
  EXPECT_LE(max_relative_gap(dxf, reference(Vec(dyf.begin(), dyf.end()), mask, p)), kF32Bound);

  // The bounds would catch a missing scale and another step's mask.
  Vec unscaled(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) unscaled[size_t(i)] = mask[size_t(i / row)] ? x[size_t(i)] : 0.0;
  EXPECT_GT(max_relative_gap(y, unscaled), 0.4);
  const Bytes other = expected_mask(rows, p, seed, cpu::dropout_stream(4, 6));
  ASSERT_NE(other, mask);
  EXPECT_GT(max_relative_gap(y, reference(x, other, p)), 1.0);
}

TEST(StochasticDepthCpu, DropsEverySampleAtPOneWithoutNaN) {
  const int64_t rows = 4, row = 8;
  Vec x = uniform_vec(13, size_t(rows * row)), y(x.size()), dx(x.size());
  x[5] = INFINITY;
  Bytes mask(static_cast<size_t>(rows));
  cpu::stochastic_depth_forward<double>(x.data(), rows, row, 1.f, 1, 2, y.data(), mask.data());
  cpu::stochastic_depth_backward<double>(x.data(), mask.data(), rows, row, 1.f, dx.data());
  EXPECT_EQ(mask, Bytes(size_t(rows), 0));
  EXPECT_EQ(y, Vec(x.size(), 0.0));
  EXPECT_EQ(dx, Vec(x.size(), 0.0));
}

// --- The ops through the registry ---

TEST(StochasticDepthOp, DrawsFromTheLayerKeyAndStepAndRefusesBadTensors) {
  kiln::testing::OpBench f(3, "features.1.0.stochastic_depth");
  f.scalars.seed = 1234, f.scalars.step = 56;
  const Shape shape{40, 2, 3, 5};
  const int64_t rows = 40, n = numel(shape);
  Vec x = uniform_vec(14, size_t(n));
  Vec y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  Bytes mask(static_cast<size_t>(rows));
  StochasticDepthForward<TensorId> fwd{0, 1, 2, 0.25f, 0xC0FFEEu};
  OpCall call{make_op(fwd, 3), f.program, {f.arg(shape, x.data())},
              {f.arg(shape, y.data()), f.arg({rows}, mask.data(), DType::U8)}, f.scalars};
  find_op(Device::CPU, OpKind::STOCHASTIC_DEPTH_FWD)(call);
  const Bytes want = expected_mask(rows, 0.25f, 1234, mix64(0xC0FFEEULL * 1000003ULL + 56ULL));
  EXPECT_EQ(mask, want);
  EXPECT_LE(max_relative_gap(y, reference(x, want, 0.25f)), kF64Bound);
  const Op bwd = make_op(StochasticDepthBackward<TensorId>{3, 2, 4, 0.25f}, 3);
  OpCall bcall{bwd, f.program, {f.arg(shape, x.data()), f.arg({rows}, mask.data(), DType::U8)},
               {f.arg(shape, dx.data())}, f.scalars};
  find_op(Device::CPU, OpKind::STOCHASTIC_DEPTH_BWD)(bcall);
  EXPECT_EQ(dx, y);  // dy = x gives dx = y: the same mask and scale

  // A mask of one byte per element (dropout's) is refused, naming the layer and the samples.
  Bytes wide(static_cast<size_t>(n));
  OpCall wrong{make_op(fwd, 3), f.program, {f.arg(shape, x.data())},
               {f.arg(shape, y.data()), f.arg(shape, wide.data(), DType::U8)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::STOCHASTIC_DEPTH_FWD)(wrong); },
                              {"stochastic depth 'features.1.0.stochastic_depth'", "one U8 per sample", "(40)"});
  fwd.p = 1.5f;
  OpCall bad_p{make_op(fwd, 3), f.program, {f.arg(shape, x.data())},
               {f.arg(shape, y.data()), f.arg({rows}, mask.data(), DType::U8)}, f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::STOCHASTIC_DEPTH_FWD)(bad_p); },
                              {"stochastic depth 'features.1.0.stochastic_depth'", "p = 1.5", "[0, 1]"});
}

// --- A compiled program: input -> stochastic_depth "sd" -> a 1x1 convolution "out" whose weights
// are the identity, so the logits are sd's output and d(input) is sd's dx, both exact. ---

constexpr int kH = 2, kW = 3, kC = 5, kBatch = 16;

Blueprint model(float p) {
  Blueprint m("stochastic_depth");
  m.input(kH, kW, kC);
  m.stochastic_depth(p, "sd").conv(kC, 1, 1, 0, false, "out");
  return m;
}

template <class T>
std::unique_ptr<Executable> compiled(float p, Precision precision) {
  CompileOptions o;
  o.precision = precision, o.batch = kBatch, o.loss = false, o.input_grad = true;
  auto exe = std::make_unique<Executable>(compile(model(p), o), 3);
  std::vector<T> identity(size_t(kC * kC), T(0));
  for (int c = 0; c < kC; ++c) identity[size_t(c * kC + c)] = T(1);
  exe->write(exe->id("out.weight"), identity.data(), identity.size() * sizeof(T));
  return exe;
}

int count_ops(const std::vector<Op>& ops, OpKind kind) {
  return int(std::count_if(ops.begin(), ops.end(), [&](const Op& op) { return op.kind == kind; }));
}

template <class T>
void check_program(Precision precision, double bound) {
  const float p = 0.3f;
  const std::unique_ptr<Executable> owned = compiled<T>(p, precision);
  Executable& exe = *owned;
  const Program& prog = exe.program();
  EXPECT_EQ(count_ops(prog.forward, OpKind::STOCHASTIC_DEPTH_FWD), 1);
  EXPECT_EQ(count_ops(prog.backward, OpKind::STOCHASTIC_DEPTH_BWD), 1);
  EXPECT_EQ(prog.tensors[size_t(exe.id("sd:mask"))].shape, (Shape{kBatch}));
  const size_t n = size_t(kBatch * kH * kW * kC);
  const std::vector<T> x = testing::cast<T>(uniform_vec(21, n)), dy = testing::cast<T>(uniform_vec(22, n));
  exe.write(prog.input, x.data(), n * sizeof(T));
  exe.write(prog.output_grad, dy.data(), n * sizeof(T));
  const uint64_t seed = 77;
  for (int64_t step : {0, 1}) {
    SCOPED_TRACE("step " + std::to_string(step));
    const StepScalars s{0.f, step, seed};
    exe.run_forward(s);
    const Bytes mask = exe.read<uint8_t>(exe.id("sd:mask"));
    EXPECT_EQ(mask, expected_mask(kBatch, p, seed, layer_stream("sd", step)));
    ASSERT_GT(kept(mask), 0);
    ASSERT_LT(kept(mask), kBatch);
    const std::vector<T> y = exe.read<T>(prog.logits);
    exe.run_backward(s);
    const std::vector<T> dx = exe.read<T>(prog.input_grad);
    EXPECT_LE(max_relative_gap(y, reference(Vec(x.begin(), x.end()), mask, p)), bound);
    EXPECT_LE(max_relative_gap(dx, reference(Vec(dy.begin(), dy.end()), mask, p)), bound);
  }
  // Inference: the identity, no op of its own; the logits are the input through the identity conv.
  EXPECT_EQ(count_ops(prog.inference, OpKind::STOCHASTIC_DEPTH_FWD), 0);
  exe.run_inference({0.f, 0, seed});
  EXPECT_EQ(exe.read<T>(prog.inference_logits), x);
}

TEST(StochasticDepthProgram, Float64TrainingValuesGivenTheMaskAndInferenceIsTheIdentity) {
  check_program<double>(Precision::FP64, kF64Bound);
}

TEST(StochasticDepthProgram, Float32TrainingValuesGivenTheMaskAndInferenceIsTheIdentity) {
  check_program<float>(Precision::FP32, kF32Bound);
}

// p = 0: torchvision returns the input in training too. No op, no mask; the layer's output is a
// view of its input and the input's gradient is the output's.
TEST(StochasticDepthProgram, PZeroIsTheIdentityInTraining) {
  const std::unique_ptr<Executable> owned = compiled<double>(0.f, Precision::FP64);
  Executable& exe = *owned;
  const Program& prog = exe.program();
  EXPECT_EQ(count_ops(prog.forward, OpKind::STOCHASTIC_DEPTH_FWD), 0);
  EXPECT_EQ(count_ops(prog.backward, OpKind::STOCHASTIC_DEPTH_BWD), 0);
  EXPECT_LT(prog.find("sd:mask"), 0);
  ASSERT_GE(prog.find("sd"), 0);
  EXPECT_EQ(prog.tensors[size_t(prog.find("sd"))].alias_of, prog.input);
  const size_t n = size_t(kBatch * kH * kW * kC);
  const Vec x = uniform_vec(31, n), dy = uniform_vec(32, n);
  exe.write(prog.input, x.data(), n * sizeof(double));
  exe.write(prog.output_grad, dy.data(), n * sizeof(double));
  const StepScalars s{0.f, 4, 5};
  exe.run_forward(s);
  EXPECT_EQ(exe.read<double>(prog.logits), x);
  exe.run_backward(s);
  EXPECT_EQ(exe.read<double>(prog.input_grad), dy);
}

// Stochastic depth scales whole samples and keeps the order of their features: a linear layer
// reading a flatten through one takes PyTorch's C,H,W columns of the map, as through a dropout
// (torch_layout::flattened_maps: the layouts of load_torch_weights and the state_dict export). A
// linear layer reading the flatten through a BatchNorm (which torch_layout does not look through)
// is not listed: the check sees the difference.
TEST(StochasticDepthProgram, ALinearLayerReadsItsFlattenThroughIt) {
  auto maps = [](bool through_bn) {
    Blueprint m("m");
    m.input(4, 3, 2).conv(5, 3, 1, 1, false, "c").flatten("flat");
    if (through_bn) m.bn("bn");
    m.stochastic_depth(0.2f, "sd").fc(4, true, "fc");
    CompileOptions o;
    o.batch = 1;
    return torch_layout::flattened_maps(compile(m, o).graph);
  };
  const std::map<std::string, Shape> direct = maps(false);
  ASSERT_EQ(direct.count("fc.weight"), 1u);
  EXPECT_EQ(direct.at("fc.weight"), (Shape{4, 3, 5}));
  EXPECT_EQ(maps(true).count("fc.weight"), 0u);
}

}  // namespace
}  // namespace kiln
