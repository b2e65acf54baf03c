// The per-channel scale (ConvNeXt's layer_scale): the CPU kernels against float64 loops
// (layer_scale_test_reference.h) in double and float, with and without dx, at any thread count;
// bounds that catch a wrong sum; compiled programs on maps and flat rows (forward, backward,
// inference, the parameter's name, shape and start); what a CUDA program declares (the fp32 master
// read as it is, the backward's workspace); the costs; and the refusals.
#include <gtest/gtest-spi.h>
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
#include "ops/layer_scale/layer_scale_contract.h"
#include "ops/layer_scale/layer_scale_cpu.h"
#include "ops/layer_scale/layer_scale_partials.h"
#include "ops/layer_scale/layer_scale_test_reference.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using layer_scale_test::Extents;
using layer_scale_test::outside_bound;
using layer_scale_test::Reference;
using testing::expect_error;

constexpr double kDoubleUnit = 0x1p-53;  // unit roundoff of double and float
constexpr double kFloatUnit = 0x1p-24;

// n values of N(0, 1) rounded to T (the reference sees what the kernel sees).
template <class T>
std::vector<double> values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (double& e : v) e = static_cast<T>(d(rng));
  return v;
}

template <class T>
struct KernelRun {
  std::vector<T> y, dx, dgamma;
};

template <class T>
KernelRun<T> run_kernels(const Extents& e, const std::vector<double>& x, const std::vector<double>& gamma,
                         const std::vector<double>& dy, bool want_dx) {
  const cpu::LayerScaleGeom g{e.rows, e.c};
  const std::vector<T> tx(x.begin(), x.end()), tg(gamma.begin(), gamma.end()), tdy(dy.begin(), dy.end());
  const T nan = std::numeric_limits<T>::quiet_NaN();
  KernelRun<T> r{std::vector<T>(size_t(e.elements()), nan), std::vector<T>(want_dx ? size_t(e.elements()) : 0, nan),
                 std::vector<T>(size_t(e.c), nan)};
  cpu::layer_scale_forward<T>(g, tx.data(), tg.data(), r.y.data());
  cpu::layer_scale_backward<T>(g, tdy.data(), tx.data(), tg.data(), want_dx ? r.dx.data() : nullptr, r.dgamma.data());
  return r;
}

// dgamma's bound: double products and sums (rows + 1 roundings of the terms' magnitude at most),
// then, stored as float (S), the result's rounding.
template <class S, class G>
layer_scale_test::Misses dgamma_misses(const G& got, const std::vector<double>& want, const Reference& r,
                                       const Extents& e) {
  const double store = sizeof(S) == sizeof(float) ? kFloatUnit : 0.0;
  return outside_bound(got, want, r.dgamma_terms, store, kDoubleUnit, e.rows + 1);
}

// Products are exact in double, so y and dx are the reference's, rounded once to T.
template <class T>
void expect_matches(const std::string& what, const Extents& e, const KernelRun<T>& got, const Reference& want) {
  for (size_t i = 0; i < want.y.size(); ++i) ASSERT_EQ(got.y[i], static_cast<T>(want.y[i])) << what << " y at " << i;
  for (size_t i = 0; i < got.dx.size(); ++i) ASSERT_EQ(got.dx[i], static_cast<T>(want.dx[i])) << what << " dx at " << i;
  const layer_scale_test::Misses m = dgamma_misses<T>(got.dgamma, want.dgamma, want, e);
  EXPECT_EQ(m.count, 0) << what << ": dgamma off at " << m.first << ": got " << got.dgamma[size_t(m.first)]
                        << ", want " << want.dgamma[size_t(m.first)];
}

// One row and one channel; channels across the 64-channel runs; rows over several chunks (the last
// one short); ConvNeXt's first stage, 96 channels.
const std::vector<Extents> kExtents = {{5, 1}, {1, 130}, {111, 70}, {2000, 40}, {4 * 28 * 28, 96}};

template <class T>
void check_kernels() {
  uint32_t seed = 10;
  for (const Extents& e : kExtents) {
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " rows=" + std::to_string(e.rows) +
                             " c=" + std::to_string(e.c);
    const std::vector<double> x = values<T>(size_t(e.elements()), seed++), gamma = values<T>(size_t(e.c), seed++),
                              dy = values<T>(size_t(e.elements()), seed++);
    const Reference want = layer_scale_test::reference(e, x, gamma, dy);
    expect_matches(what, e, run_kernels<T>(e, x, gamma, dy, true), want);
    expect_matches(what + " (no dx)", e, run_kernels<T>(e, x, gamma, dy, false), want);
  }
}

TEST(LayerScaleCpu, DoubleKernelsMatchTheReference) { check_kernels<double>(); }
TEST(LayerScaleCpu, FloatKernelsMatchTheReference) { check_kernels<float>(); }

TEST(LayerScaleCpu, TheSameBytesAtAnyThreadCount) {
  for (const Extents& e : kExtents) {
    const std::vector<double> x = values<float>(size_t(e.elements()), 1), gamma = values<float>(size_t(e.c), 2),
                              dy = values<float>(size_t(e.elements()), 3);
    std::vector<KernelRun<float>> runs;
    for (int threads : {1, 3, 8}) {
      testing::ScopedThreads scoped(threads);
      runs.push_back(run_kernels<float>(e, x, gamma, dy, true));
    }
    for (size_t t : {size_t{1}, size_t{2}}) {
      // Bytes, not values: the same NaN-free floats compare equal exactly when their bits do.
      EXPECT_EQ(runs[0].y, runs[t].y) << "rows=" << e.rows << " c=" << e.c;
      EXPECT_EQ(runs[0].dx, runs[t].dx) << "rows=" << e.rows << " c=" << e.c;
      EXPECT_EQ(runs[0].dgamma, runs[t].dgamma) << "rows=" << e.rows << " c=" << e.c;
    }
  }
}

// The dgamma bound is tight enough to catch plausible mistakes: a sum missing a row (the last of a
// chunk, or the whole last row), and one accumulated in float instead of double (the double
// kernel's results compared with such sums).
TEST(LayerScaleCpu, TheBoundCatchesWrongSums) {
  const Extents e{2000, 40};
  const std::vector<double> x = values<double>(size_t(e.elements()), 4), gamma = values<double>(size_t(e.c), 5),
                            dy = values<double>(size_t(e.elements()), 6);
  const KernelRun<double> got = run_kernels<double>(e, x, gamma, dy, false);
  const Reference right = layer_scale_test::reference(e, x, gamma, dy);
  EXPECT_EQ(dgamma_misses<double>(got.dgamma, right.dgamma, right, e).count, 0);

  std::vector<double> short_dy = dy;  // the last row left out
  for (int64_t k = 0; k < e.c; ++k) short_dy[size_t((e.rows - 1) * e.c + k)] = 0;
  const Reference missing_row = layer_scale_test::reference(e, x, gamma, short_dy);
  EXPECT_GT(dgamma_misses<double>(got.dgamma, missing_row.dgamma, right, e).count, e.c / 2);

  std::vector<double> float_sums(size_t(e.c));
  for (int64_t k = 0; k < e.c; ++k) {
    float s = 0;
    for (int64_t r = 0; r < e.rows; ++r) s += float(dy[size_t(r * e.c + k)]) * float(x[size_t(r * e.c + k)]);
    float_sums[size_t(k)] = s;
  }
  EXPECT_GT(dgamma_misses<double>(got.dgamma, float_sums, right, e).count, e.c / 2);
}

// --- Compiled programs ---

// The layer on the batch itself (3 x 5 x 6 maps) or on its flattened rows (90 features), named as
// torchvision's first ConvNeXt block.
constexpr const char* kBlock = "features.1.0";
Blueprint scaled(bool flat, float init) {
  Blueprint m("scaled");
  m.input(3, 5, 6);
  if (flat) m.flatten("flat");
  m.layer_scale(init, kBlock);
  return m;
}

struct ProgramRun {
  Shape gamma_shape;
  std::vector<double> start;  // the parameter as initialized
  std::vector<double> x, gamma, dy, y, dx, dgamma, x2, yi;
};

// Forward, backward and inference (on other data) of `scaled` in T, with random factors written
// over the initial ones.
template <class T>
ProgramRun run_program(bool flat, float init, bool input_grad = true) {
  CompileOptions o;
  o.precision = sizeof(T) == 8 ? Precision::FP64 : Precision::FP32;
  o.batch = 2, o.loss = false, o.input_grad = input_grad;
  Executable exe(compile(scaled(flat, init), o), 3);
  const Program& p = exe.program();
  EXPECT_EQ(p.graph.count(LayerKind::LayerScale), 1);
  const std::string param = std::string(kBlock) + ".layer_scale";
  const int id = exe.id(param);
  const TensorSpec& spec = p.tensors[size_t(id)];
  EXPECT_EQ(spec.role, TensorRole::Param);
  EXPECT_EQ(spec.dtype, sizeof(T) == 8 ? DType::F64 : DType::F32);
  ProgramRun r;
  r.gamma_shape = spec.shape;
  const std::vector<T> start = exe.read<T>(id);
  r.start.assign(start.begin(), start.end());
  const size_t n = size_t(numel(p.tensors[size_t(p.input)].shape)), c = size_t(numel(spec.shape));
  r.x = values<T>(n, 7), r.gamma = values<T>(c, 8), r.dy = values<T>(n, 9), r.x2 = values<T>(n, 10);
  auto write = [&](int tensor, const std::vector<double>& v) {
    const std::vector<T> t(v.begin(), v.end());
    exe.write(tensor, t.data(), t.size() * sizeof(T));
  };
  auto read = [&](int tensor) {
    const std::vector<T> t = exe.read<T>(tensor);
    return std::vector<double>(t.begin(), t.end());
  };
  write(id, r.gamma);
  write(p.input, r.x);
  write(p.output_grad, r.dy);
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  r.y = read(p.logits);
  exe.run_backward(s);
  if (input_grad) r.dx = read(p.input_grad);
  r.dgamma = exe.gradient(param);
  write(p.input, r.x2);
  exe.run_inference(s);
  r.yi = read(p.inference_logits);
  return r;
}

// y, dx and inference exact (one rounding of an exact product); dgamma within its bound.
template <class T>
void expect_program_values(const std::string& what, const ProgramRun& r) {
  const Extents e{int64_t(r.x.size() / r.gamma.size()), int64_t(r.gamma.size())};
  const Reference want = layer_scale_test::reference(e, r.x, r.gamma, r.dy);
  const Reference want_inf = layer_scale_test::reference(e, r.x2, r.gamma, r.dy);
  for (size_t i = 0; i < want.y.size(); ++i) {
    ASSERT_EQ(r.y[i], double(T(want.y[i]))) << what << " y at " << i;
    ASSERT_EQ(r.yi[i], double(T(want_inf.y[i]))) << what << " inference y at " << i;
    if (!r.dx.empty()) {
      ASSERT_EQ(r.dx[i], double(T(want.dx[i]))) << what << " dx at " << i;
    }
  }
  const layer_scale_test::Misses m = dgamma_misses<T>(r.dgamma, want.dgamma, want, e);
  EXPECT_EQ(m.count, 0) << what << ": dgamma off at " << m.first;
}

TEST(LayerScaleProgram, MapsAndRowsInFloat64AndFloat32) {
  const ProgramRun map64 = run_program<double>(false, 0.5f), map32 = run_program<float>(false, 0.5f);
  const ProgramRun flat64 = run_program<double>(true, 0.5f), flat32 = run_program<float>(true, 0.5f);
  expect_program_values<double>("map fp64", map64);
  expect_program_values<float>("map fp32", map32);
  expect_program_values<double>("flat fp64", flat64);
  expect_program_values<float>("flat fp32", flat32);
  EXPECT_EQ(map64.gamma_shape, (Shape{6, 1, 1}));  // torchvision's (C, 1, 1)
  EXPECT_EQ(flat64.gamma_shape, (Shape{90}));      // a factor per feature of the rows
}

// The program's check fails for a wrong dgamma: one row's terms left out.
TEST(LayerScaleProgram, TheProgramCheckCatchesASumMissingARow) {
  ProgramRun r = run_program<double>(false, 0.5f);
  for (size_t k = 0; k < r.dgamma.size(); ++k) r.dgamma[k] -= r.dy[k] * r.x[k];  // row 0's term
  EXPECT_NONFATAL_FAILURE(expect_program_values<double>("a row missing", r), "dgamma off");
}

// ConvNeXt's 1e-6 start, as float32's 1e-6 (torch.ones(dim, 1, 1) * 1e-6 in float32), in both
// precisions; Init::Constant with that value, so every run starts there whatever its seed.
TEST(LayerScaleProgram, TheScaleStartsAtItsInitialValue) {
  for (bool flat : {false, true}) {
    const ProgramRun r64 = run_program<double>(flat, 1e-6f), r32 = run_program<float>(flat, 1e-6f);
    ASSERT_EQ(r64.start.size(), flat ? 90u : 6u);
    for (size_t k = 0; k < r64.start.size(); ++k) {
      EXPECT_EQ(r64.start[k], double(1e-6f)) << k;
      EXPECT_EQ(r32.start[k], double(1e-6f)) << k;
    }
  }
  CompileOptions o;
  o.batch = 1, o.loss = false;
  const Program p = compile(scaled(false, -0.25f), o);
  const TensorSpec& spec = p.tensors[size_t(p.find(std::string(kBlock) + ".layer_scale"))];
  EXPECT_EQ(spec.init, Init::Constant);
  EXPECT_EQ(spec.init_value, -0.25);
}

// On the data batch without input_grad: LAYER_SCALE_BWD writes no dx, and dgamma all the same.
TEST(LayerScaleProgram, TheDataBatchGetsNoGradientButTheScaleDoes) {
  const ProgramRun r = run_program<double>(false, 0.5f, /*input_grad=*/false);
  EXPECT_TRUE(r.dx.empty());
  expect_program_values<double>("no input gradient", r);
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 2, o.loss = false;
  const Program p = compile(scaled(false, 0.5f), o);
  int seen = 0;
  for (const Op& op : p.backward) {
    if (op.kind != OpKind::LAYER_SCALE_BWD) continue;
    const auto f = op_fields<LayerScaleBackward>(op);
    EXPECT_FALSE(f.dx.present());
    EXPECT_EQ(int(f.x), p.input);  // the backward reads x: the memory plan keeps it until then
    EXPECT_EQ(int(f.dgamma), p.find(std::string(kBlock) + ".layer_scale.grad"));
    EXPECT_FALSE(f.partials.present());  // the CPU sums without a workspace
    ++seen;
  }
  EXPECT_EQ(seen, 1);
}

// A CUDA program in fp32, fp16 and bf16 (compiled here, run by the GPU tests): the ops read the
// fp32 master itself (no compute copy) and write its fp32 gradient; the backward gets its fp32
// workspace of (chunks, C).
TEST(LayerScaleProgram, CudaProgramsReadTheMasterAndDeclareTheWorkspace) {
  for (Precision precision : {Precision::FP32, Precision::FP16, Precision::BF16}) {
    SCOPED_TRACE(precision_name(precision));
    CompileOptions o;
    o.device = Device::CUDA, o.precision = precision, o.batch = 3, o.loss = false, o.input_grad = true;
    const Program p = compile(scaled(false, 1e-6f), o);
    const std::string param = std::string(kBlock) + ".layer_scale";
    EXPECT_EQ(p.find(param + ":compute"), -1);
    const TensorSpec& master = p.tensors[size_t(p.find(param))];
    const TensorSpec& grad = p.tensors[size_t(p.find(param + ".grad"))];
    EXPECT_EQ(master.dtype, DType::F32);
    EXPECT_EQ(grad.dtype, DType::F32);
    EXPECT_EQ(grad.role, TensorRole::Grad);
    int seen = 0;
    for (const Op& op : p.backward) {
      if (op.kind != OpKind::LAYER_SCALE_BWD) continue;
      const auto f = op_fields<LayerScaleBackward>(op);
      EXPECT_EQ(int(f.gamma), p.find(param));
      ASSERT_TRUE(f.partials.present());
      const TensorSpec& w = p.tensors[size_t(int(f.partials))];
      EXPECT_EQ(w.shape, (Shape{layer_scale_partial_chunks(3 * 15), 6}));
      EXPECT_EQ(w.dtype, DType::F32);
      ++seen;
    }
    EXPECT_EQ(seen, 1);
  }
}

// The chunks depend on the rows alone: one for a few rows, one per 64 up to 512, then 512 longer
// ones; every row in exactly one.
TEST(LayerScalePartials, ChunksCoverTheRowsOnce) {
  EXPECT_EQ(layer_scale_partial_chunks(1), 1);
  EXPECT_EQ(layer_scale_partial_chunks(64), 1);
  EXPECT_EQ(layer_scale_partial_chunks(65), 2);
  EXPECT_EQ(layer_scale_partial_chunks(64 * 512), 512);
  EXPECT_EQ(layer_scale_partial_chunks(8 * 56 * 56), 392);
  EXPECT_EQ(layer_scale_partial_chunks(64 * 56 * 56), 512);
  for (int64_t rows : {int64_t{1}, int64_t{63}, int64_t{130}, int64_t{70000}, int64_t{200704}}) {
    const int64_t chunks = layer_scale_partial_chunks(rows), each = layer_scale_chunk_rows(rows);
    EXPECT_GE(chunks * each, rows) << rows;
    EXPECT_LT((chunks - 1) * each, rows + each) << rows;
  }
}

TEST(LayerScaleProgram, CostsCountTheBytesEachOpMoves) {
  CompileOptions o;
  o.batch = 2, o.loss = false, o.input_grad = true;
  const Program p = compile(scaled(false, 0.5f), o);
  const double map = 2 * 15 * 6 * sizeof(float), gamma = 6 * sizeof(float);
  int seen = 0;
  for (const Op& op : p.forward)
    if (op.kind == OpKind::LAYER_SCALE_FWD) {
      EXPECT_EQ(op_cost(p, op).flops, 0);
      EXPECT_EQ(op_cost(p, op).bytes, 2 * map + gamma);  // x, gamma, y
      ++seen;
    }
  for (const Op& op : p.backward)
    if (op.kind == OpKind::LAYER_SCALE_BWD) {
      EXPECT_EQ(op_cost(p, op).bytes, 3 * map + 2 * gamma);  // dy, x, dx; gamma, dgamma
      ++seen;
    }
  EXPECT_EQ(seen, 2);
  // The GPU's workspace, written then read, counts twice.
  o.device = Device::CUDA;
  const Program gpu = compile(scaled(false, 0.5f), o);
  for (const Op& op : gpu.backward) {
    if (op.kind != OpKind::LAYER_SCALE_BWD) continue;
    EXPECT_EQ(op_cost(gpu, op).bytes, 3 * map + 2 * gamma + 2 * double(layer_scale_partial_chunks(30) * 6 * 4));
  }
}

TEST(LayerScaleRefusals, NameTheLayerWhatItGotAndTheFix) {
  {  // a scale that is not finite, refused as the layer enters the graph
    Blueprint m("m");
    m.input(4, 4, 3).layer_scale(std::numeric_limits<float>::infinity(), "ls");
    CompileOptions o;
    o.batch = 1, o.loss = false;
    expect_error([&] { compile(m, o); }, {"layer_scale 'ls'", "initial scale must be finite", "inf"});
  }
  Layer layer;
  layer.name = kBlock, layer.kind = LayerKind::LayerScale, layer.attrs = LayerScaleAttrs{};
  const LayerDef& def = layer_def(LayerKind::LayerScale);
  expect_error([&] { def.infer_shape(layer, {{2, 5, 6}}); },
               {"layer_scale 'features.1.0'", shape_str({2, 5, 6}), "(N,H,W,C)", "(N,C)", "put it after"});
  expect_error([&] { def.infer_shape(layer, {{2, 4, 4, 3}, {2, 4, 4, 3}}); }, {"layer_scale 'features.1.0'", "1 input"});
  EXPECT_EQ(def.infer_shape(layer, {{2, 4, 4, 3}}), (Shape{2, 4, 4, 3}));
  EXPECT_EQ(def.infer_shape(layer, {{2, 7}}), (Shape{2, 7}));
}

// The ops check what a program gives them: a scale that is not the input's per-channel factor
// (here the op made to read the batch as its scale) is an error naming the op, its layer, the
// tensors and their shapes, before anything is read.
TEST(LayerScaleRefusals, TheOpsCheckTheirTensors) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 2, o.loss = false, o.input_grad = true;
  Program p = compile(scaled(false, 0.5f), o);
  for (Op& op : p.forward)
    if (op.kind == OpKind::LAYER_SCALE_FWD) op.in[1] = p.input;
  const int input = p.input;
  Executable exe(std::move(p), 1);
  const std::vector<double> x(2 * 15 * 6, 1.0);
  exe.write(input, x.data(), x.size() * sizeof(double));
  expect_error([&] { exe.run_forward({0.f, 0, 1}); },
               {"LAYER_SCALE_FWD", kBlock, "scale 'input'", shape_str({2, 3, 5, 6}), shape_str({6, 1, 1}),
                shape_str({6}), "recompile"});
}

}  // namespace
}  // namespace kiln
