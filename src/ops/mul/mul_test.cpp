// The elementwise product: the CPU kernels against float64 loops (mul_test_reference.h) for maps
// of one shape and for a per-channel gate, in double and float, at any thread count; compiled
// programs with the gate on either side, forward, backward and inference; which gradients the
// backward writes; the costs; and the refusals of the DSL and of shape inference.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "ops/mul/mul_contract.h"
#include "ops/mul/mul_cpu.h"
#include "ops/mul/mul_test_reference.h"
#include "runtime/op_cost.h"
#include "support/cpu_test_util.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using mul_test::Extents;
using mul_test::outside_bound;
using mul_test::Reference;
using testing::expect_error;

constexpr double kDoubleUnit = 0x1p-53;  // unit roundoff of double and float
constexpr double kFloatUnit = 0x1p-24;

std::vector<double> normals(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (double& e : v) e = d(rng);
  return v;
}

// Values of T (float: rounded to float, so the reference sees what the kernel sees).
template <class T>
std::vector<double> values(size_t n, uint32_t seed) {
  std::vector<double> v = normals(n, seed);
  for (double& e : v) e = static_cast<T>(e);
  return v;
}

template <class T>
struct KernelRun {
  std::vector<T> y, da, db;
};

// The forward, and the backward writing the gradients asked for (the other pointer null).
template <class T>
KernelRun<T> run_kernels(const Extents& e, const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<double>& dy, bool want_da, bool want_db) {
  const cpu::MulGeom g{e.n, e.hw, e.c, e.gate};
  const std::vector<T> ta(a.begin(), a.end()), tb(b.begin(), b.end()), tdy(dy.begin(), dy.end());
  const T nan = std::numeric_limits<T>::quiet_NaN();
  KernelRun<T> r{std::vector<T>(size_t(e.map()), nan), std::vector<T>(want_da ? size_t(e.map()) : 0, nan),
                 std::vector<T>(want_db ? size_t(e.b()) : 0, nan)};
  cpu::mul_forward<T>(g, ta.data(), tb.data(), r.y.data());
  cpu::mul_backward<T>(g, tdy.data(), ta.data(), tb.data(), want_da ? r.da.data() : nullptr,
                       want_db ? r.db.data() : nullptr);
  return r;
}

// Products are exact: double's one rounding is the reference's, and a product of floats is exact
// in double, rounded once to float. A gate's sum: double accumulation (hw products and additions)
// and, in float, the result's rounding.
template <class T>
void expect_matches(const std::string& what, const Extents& e, const KernelRun<T>& got, const Reference& want) {
  for (size_t i = 0; i < want.y.size(); ++i) ASSERT_EQ(got.y[i], static_cast<T>(want.y[i])) << what << " y at " << i;
  for (size_t i = 0; i < got.da.size(); ++i) ASSERT_EQ(got.da[i], static_cast<T>(want.da[i])) << what << " da at " << i;
  if (got.db.empty()) return;
  if (!e.gate) {
    for (size_t i = 0; i < want.db.size(); ++i)
      ASSERT_EQ(got.db[i], static_cast<T>(want.db[i])) << what << " db at " << i;
    return;
  }
  const double store = sizeof(T) == sizeof(float) ? kFloatUnit : 0.0;
  const mul_test::Misses m = outside_bound(got.db, want.db, want.db_terms, store, kDoubleUnit, e.hw + 1);
  EXPECT_EQ(m.count, 0) << what << ": gate gradient off at " << m.first << ": got " << got.db[size_t(m.first)]
                        << ", want " << want.db[size_t(m.first)];
}

// Odd rows; channels crossing the gate sum's 64-channel runs; enough elements for several tasks.
const std::vector<Extents> kExtents = {
    {3, 37, 70, false}, {3, 37, 70, true}, {2, 1000, 40, false}, {2, 1000, 40, true}, {1, 1, 5, true}};

template <class T>
void check_kernels() {
  uint32_t seed = 10;
  for (const Extents& e : kExtents) {
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " n=" + std::to_string(e.n) +
                             " hw=" + std::to_string(e.hw) + " c=" + std::to_string(e.c) + (e.gate ? " gate" : "");
    const std::vector<double> a = values<T>(size_t(e.map()), seed++), b = values<T>(size_t(e.b()), seed++),
                              dy = values<T>(size_t(e.map()), seed++);
    const Reference want = mul_test::reference(e, a, b, dy);
    expect_matches(what, e, run_kernels<T>(e, a, b, dy, true, true), want);
    expect_matches(what + " (da only)", e, run_kernels<T>(e, a, b, dy, true, false), want);
    expect_matches(what + " (db only)", e, run_kernels<T>(e, a, b, dy, false, true), want);
  }
}

TEST(MulCpu, DoubleKernelsMatchTheReference) { check_kernels<double>(); }
TEST(MulCpu, FloatKernelsMatchTheReference) { check_kernels<float>(); }

template <class T>
std::vector<uint8_t> bytes_of(const KernelRun<T>& r) {
  std::vector<uint8_t> out;
  for (const std::vector<T>* v : {&r.y, &r.da, &r.db}) {
    const auto* p = reinterpret_cast<const uint8_t*>(v->data());
    out.insert(out.end(), p, p + v->size() * sizeof(T));
  }
  return out;
}

TEST(MulCpu, TheSameBytesAtAnyThreadCount) {
  for (const Extents& e : kExtents) {
    const std::vector<double> a = normals(size_t(e.map()), 1), b = normals(size_t(e.b()), 2),
                              dy = normals(size_t(e.map()), 3);
    std::vector<std::vector<uint8_t>> runs;
    for (int threads : {1, 3, 8}) {
      testing::ScopedThreads scoped(threads);
      runs.push_back(bytes_of(run_kernels<float>(e, a, b, dy, true, true)));
    }
    EXPECT_EQ(runs[0], runs[1]) << "hw=" << e.hw << " c=" << e.c << " gate=" << e.gate;
    EXPECT_EQ(runs[0], runs[2]) << "hw=" << e.hw << " c=" << e.c << " gate=" << e.gate;
  }
}

// The gate sum's bound is tight enough to catch plausible mistakes: a sum missing a row, and one
// accumulated in float instead of double (the double kernel's results compared with such sums).
TEST(MulCpu, TheGateBoundCatchesWrongSums) {
  const Extents e{3, 37, 70, true};
  const std::vector<double> a = normals(size_t(e.map()), 4), b = normals(size_t(e.b()), 5),
                            dy = normals(size_t(e.map()), 6);
  const KernelRun<double> got = run_kernels<double>(e, a, b, dy, true, true);
  const Reference right = mul_test::reference(e, a, b, dy);
  EXPECT_EQ(outside_bound(got.db, right.db, right.db_terms, 0.0, kDoubleUnit, e.hw + 1).count, 0);

  std::vector<double> short_dy = dy;  // each image's last row left out
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t k = 0; k < e.c; ++k) short_dy[size_t(((img + 1) * e.hw - 1) * e.c + k)] = 0;
  const Reference missing_row = mul_test::reference(e, a, b, short_dy);
  EXPECT_GT(outside_bound(got.db, missing_row.db, right.db_terms, 0.0, kDoubleUnit, e.hw + 1).count, e.n * e.c / 2);

  std::vector<double> float_sums(right.db.size());
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t k = 0; k < e.c; ++k) {
      float s = 0;
      for (int64_t r = 0; r < e.hw; ++r) {
        const size_t i = size_t((img * e.hw + r) * e.c + k);
        s += float(dy[i]) * float(a[i]);
      }
      float_sums[size_t(img * e.c + k)] = s;
    }
  EXPECT_GT(outside_bound(got.db, float_sums, right.db_terms, 0.0, kDoubleUnit, e.hw + 1).count, e.n * e.c / 2);
}

// --- Compiled programs ---

// x (4 x 4 x 3) -> g: a 4x4 max pool, the per-channel gate N x 1 x 1 x 3 (each image's channel
// maxima, exact); y = mul(g, x) or mul(x, g). x's gradient is dy * g plus, at each channel's
// maximum, the gate's gradient sum_r dy * x routed back by the pool.
Blueprint gated(bool gate_first) {
  Blueprint m("gated");
  m.input(4, 4, 3).maxpool(4, 4, 0, "g");
  const Blueprint::Ref g = m.last();
  if (gate_first)
    m.mul(g, m.source(), "y");
  else
    m.mul(m.source(), g, "y");
  return m;
}

struct GatedRun {
  std::vector<double> x, dy, y, dx, x2, yi;
};

// The gated program in `precision` (FP64 or FP32): forward, backward, then inference on other data.
GatedRun run_gated(bool gate_first, Precision precision) {
  CompileOptions o;
  o.precision = precision, o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(gated(gate_first), o), 3);
  const Program& p = exe.program();
  EXPECT_EQ(p.graph.count(LayerKind::Mul), 1);
  EXPECT_EQ(p.tensors[p.logits].shape, (Shape{2, 4, 4, 3}));
  const size_t n = 2 * 16 * 3;
  GatedRun r{values<float>(n, 7), values<float>(n, 8), {}, {}, values<float>(n, 9), {}};
  auto write = [&](int id, const std::vector<double>& v) {
    if (precision == Precision::FP64) return exe.write(id, v.data(), v.size() * sizeof(double));
    const std::vector<float> f(v.begin(), v.end());
    exe.write(id, f.data(), f.size() * sizeof(float));
  };
  auto read = [&](int id) {
    if (precision == Precision::FP64) return exe.read<double>(id);
    const std::vector<float> f = exe.read<float>(id);
    return std::vector<double>(f.begin(), f.end());
  };
  write(p.input, r.x);
  write(p.output_grad, r.dy);
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  r.y = read(p.logits);
  exe.run_backward(s);
  r.dx = read(p.input_grad);
  write(p.input, r.x2);
  exe.run_inference(s);
  r.yi = read(p.inference_logits);
  return r;
}

// Each image's channel maxima, and where they are (the row).
struct Maxima {
  std::vector<double> value;
  std::vector<int64_t> row;
};
Maxima maxima(const std::vector<double>& x, int64_t n, int64_t hw, int64_t c) {
  Maxima m{std::vector<double>(size_t(n * c), -INFINITY), std::vector<int64_t>(size_t(n * c), -1)};
  for (int64_t img = 0; img < n; ++img)
    for (int64_t r = 0; r < hw; ++r)
      for (int64_t k = 0; k < c; ++k) {
        const double v = x[size_t((img * hw + r) * c + k)];
        if (v > m.value[size_t(img * c + k)]) m.value[size_t(img * c + k)] = v, m.row[size_t(img * c + k)] = r;
      }
  return m;
}

// y and y in inference exact; x's gradient exact where it is dy * g alone (the pool's gradient
// adds zeros there). At each channel's maximum it is dy * g + the gate's gradient: the product and
// the gate sum (double on the CPU in either precision) each rounded to the program's dtype, then
// added (one more rounding); the gate sum within its bound of the reference's.
void expect_gated_values(const std::string& what, const GatedRun& r, double unit) {
  const Extents e{2, 16, 3, true};
  const Maxima g = maxima(r.x, e.n, e.hw, e.c);
  const Reference want = mul_test::reference(e, r.x, g.value, r.dy);
  const Reference want_inf = mul_test::reference(e, r.x2, maxima(r.x2, e.n, e.hw, e.c).value, r.dy);
  const bool fp32 = unit == kFloatUnit;
  auto stored = [&](double v) { return fp32 ? double(float(v)) : v; };
  for (size_t i = 0; i < want.y.size(); ++i) {
    ASSERT_EQ(r.y[i], stored(want.y[i])) << what << " y at " << i;
    ASSERT_EQ(r.yi[i], stored(want_inf.y[i])) << what << " inference y at " << i;
  }
  std::vector<int64_t> gate_of(want.da.size(), -1);  // the gate element whose gradient reaches x there
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t k = 0; k < e.c; ++k)
      gate_of[size_t((img * e.hw + g.row[size_t(img * e.c + k)]) * e.c + k)] = img * e.c + k;
  int64_t misses = 0, first = -1;
  for (size_t i = 0; i < want.da.size(); ++i) {
    if (gate_of[i] < 0) {
      ASSERT_EQ(r.dx[i], stored(want.da[i])) << what << " d(input) at " << i;
      continue;
    }
    const double db = want.db[size_t(gate_of[i])], terms = want.db_terms[size_t(gate_of[i])];
    const double dx = want.da[i] + db;
    const double bound = unit * (std::fabs(want.da[i]) + std::fabs(db) + std::fabs(dx)) * (1 + unit) +
                         kDoubleUnit * double(e.hw + 1) * terms * (1 + unit) * (1 + unit);
    if (!(std::fabs(r.dx[i] - dx) <= bound) && misses++ == 0) first = int64_t(i);
  }
  EXPECT_EQ(misses, 0) << what << ": d(input) at a maximum off at " << first << ": got " << r.dx[size_t(first)];
}

TEST(MulProgram, GateOnEitherSideInFloat64) {
  const GatedRun first = run_gated(true, Precision::FP64), second = run_gated(false, Precision::FP64);
  expect_gated_values("gate first", first, kDoubleUnit);
  expect_gated_values("gate second", second, kDoubleUnit);
  EXPECT_EQ(first.y, second.y);  // the same op whichever side the gate is on
  EXPECT_EQ(first.dx, second.dx);
}

TEST(MulProgram, GateOnEitherSideInFloat32) {
  expect_gated_values("gate first", run_gated(true, Precision::FP32), kFloatUnit);
  expect_gated_values("gate second", run_gated(false, Precision::FP32), kFloatUnit);
}

// The bound at the maxima catches a gate gradient that misses one row: the same run with one
// row's term taken out of each maximum's gradient fails it.
TEST(MulProgram, TheGatedCheckCatchesAGateSumMissingARow) {
  GatedRun r = run_gated(true, Precision::FP64);
  const Maxima g = maxima(r.x, 2, 16, 3);
  for (int64_t img = 0; img < 2; ++img)
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t row = g.row[size_t(img * 3 + k)], other = (row + 1) % 16;
      const size_t at = size_t((img * 16 + row) * 3 + k), dropped = size_t((img * 16 + other) * 3 + k);
      r.dx[at] -= r.dy[dropped] * r.x[dropped];
    }
  EXPECT_NONFATAL_FAILURE(expect_gated_values("a row missing", r, kDoubleUnit), "d(input) at a maximum off");
}

// Maps of one shape: x (3 x 4 x 2) and b = conv "b" (1x1, weight 2 I: b = 2x, exact); y = x * b
// with the data batch first or second. The batch wants no gradient (no input_grad), so MUL_BWD
// writes only b's; b's weight gradient sum_rows (dy * x)[k] x[c] is checked against the reference.
Blueprint squared(bool data_first) {
  Blueprint m("squared");
  m.input(3, 4, 2).conv(2, 1, 1, 0, false, "b");
  if (data_first)
    m.mul(m.source(), m.last(), "y");
  else
    m.mul(m.last(), m.source(), "y");
  return m;
}

TEST(MulProgram, OnlyTheInputsThatWantAGradientGetOne) {
  for (bool data_first : {true, false}) {
    SCOPED_TRACE(data_first ? "data first" : "data second");
    CompileOptions o;
    o.precision = Precision::FP64, o.batch = 2, o.loss = false;
    Executable exe(compile(squared(data_first), o), 3);
    const Program& p = exe.program();
    int backward_muls = 0;
    for (const Op& op : p.backward) {
      if (op.kind != OpKind::MUL_BWD) continue;
      ++backward_muls;
      const MulBackward<TensorId> f = op_fields<MulBackward>(op);
      EXPECT_EQ(int(f.a), data_first ? p.input : p.find("b"));  // the forward's factors, both read
      EXPECT_EQ(int(f.b), data_first ? p.find("b") : p.input);
      EXPECT_EQ(f.da.present(), !data_first);
      EXPECT_EQ(f.db.present(), data_first);
    }
    ASSERT_EQ(backward_muls, 1);
    const std::vector<double> w = {2, 0, 0, 2};  // [out, 1, 1, in]
    exe.write(exe.id("b.weight"), w.data(), w.size() * sizeof(double));
    const size_t n = 2 * 12 * 2;
    const std::vector<double> x = normals(n, 11), dy = normals(n, 12);
    exe.write(p.input, x.data(), n * sizeof(double));
    exe.write(p.output_grad, dy.data(), n * sizeof(double));
    const StepScalars s{0.f, 0, 1};
    exe.run_forward(s);
    const std::vector<double> y = exe.read<double>(p.logits);
    exe.run_backward(s);
    const std::vector<double> dw = exe.gradient("b.weight");
    std::vector<double> want_dw(4, 0.0), terms(4, 0.0);
    for (size_t r = 0; r < n / 2; ++r)
      for (int k = 0; k < 2; ++k) {
        ASSERT_EQ(y[r * 2 + k], x[r * 2 + k] * (2 * x[r * 2 + k])) << r << "," << k;
        const double dbk = dy[r * 2 + k] * x[r * 2 + k];  // d(b) = dy * x, exact
        for (int c = 0; c < 2; ++c) {
          want_dw[size_t(k * 2 + c)] += dbk * x[r * 2 + c];
          terms[size_t(k * 2 + c)] += std::fabs(dbk * x[r * 2 + c]);
        }
      }
    // want_dw's own summation is within the same bound of the exact sum as the program's: twice it.
    const mul_test::Misses m = outside_bound(dw, want_dw, terms, 0.0, 2 * kDoubleUnit, int64_t(n / 2) + 1);
    EXPECT_EQ(m.count, 0) << "b.weight's gradient off at " << m.first;
  }
}

// One handle read twice, mul(x, x) = x^2: two gradient slots (dy * x each), summed into x's
// gradient 2 dy x (exact: the two terms are equal).
TEST(MulProgram, AHandleTimesItself) {
  Blueprint m("square");
  m.input(3, 4, 2);
  m.mul(m.source(), m.source(), "y");
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(m, o), 3);
  const Program& p = exe.program();
  const size_t n = 2 * 12 * 2;
  const std::vector<double> x = normals(n, 13), dy = normals(n, 14);
  exe.write(p.input, x.data(), n * sizeof(double));
  exe.write(p.output_grad, dy.data(), n * sizeof(double));
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  const std::vector<double> y = exe.read<double>(p.logits);
  exe.run_backward(s);
  const std::vector<double> dx = exe.read<double>(p.input_grad);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(y[i], x[i] * x[i]) << i;
    ASSERT_EQ(dx[i], 2 * (dy[i] * x[i])) << i;
  }
}

TEST(MulProgram, CostsCountTheBytesEachOpMoves) {
  CompileOptions o;
  o.batch = 2, o.loss = false;
  const Program p = compile(squared(true), o);
  const double map = 2 * 12 * 2 * sizeof(float);
  int seen = 0;
  for (const std::vector<Op>* list : {&p.forward, &p.backward})
    for (const Op& op : *list) {
      if (op.kind != OpKind::MUL_FWD && op.kind != OpKind::MUL_BWD) continue;
      EXPECT_EQ(op_cost(p, op).bytes, 3 * map) << op_kind_name(op.kind);  // a, b, y; dy, a, db (no da)
      ++seen;
    }
  EXPECT_EQ(seen, 2);
}

TEST(MulRefusals, NameTheLayerTheShapesAndTheFix) {
  CompileOptions o;
  o.batch = 2;
  {  // an N x C gate (global_avgpool's rows)
    Blueprint m("m");
    m.input(6, 6, 3).conv(8, 3, 1, 1, false, "c");
    const Blueprint::Ref x = m.last();
    m.global_avgpool("gap").fc(8, true, "fc").sigmoid("gate");
    m.mul(m.last(), x, "se").flatten().fc(2);
    expect_error([&] { compile(m, o); },
                 {"mul 'se'", shape_str({2, 8}), shape_str({2, 6, 6, 8}), "adaptive_avgpool(1, 1)", "N x 1 x 1 x C"});
  }
  {  // a gate of other channels
    Blueprint m("m");
    m.input(6, 6, 3).conv(8, 3, 1, 1, false, "c");
    const Blueprint::Ref x = m.last();
    m.maxpool(6, 6, 0, "pool").conv(4, 1, 1, 0, true, "squeeze");
    m.mul(x, m.last(), "se").flatten().fc(2);
    expect_error([&] { compile(m, o); },
                 {"mul 'se'", shape_str({2, 6, 6, 8}), shape_str({2, 1, 1, 4}), "as many output channels"});
  }
  {  // maps of different sizes
    Blueprint m("m");
    m.input(8, 8, 3).conv(4, 3, 1, 1, false, "full");
    const Blueprint::Ref full = m.last();
    m.from(m.source()).conv(4, 3, 2, 1, false, "half");
    m.mul(full, m.last(), "prod").flatten().fc(2);
    expect_error([&] { compile(m, o); },
                 {"mul 'prod'", shape_str({2, 8, 8, 4}), shape_str({2, 4, 4, 4}), "make the shapes equal",
                  "adaptive_avgpool(1, 1)"});
  }
  {  // flat features
    Blueprint m("m");
    m.input(4, 4, 3).flatten("flat");
    const Blueprint::Ref flat = m.last();
    m.mul(flat, flat, "prod").fc(2);
    expect_error([&] { compile(m, o); }, {"mul 'prod'", shape_str({2, 48}), "feature maps", "before flatten"});
  }
  {  // the DSL: from() before mul(), and a handle of another blueprint
    Blueprint m("m"), other("other");
    m.input(4, 4, 3).conv(4, 3, 1, 1);
    const Blueprint::Ref c = m.last();
    other.conv(4, 3, 1, 1);
    expect_error([&] { m.mul(c, other.last(), "prod"); }, {"mul()", "another blueprint"});
    m.from(m.source());
    expect_error([&] { m.mul(c, c, "prod"); }, {"blueprint 'm'", "from() before mul()", "drop the from()"});
  }
}

}  // namespace
}  // namespace kiln
