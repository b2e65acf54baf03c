// The layer norm: the CPU kernels against float64 loops (layer_norm_test_reference.h) in double and
// float, at any thread count, with bounds that catch plausible mistakes; compiled programs over a
// feature map's channels and over flat rows, forward, backward and inference in fp64 and fp32; which
// tensors the lowering gives the ops (the GPU's workspace, fp32 masters in mixed precision, a layer
// on the data batch, a frozen one); the costs; and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compile/layer_def.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "ops/layer_norm/layer_norm_contract.h"
#include "ops/layer_norm/layer_norm_cpu.h"
#include "ops/layer_norm/layer_norm_test_reference.h"
#include "ops/layer_norm/layer_norm_tiles.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using layer_norm_test::Extents;
using layer_norm_test::Misses;
using layer_norm_test::outside_bound;
using testing::expect_error;

constexpr double kDoubleUnit = 0x1p-53;  // unit roundoff of double and float
constexpr double kFloatUnit = 0x1p-24;
constexpr float kEps = 1e-5f;

// n values of N(0, 1) plus `offset`, rounded to T (the reference sees what the kernel sees).
template <class T>
std::vector<double> values(size_t n, std::mt19937& rng, double offset = 0) {
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (double& e : v) e = static_cast<T>(offset + d(rng));
  return v;
}

// Rows whose means differ from 0 and from each other (so that centering matters), in T.
template <class T>
std::vector<double> rows_of(const Extents& e, std::mt19937& rng) {
  std::vector<double> x;
  for (int64_t r = 0; r < e.rows; ++r) {
    const std::vector<double> row = values<T>(size_t(e.c), rng, double(r % 7) - 2.5);
    x.insert(x.end(), row.begin(), row.end());
  }
  return x;
}

struct Inputs {
  std::vector<double> x, w, b, dy;
};

template <class T>
Inputs inputs(const Extents& e, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.x = rows_of<T>(e, rng);
  in.w = values<T>(size_t(e.c), rng, 1.0);
  in.b = values<T>(size_t(e.c), rng);
  in.dy = values<T>(size_t(e.elements()), rng);
  return in;
}

template <class T>
struct KernelRun {
  std::vector<T> y, mean, rstd, y_inference, dx, dweight, dbias;
};

// What the backward writes: each gradient or not.
struct Wanted {
  bool dx = true, dweight = true, dbias = true;
};

// The forward (saving the statistics), the forward without saving them, and the backward writing
// what `want` asks for from the saved statistics; outputs start as NaN.
template <class T>
KernelRun<T> run_kernels(const Extents& e, const Inputs& in, Wanted want = {}) {
  const cpu::LayerNormGeom g{e.rows, e.c};
  const std::vector<T> x(in.x.begin(), in.x.end()), w(in.w.begin(), in.w.end()), b(in.b.begin(), in.b.end()),
      dy(in.dy.begin(), in.dy.end());
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const size_t n = size_t(e.elements()), rows = size_t(e.rows), c = size_t(e.c);
  KernelRun<T> r{std::vector<T>(n, nan),
                 std::vector<T>(rows, nan),
                 std::vector<T>(rows, nan),
                 std::vector<T>(n, nan),
                 std::vector<T>(want.dx ? n : 0, nan),
                 std::vector<T>(want.dweight ? c : 0, nan),
                 std::vector<T>(want.dbias ? c : 0, nan)};
  cpu::layer_norm_forward<T>(g, x.data(), w.data(), b.data(), kEps, r.y.data(), r.mean.data(), r.rstd.data());
  cpu::layer_norm_forward<T>(g, x.data(), w.data(), b.data(), kEps, r.y_inference.data(), nullptr, nullptr);
  cpu::layer_norm_backward<T>(g, dy.data(), x.data(), w.data(), r.mean.data(), r.rstd.data(),
                              want.dx ? r.dx.data() : nullptr, want.dweight ? r.dweight.data() : nullptr,
                              want.dbias ? r.dbias.data() : nullptr);
  return r;
}

template <class V>
std::vector<double> as_double(const V& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Every result within its bound: computed in double (unit 2^-53), stored in T (2^-24 for float,
// the double's own rounding for double). The backward's reference reads the statistics the
// forward saved, as the kernel does.
template <class T>
void expect_within_bounds(const std::string& what, const Extents& e, const Inputs& in, const KernelRun<T>& got) {
  const double store = sizeof(T) == sizeof(float) ? kFloatUnit : 0.0;
  const layer_norm_test::Forward f = layer_norm_test::forward(e, in.x, in.w, in.b, double(kEps));
  auto expect = [&](const char* name, const auto& values, const std::vector<double>& want,
                    const std::vector<double>& scale) {
    const Misses m = outside_bound(values, want, scale, store, kDoubleUnit);
    EXPECT_EQ(m.count, 0) << what << ": " << name << " off at " << m.first << ": got " << values[size_t(m.first)]
                          << ", want " << want[size_t(m.first)];
  };
  expect("y", got.y, f.y, f.y_scale);
  expect("mean", got.mean, f.mean, f.mean_scale);
  expect("rstd", got.rstd, f.rstd, f.rstd_scale);
  EXPECT_EQ(got.y_inference, got.y) << what << ": the forward without statistics differs";
  const layer_norm_test::Backward bw =
      layer_norm_test::backward(e, in.dy, in.x, in.w, as_double(got.mean), as_double(got.rstd));
  if (!got.dx.empty()) expect("dx", got.dx, bw.dx, bw.dx_scale);
  if (!got.dweight.empty()) expect("dweight", got.dweight, bw.dweight, bw.dweight_scale);
  if (!got.dbias.empty()) expect("dbias", got.dbias, bw.dbias, bw.dbias_scale);
}

// One channel (y = bias); rows of a few channels; channels that are no power of two; many rows
// in several pieces and chunks; wide rows.
const std::vector<Extents> kExtents = {{5, 1}, {37, 70}, {1000, 16}, {64, 300}, {7, 1024}};

template <class T>
void check_kernels() {
  uint32_t seed = 10;
  for (const Extents& e : kExtents) {
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " rows=" + std::to_string(e.rows) +
                             " c=" + std::to_string(e.c);
    const Inputs in = inputs<T>(e, seed++);
    expect_within_bounds(what, e, in, run_kernels<T>(e, in));
    expect_within_bounds(what + " (dx only)", e, in, run_kernels<T>(e, in, {true, false, false}));
    expect_within_bounds(what + " (parameters only)", e, in, run_kernels<T>(e, in, {false, true, true}));
    expect_within_bounds(what + " (bias only)", e, in, run_kernels<T>(e, in, {false, false, true}));
  }
}

TEST(LayerNormCpu, DoubleKernelsMatchTheReference) { check_kernels<double>(); }
TEST(LayerNormCpu, FloatKernelsMatchTheReference) { check_kernels<float>(); }

template <class T>
std::vector<uint8_t> bytes_of(const KernelRun<T>& r) {
  std::vector<uint8_t> out;
  for (const std::vector<T>* v : {&r.y, &r.mean, &r.rstd, &r.dx, &r.dweight, &r.dbias}) {
    const auto* p = reinterpret_cast<const uint8_t*>(v->data());
    out.insert(out.end(), p, p + v->size() * sizeof(T));
  }
  return out;
}

// Enough rows for several forward pieces and backward chunks.
TEST(LayerNormCpu, TheSameBytesAtAnyThreadCount) {
  for (const Extents& e : {Extents{4000, 40}, Extents{300, 257}}) {
    const Inputs in = inputs<float>(e, 3);
    std::vector<std::vector<uint8_t>> runs;
    for (int threads : {1, 3, 8}) {
      testing::ScopedThreads scoped(threads);
      runs.push_back(bytes_of(run_kernels<float>(e, in)));
    }
    EXPECT_EQ(runs[0], runs[1]) << "rows=" << e.rows << " c=" << e.c;
    EXPECT_EQ(runs[0], runs[2]) << "rows=" << e.rows << " c=" << e.c;
  }
}

// More than half of the results a plausible mistake gives must fall outside the bounds the kernels
// meet: the unbiased variance, eps left out, dx without its xhat term, parameter sums missing a
// row, and (for the double kernel's claim of double sums) sums accumulated in float.
template <class T>
void expect_bounds_catch_mistakes() {
  const Extents e{1000, 24};
  const Inputs in = inputs<T>(e, 4);
  const KernelRun<T> got = run_kernels<T>(e, in);
  const double store = sizeof(T) == sizeof(float) ? kFloatUnit : 0.0;
  auto misses = [&](const auto& values, const std::vector<double>& want, const std::vector<double>& scale) {
    return outside_bound(values, want, scale, store, kDoubleUnit).count;
  };
  const auto n = int64_t(e.elements()), half = [](int64_t k) { return k / 2; };
  const layer_norm_test::Forward right = layer_norm_test::forward(e, in.x, in.w, in.b, double(kEps));
  EXPECT_EQ(misses(got.y, right.y, right.y_scale), 0);
  const layer_norm_test::Forward unbiased =
      layer_norm_test::forward(e, in.x, in.w, in.b, double(kEps), double(e.c - 1));
  EXPECT_GT(misses(got.y, unbiased.y, right.y_scale), half(n)) << "the unbiased variance";
  EXPECT_GT(misses(got.rstd, unbiased.rstd, right.rstd_scale), half(e.rows)) << "the unbiased variance";
  const layer_norm_test::Forward no_eps = layer_norm_test::forward(e, in.x, in.w, in.b, 0.0);
  EXPECT_GT(misses(got.y, no_eps.y, right.y_scale), half(n)) << "eps left out";

  const std::vector<double> mean = as_double(got.mean), rstd = as_double(got.rstd);
  const layer_norm_test::Backward bw = layer_norm_test::backward(e, in.dy, in.x, in.w, mean, rstd);
  EXPECT_EQ(misses(got.dx, bw.dx, bw.dx_scale), 0);
  const layer_norm_test::Backward flat = layer_norm_test::backward(e, in.dy, in.x, in.w, mean, rstd, false);
  EXPECT_GT(misses(got.dx, flat.dx, bw.dx_scale), half(n)) << "dx without the xhat term";
  std::vector<double> short_dy = in.dy;  // the last row left out of the sums
  for (int64_t k = 0; k < e.c; ++k) short_dy[size_t((e.rows - 1) * e.c + k)] = 0;
  const layer_norm_test::Backward missing = layer_norm_test::backward(e, short_dy, in.x, in.w, mean, rstd);
  EXPECT_GT(misses(got.dweight, missing.dweight, bw.dweight_scale), half(e.c)) << "dweight missing a row";
  EXPECT_GT(misses(got.dbias, missing.dbias, bw.dbias_scale), half(e.c)) << "dbias missing a row";
  if (sizeof(T) == sizeof(float)) return;
  std::vector<double> float_dw(size_t(e.c), 0.0), float_db(size_t(e.c), 0.0);
  for (int64_t k = 0; k < e.c; ++k) {
    float sw = 0, sb = 0;
    for (int64_t r = 0; r < e.rows; ++r) {
      const size_t i = size_t(r * e.c + k);
      sw += float(in.dy[i]) * float((in.x[i] - mean[size_t(r)]) * rstd[size_t(r)]);
      sb += float(in.dy[i]);
    }
    float_dw[size_t(k)] = sw, float_db[size_t(k)] = sb;
  }
  EXPECT_GT(misses(got.dweight, float_dw, bw.dweight_scale), half(e.c)) << "dweight summed in float";
  EXPECT_GT(misses(got.dbias, float_db, bw.dbias_scale), half(e.c)) << "dbias summed in float";
}

TEST(LayerNormCpu, TheDoubleBoundsCatchMistakes) { expect_bounds_catch_mistakes<double>(); }
TEST(LayerNormCpu, TheFloatBoundsCatchMistakes) { expect_bounds_catch_mistakes<float>(); }

// --- Compiled programs ---

// The layer alone over a 5x7 map of 12 channels (ConvNeXt's LayerNorm2d), or over the 60 features
// of a flattened 3x4x5 input.
Blueprint on_a_map() {
  Blueprint m("ln_map");
  m.input(5, 7, 12).layer_norm(1e-6, "ln");
  return m;
}
Blueprint on_rows() {
  Blueprint m("ln_rows");
  m.input(3, 4, 5).flatten("flat").layer_norm(1e-5, "ln");
  return m;
}

struct ProgramRun {
  Extents e;
  double eps = 0;
  std::vector<double> x, w, b, dy, y, mean, rstd, dx, dweight, dbias, x2, y_inference;
};

// The program in `precision` (FP64 or FP32), batch 2, its output the layer's: random weight and
// bias, forward, backward, then inference on other data.
ProgramRun run_program(const Blueprint& model, Precision precision) {
  CompileOptions o;
  o.precision = precision, o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(model, o), 3);
  const Program& p = exe.program();
  const bool fp64 = precision == Precision::FP64;
  const Shape& y_shape = p.tensors[p.logits].shape;
  ProgramRun r;
  r.e = {numel(y_shape) / y_shape.back(), y_shape.back()};
  r.eps = attrs_of<LayerNormAttrs>(p.graph.layers.back()).eps;
  const Inputs in = fp64 ? inputs<double>(r.e, 5) : inputs<float>(r.e, 5);
  r.x = in.x, r.w = in.w, r.b = in.b, r.dy = in.dy;
  std::mt19937 rng(6);
  r.x2 = fp64 ? rows_of<double>(r.e, rng) : rows_of<float>(r.e, rng);
  auto write = [&](int id, const std::vector<double>& v) {
    if (fp64) return exe.write(id, v.data(), v.size() * sizeof(double));
    const std::vector<float> f(v.begin(), v.end());
    exe.write(id, f.data(), f.size() * sizeof(float));
  };
  auto read = [&](int id) { return fp64 ? exe.read<double>(id) : as_double(exe.read<float>(id)); };
  write(exe.id("ln.weight"), r.w);
  write(exe.id("ln.bias"), r.b);
  write(p.input, r.x);
  write(p.output_grad, r.dy);
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  r.y = read(p.logits), r.mean = read(exe.id("ln:mean")), r.rstd = read(exe.id("ln:rstd"));
  exe.run_backward(s);
  r.dx = read(p.input_grad), r.dweight = exe.gradient("ln.weight"), r.dbias = exe.gradient("ln.bias");
  write(p.input, r.x2);
  exe.run_inference(s);
  r.y_inference = read(p.inference_logits);
  return r;
}

// Each of the program's results against the reference, within the kernels' bounds (the input
// gradient reaches the input through the flatten's view unchanged): how many miss, by name.
struct Check {
  std::string name;
  Misses misses;
  size_t size = 0;
};
std::vector<Check> program_checks(const ProgramRun& r, double store) {
  const layer_norm_test::Forward f = layer_norm_test::forward(r.e, r.x, r.w, r.b, r.eps);
  const layer_norm_test::Forward fi = layer_norm_test::forward(r.e, r.x2, r.w, r.b, r.eps);
  const layer_norm_test::Backward bw = layer_norm_test::backward(r.e, r.dy, r.x, r.w, r.mean, r.rstd);
  std::vector<Check> checks;
  auto check = [&](const char* name, const std::vector<double>& got, const std::vector<double>& want,
                   const std::vector<double>& scale) {
    const Misses m = got.size() == want.size() ? outside_bound(got, want, scale, store, kDoubleUnit)
                                               : Misses{int64_t(want.size()), 0};
    checks.push_back({name, m, want.size()});
  };
  check("y", r.y, f.y, f.y_scale);
  check("saved mean", r.mean, f.mean, f.mean_scale);
  check("saved rstd", r.rstd, f.rstd, f.rstd_scale);
  check("d(input)", r.dx, bw.dx, bw.dx_scale);
  check("ln.weight's gradient", r.dweight, bw.dweight, bw.dweight_scale);
  check("ln.bias's gradient", r.dbias, bw.dbias, bw.dbias_scale);
  check("inference y", r.y_inference, fi.y, fi.y_scale);
  return checks;
}

void expect_program_within_bounds(const std::string& what, const ProgramRun& r, double store) {
  for (const Check& c : program_checks(r, store))
    EXPECT_EQ(c.misses.count, 0) << what << ": " << c.name << " off at " << c.misses.first;
}

// How many results of the check named `name` miss.
int64_t misses_of(const std::vector<Check>& checks, const std::string& name) {
  for (const Check& c : checks)
    if (c.name == name) return c.misses.count;
  ADD_FAILURE() << "no check " << name;
  return 0;
}

TEST(LayerNormProgram, OnAMapAndOnRowsInFloat64) {
  for (const auto& [name, model] : {std::pair{"map", on_a_map()}, std::pair{"rows", on_rows()}}) {
    const ProgramRun r = run_program(model, Precision::FP64);
    EXPECT_EQ(r.e.c, std::string(name) == "map" ? 12 : 60) << name;
    expect_program_within_bounds(name, r, 0.0);
  }
}

TEST(LayerNormProgram, OnAMapAndOnRowsInFloat32) {
  for (const auto& [name, model] : {std::pair{"map", on_a_map()}, std::pair{"rows", on_rows()}}) {
    const ProgramRun r = run_program(model, Precision::FP32);
    expect_program_within_bounds(name, r, kFloatUnit);
    EXPECT_EQ(r.eps, std::string(name) == "map" ? 1e-6 : 1e-5) << name;
  }
}

// The program check catches a layer that ignored its eps attribute (PyTorch's default 1e-5 where
// ConvNeXt's 1e-6 was asked for) and a weight gradient that missed a row: most of the results
// concerned miss, in fp64 and fp32.
TEST(LayerNormProgram, TheProgramCheckCatchesMistakes) {
  for (Precision precision : {Precision::FP64, Precision::FP32}) {
    SCOPED_TRACE(precision == Precision::FP64 ? "fp64" : "fp32");
    const double store = precision == Precision::FP64 ? 0.0 : kFloatUnit;
    ProgramRun r = run_program(on_a_map(), precision);
    ProgramRun wrong_eps = r;
    wrong_eps.eps = 1e-5;
    const std::vector<Check> eps_checks = program_checks(wrong_eps, store);
    EXPECT_GT(misses_of(eps_checks, "y"), r.e.elements() / 2);
    EXPECT_GT(misses_of(eps_checks, "saved rstd"), r.e.rows / 2);
    const int64_t last = (r.e.rows - 1) * r.e.c;
    for (int64_t k = 0; k < r.e.c; ++k)
      r.dweight[size_t(k)] -= r.dy[size_t(last + k)] * (r.x[size_t(last + k)] - r.mean.back()) * r.rstd.back();
    EXPECT_GT(misses_of(program_checks(r, store), "ln.weight's gradient"), r.e.c / 2);
  }
}

// The ops of the program's layer_norm, by kind.
std::vector<const Op*> ops_of(const std::vector<Op>& list, OpKind kind) {
  std::vector<const Op*> found;
  for (const Op& op : list)
    if (op.kind == kind) found.push_back(&op);
  return found;
}

// The forward saves the statistics, inference does not; the backward writes dx only where the
// input wants it (not on the data batch), both parameter gradients always, and on the GPU sums them
// through a workspace of the tiles' shape; in mixed precision the ops read the fp32 masters and
// write their fp32 gradients, beside fp32 statistics.
TEST(LayerNormProgram, TheTensorsTheLoweringGivesTheOps) {
  for (Device device : {Device::CPU, Device::CUDA})
    for (bool input_grad : {false, true}) {
      SCOPED_TRACE(std::string(device == Device::CPU ? "cpu" : "cuda") + (input_grad ? " input_grad" : ""));
      CompileOptions o;
      o.device = device, o.batch = 2, o.loss = false, o.input_grad = input_grad;
      o.precision = device == Device::CUDA ? Precision::FP16 : Precision::FP32;
      const Program p = compile(on_a_map(), o);
      const auto forward = ops_of(p.forward, OpKind::LAYER_NORM_FWD);
      const auto inference = ops_of(p.inference, OpKind::LAYER_NORM_FWD);
      const auto backward = ops_of(p.backward, OpKind::LAYER_NORM_BWD);
      ASSERT_EQ(forward.size(), 1u);
      ASSERT_EQ(inference.size(), 1u);
      ASSERT_EQ(backward.size(), 1u);
      const auto f = op_fields<LayerNormForward>(*forward[0]), i = op_fields<LayerNormForward>(*inference[0]);
      const auto b = op_fields<LayerNormBackward>(*backward[0]);
      EXPECT_EQ(int(f.mean), p.find("ln:mean"));
      EXPECT_EQ(int(f.rstd), p.find("ln:rstd"));
      EXPECT_FALSE(i.mean.present() || i.rstd.present());
      EXPECT_EQ(f.eps, 1e-6);
      EXPECT_EQ(int(f.weight), p.find("ln.weight"));  // the master, no compute copy
      EXPECT_EQ(int(i.weight), p.find("ln.weight"));
      EXPECT_EQ(int(b.dweight), p.find("ln.weight.grad"));
      EXPECT_EQ(int(b.dbias), p.find("ln.bias.grad"));
      EXPECT_EQ(b.dx.present(), input_grad);
      for (TensorId t : {f.weight, f.bias, f.mean, f.rstd, b.dweight, b.dbias})
        EXPECT_EQ(p.tensors[size_t(int(t))].dtype, DType::F32) << p.tensors[size_t(int(t))].name;
      EXPECT_EQ(p.tensors[size_t(int(f.mean))].shape, (Shape{70}));
      EXPECT_EQ(p.tensors[size_t(int(f.x))].dtype, device == Device::CUDA ? DType::F16 : DType::F32);
      EXPECT_EQ(b.partials.present(), device == Device::CUDA);
      if (!b.partials.present()) continue;
      const TensorSpec& w = p.tensors[size_t(int(b.partials))];
      EXPECT_EQ(w.shape, (Shape{layer_norm_tiles::tiles(70).count, 2, 12}));
      EXPECT_EQ(w.dtype, DType::F32);
    }
}

// A frozen layer runs the inference op in training and has no backward: its parameters are buffers.
TEST(LayerNormProgram, AFrozenLayerNormHasNoBackward) {
  Blueprint m("frozen");
  m.input(4, 4, 3).conv(8, 3, 1, 1, true, "stem").layer_norm(1e-6, "ln").flatten("flat").fc(3, true, "head");
  CompileOptions o;
  o.batch = 2, o.freeze = "ln";
  const Program p = compile(m, o);
  const auto forward = ops_of(p.forward, OpKind::LAYER_NORM_FWD);
  ASSERT_EQ(forward.size(), 1u);
  EXPECT_FALSE(op_fields<LayerNormForward>(*forward[0]).mean.present());
  EXPECT_TRUE(ops_of(p.backward, OpKind::LAYER_NORM_BWD).empty());
  for (int id : p.params) EXPECT_NE(p.tensors[size_t(id)].name, "ln.weight");
}

// Costs count bytes: the forward x, weight, bias, y and (training) the statistics; the backward dy,
// x, weight, the statistics and the gradients it writes, not the GPU's workspace.
TEST(LayerNormProgram, CostsCountTheBytesEachOpMoves) {
  for (Device device : {Device::CPU, Device::CUDA}) {
    SCOPED_TRACE(device == Device::CPU ? "cpu" : "cuda");
    CompileOptions o;
    o.device = device, o.batch = 2, o.loss = false, o.input_grad = true;
    const Program p = compile(on_a_map(), o);
    const double map = 2 * 35 * 12 * 4, channels = 12 * 4, rows = 70 * 4;
    const Op& f = *ops_of(p.forward, OpKind::LAYER_NORM_FWD).at(0);
    const Op& i = *ops_of(p.inference, OpKind::LAYER_NORM_FWD).at(0);
    const Op& b = *ops_of(p.backward, OpKind::LAYER_NORM_BWD).at(0);
    EXPECT_EQ(op_cost(p, f).bytes, 2 * map + 2 * channels + 2 * rows);
    EXPECT_EQ(op_cost(p, i).bytes, 2 * map + 2 * channels);
    EXPECT_EQ(op_cost(p, b).bytes, 3 * map + 3 * channels + 2 * rows);
    for (const Op* op : {&f, &i, &b}) EXPECT_EQ(op_cost(p, *op).flops, 0);
  }
}

TEST(LayerNormRefusals, NameTheLayerTheInputAndTheFix) {
  Layer layer;
  layer.name = "features.1.0.block.2", layer.kind = LayerKind::LayerNorm, layer.attrs = LayerNormAttrs{1e-6f};
  const LayerDef& def = layer_def(LayerKind::LayerNorm);
  EXPECT_EQ(def.infer_shape(layer, {{2, 7, 7, 96}}), (Shape{2, 7, 7, 96}));
  EXPECT_EQ(def.infer_shape(layer, {{2, 96}}), (Shape{2, 96}));
  expect_error([&] { def.infer_shape(layer, {{2, 7, 96}}); },
               {"layer_norm 'features.1.0.block.2'", shape_str({2, 7, 96}), "(N,H,W,C)", "(N,F)", "flatten"});
  expect_error([&] { def.infer_shape(layer, {{2, 96}, {2, 96}}); }, {"layer_norm 'features.1.0.block.2'", "1 input"});
  CompileOptions o;
  o.batch = 2;
  Blueprint m("m");
  m.input(4, 4, 3).conv(8, 3, 1, 1, false, "c").layer_norm(0.f, "ln").flatten().fc(2);
  expect_error([&] { compile(m, o); }, {"ln", "eps must be finite and positive"});
}

}  // namespace
}  // namespace kiln
