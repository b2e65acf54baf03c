// LINEAR_FWD / LINEAR_BWD on the GPU (cuBLASLt, linear_cuda.cpp) against float64, in fp32, fp16
// and bf16: through the CUDA op registry on the layer shapes of the zoo (digits_cnn's head, VGG's
// classifier), odd sizes, no bias, no dx (first layer) and 16-byte aligned pointers; a transposed
// weight that the comparison must catch; the bias kernels cuBLASLt's epilogues stand in for; and
// the layer in a compiled program, where mixed precision reads fp16/bf16 copies of the weight
// and bias and writes their gradients back to the fp32 masters.
//
// Tolerances. The inputs are random normals already rounded to the dtype, and the float64
// reference reads those same values, so rounding of the inputs is no error here. An element of a
// result is a dot product of k terms (k = in for y, out for dx, n for dw and dbias), and the GPU
// may differ from its exact value by
//   - fp32 accumulation: each of the k additions rounds by at most u32 = 2^-24 relative to the
//     partial sum it makes, which is at most S = sum |terms|; independent errors add up to a
//     standard deviation of at most u32 sqrt(k) S (a worst case: partial sums of random terms are
//     far below S). We allow 4 of those;
//   - one rounding of that fp32 value to the output dtype: half an ulp, u_out |value| with u_out =
//     2^-24, 2^-11, 2^-8 for fp32, fp16, bf16 (plus 2^-24 absolute, over fp16's subnormal spacing);
// so |got - exact| <= u_out |exact| + 4 sqrt(k) u32 S + 2^-24 for every element. The bound grows
// with sqrt(k) and the terms' size, not with the result's, so it stays tight for results near
// zero, and one wrong term (a missed row, a tile added twice, a transposed operand) breaks it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "ops/linear/linear_contract.h"
#include "ops/linear/linear_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"
#include "support/cbr_block.h"
#include "support/cpu_test_util.h"
#include "support/gpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using gpu_test::DeviceTensor;
using testing::OpBench;
using testing::random_values;

struct Case {
  const char* name;
  int64_t n, in, out;
  bool bias = true, dx = true;
  size_t offset_bytes = 0;  // every tensor starts this far past a 256-byte boundary
};

// The zoo's FC layers (src/model/zoo.cpp): digits_cnn's head (5x5x64 = 1600 -> 128 -> 10) at its
// batch of 64, VGG16's first and last classifier layers at batch 32 (256 would only make the
// float64 reference slower), then the edge cases.
const Case kCases[] = {
    {"digits fc1", 64, 1600, 128},
    {"digits fc2", 64, 128, 10},
    {"vgg classifier.0", 32, 25088, 4096},
    {"vgg classifier.6", 32, 4096, 1000},
    {"odd sizes", 7, 37, 13},
    {"one row", 1, 37, 13},
    {"no bias", 64, 128, 10, false},
    {"first layer (no dx)", 64, 1600, 128, true, false},
    {"odd sizes, no bias, no dx", 5, 37, 13, false, false},
    {"16-byte aligned pointers", 64, 128, 10, true, true, 16},
};

double unit_roundoff(DType dtype) {
  return dtype == DType::F16 ? std::ldexp(1.0, -11) : dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
}

// --- float64 reference ---

// A linear layer's inputs, as the dtype holds them, in float64. Row-major as the tensors are.
struct Inputs {
  std::vector<double> x, w, bias, dy;
};

Inputs random_inputs(const Case& c, DType dtype, std::mt19937& rng) {
  Inputs in;
  in.x = random_values(dtype, size_t(c.n * c.in), rng);
  in.w = random_values(dtype, size_t(c.out * c.in), rng);
  if (c.bias) in.bias = random_values(dtype, size_t(c.out), rng);
  in.dy = random_values(dtype, size_t(c.n * c.out), rng);
  return in;
}

// An exact result element and the sum of its terms' magnitudes (the S of the bound above).
struct Exact {
  double value = 0, magnitude = 0;
  void add(double term) { value += term, magnitude += std::abs(term); }
};

// Indices 0, step, 2 step, ... and the last one (tails of tiles are where bugs hide).
std::vector<int64_t> sampled(int64_t count, int64_t step) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; i += step) out.push_back(i);
  if (out.back() != count - 1) out.push_back(count - 1);
  return out;
}

// Rows and columns the reference computes: all of them, unless that exceeds ~1.3e8 multiply-adds
// (VGG's first classifier layer), then every 3rd, 7th, ... in both directions.
int64_t sample_step(int64_t rows, int64_t cols, int64_t k) {
  for (int64_t step : {1, 3, 7, 13, 31})
    if ((rows + step - 1) / step * ((cols + step - 1) / step) * k <= (int64_t(1) << 27)) return step;
  return 31;
}

struct Mismatches {
  size_t checked = 0, bad = 0;
  std::string first;  // the first bad element, with its bound
};

// Compares sampled elements of a row-major rows x cols result (k terms each) with `exact(r, c)`
// under the bound of the header comment.
template <class ExactFn>
Mismatches compare(const std::vector<double>& got, int64_t rows, int64_t cols, int64_t k, DType dtype, ExactFn exact) {
  Mismatches m;
  const int64_t step = sample_step(rows, cols, k);
  const std::vector<int64_t> cs = sampled(cols, step);
  for (int64_t r : sampled(rows, step))
    for (int64_t c : cs) {
      const Exact e = exact(r, c);
      const double g = got[size_t(r * cols + c)];
      const double bound = unit_roundoff(dtype) * std::abs(e.value) +
                           4 * std::sqrt(double(k)) * std::ldexp(e.magnitude, -24) + std::ldexp(1.0, -24);
      ++m.checked;
      if (std::abs(g - e.value) <= bound) continue;  // false for NaN: a poisoned element never written
      if (m.bad++ == 0)
        m.first = fmt::format("[{}, {}]: got {}, exact {}, bound {}", r, c, g, e.value, bound);
    }
  return m;
}

void expect_no_mismatch(const std::string& what, const Mismatches& m) {
  EXPECT_GT(m.checked, 0u) << what;
  EXPECT_EQ(m.bad, 0u) << what << ": " << m.bad << " of " << m.checked << " checked elements out of bounds, first "
                       << m.first;
}

// y = x w^T + bias, dx = dy w, dw = dy^T x, dbias = column sums of dy: each compared element by element.
struct Comparison {
  Mismatches y, dx, dw, dbias;
};

struct Results {
  std::vector<double> y, dx, dw, dbias;
};

Comparison compare_with_float64(const Case& c, DType dtype, const Inputs& in, const Results& got) {
  const int64_t n = c.n, f = c.in, o = c.out;
  Comparison cmp;
  cmp.y = compare(got.y, n, o, f, dtype, [&](int64_t i, int64_t j) {
    Exact e;
    for (int64_t t = 0; t < f; ++t) e.add(in.x[size_t(i * f + t)] * in.w[size_t(j * f + t)]);
    if (c.bias) e.add(in.bias[size_t(j)]);
    return e;
  });
  if (c.dx)
    cmp.dx = compare(got.dx, n, f, o, dtype, [&](int64_t i, int64_t j) {
      Exact e;
      for (int64_t t = 0; t < o; ++t) e.add(in.dy[size_t(i * o + t)] * in.w[size_t(t * f + j)]);
      return e;
    });
  cmp.dw = compare(got.dw, o, f, n, dtype, [&](int64_t i, int64_t j) {
    Exact e;
    for (int64_t t = 0; t < n; ++t) e.add(in.dy[size_t(t * o + i)] * in.x[size_t(t * f + j)]);
    return e;
  });
  if (c.bias)
    cmp.dbias = compare(got.dbias, 1, o, n, dtype, [&](int64_t, int64_t j) {
      Exact e;
      for (int64_t t = 0; t < n; ++t) e.add(in.dy[size_t(t * o + j)]);
      return e;
    });
  return cmp;
}

// --- The ops through the CUDA registry ---

// Runs a contract over device tensors (ids index `args`) as an executable does: its prepare
// function (algorithm choice, workspace request), the backend's workspace, the kernel; then waits.
template <template <class> class C>
void run_registered(cuda::CudaBackend& backend, OpBench& bench, const C<TensorId>& contract,
                    const std::vector<TensorArg>& args) {
  const Op op = make_op(contract, bench.layer());
  OpCall call{op, bench.program, {}, {}, bench.scalars, &backend};
  for (int id : op.in) call.in.push_back(id >= 0 ? args.at(size_t(id)) : TensorArg{});
  for (int id : op.out) call.out.push_back(id >= 0 ? args.at(size_t(id)) : TensorArg{});
  if (PrepareFn prepare = find_prepare(Device::CUDA, op.kind)) prepare(call);
  backend.finish_prepare();
  find_op(Device::CUDA, op.kind)(call);
  backend.synchronize();
}

// The device tensors of one case; outputs poisoned (NaN), absent ones empty.
struct DeviceLinear {
  std::optional<DeviceTensor> x, w, bias, dy, y, dx, dw, dbias;
};

// Forward then backward of `c` on the GPU; `twice` runs the backward a second time and checks
// that it reproduces its results bit for bit (the algorithms are fixed, the reductions ordered).
Results run_on_gpu(const Case& c, DType dtype, const Inputs& in, bool twice = false) {
  cuda::CudaBackend backend(0);
  register_cuda_ops();
  backend.activate();
  const size_t offset = c.offset_bytes / dtype_size(dtype);
  DeviceLinear d;
  d.x.emplace(dtype, in.x, offset), d.w.emplace(dtype, in.w, offset), d.dy.emplace(dtype, in.dy, offset);
  if (c.bias) d.bias.emplace(dtype, in.bias, offset), d.dbias.emplace(DeviceTensor::poisoned(dtype, size_t(c.out), offset));
  d.y.emplace(DeviceTensor::poisoned(dtype, size_t(c.n * c.out), offset));
  if (c.dx) d.dx.emplace(DeviceTensor::poisoned(dtype, size_t(c.n * c.in), offset));
  d.dw.emplace(DeviceTensor::poisoned(dtype, size_t(c.out * c.in), offset));

  OpBench bench(0, "fc", LayerKind::Linear);
  std::vector<TensorArg> args;
  auto bind = [&](const std::optional<DeviceTensor>& t, Shape shape) {
    if (!t) return TensorId();
    args.push_back(bench.arg(std::move(shape), t->ptr(), dtype));
    return TensorId(int(args.size()) - 1);
  };
  LinearForward<TensorId> fwd;
  fwd.x = bind(d.x, {c.n, c.in}), fwd.w = bind(d.w, {c.out, c.in}), fwd.bias = bind(d.bias, {c.out});
  fwd.y = bind(d.y, {c.n, c.out});
  LinearBackward<TensorId> bwd;
  bwd.dy = bind(d.dy, {c.n, c.out}), bwd.x = fwd.x, bwd.w = fwd.w;
  bwd.dx = bind(d.dx, {c.n, c.in}), bwd.dw = bind(d.dw, {c.out, c.in}), bwd.dbias = bind(d.dbias, {c.out});

  run_registered(backend, bench, fwd, args);
  run_registered(backend, bench, bwd, args);
  auto get = [](const std::optional<DeviceTensor>& t) { return t ? t->get() : std::vector<double>{}; };
  Results r{get(d.y), get(d.dx), get(d.dw), get(d.dbias)};
  if (twice) {
    for (auto* t : {&d.dx, &d.dw, &d.dbias})
      if (*t) (*t)->poison();
    run_registered(backend, bench, bwd, args);
    EXPECT_EQ(get(d.dx), r.dx) << "dx differs between two runs";
    EXPECT_EQ(get(d.dw), r.dw) << "dw differs between two runs";
    EXPECT_EQ(get(d.dbias), r.dbias) << "dbias differs between two runs";
  }
  return r;
}

class LinearGpu : public ::testing::TestWithParam<DType> {};

TEST_P(LinearGpu, OpsMatchFloat64OnTheZooShapesAndEdgeCases) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(20260);
  for (const Case& c : kCases) {
    SCOPED_TRACE(fmt::format("{} n={} in={} out={} {}", c.name, c.n, c.in, c.out, dtype_name(dtype)));
    const Inputs in = random_inputs(c, dtype, rng);
    const Results got = run_on_gpu(c, dtype, in, /*twice=*/true);
    EXPECT_TRUE(got.dx.empty() == !c.dx && got.dbias.empty() == !c.bias);
    const Comparison cmp = compare_with_float64(c, dtype, in, got);
    expect_no_mismatch("y", cmp.y);
    if (c.dx) expect_no_mismatch("dx", cmp.dx);
    expect_no_mismatch("dw", cmp.dw);
    if (c.bias) expect_no_mismatch("dbias", cmp.dbias);
  }
  // Which GEMMs cuBLASLt ran with their bias epilogues (and which fell back to the bias kernels).
  for (const std::string& line : cuda::linear_plans()) std::cout << "[linear plan] " << line << "\n";
}

// The comparison is sharp enough to see a weight read transposed (what a wrong op(A) would do on
// a square layer, where the shapes still fit): y and dx fail almost everywhere, while dw and
// dbias, which do not read the weight, still pass.
TEST_P(LinearGpu, ComparisonCatchesATransposedWeight) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(31);
  const Case c{"square", 16, 48, 48};
  const Inputs in = random_inputs(c, dtype, rng);
  const Comparison right = compare_with_float64(c, dtype, in, run_on_gpu(c, dtype, in));
  expect_no_mismatch("y", right.y);
  expect_no_mismatch("dx", right.dx);

  Inputs transposed = in;
  for (int64_t r = 0; r < c.out; ++r)
    for (int64_t col = 0; col < c.in; ++col) transposed.w[size_t(r * c.in + col)] = in.w[size_t(col * c.in + r)];
  const Comparison wrong = compare_with_float64(c, dtype, in, run_on_gpu(c, dtype, transposed));
  EXPECT_GT(wrong.y.bad, wrong.y.checked * 9 / 10) << "a transposed weight went unnoticed in y";
  EXPECT_GT(wrong.dx.bad, wrong.dx.checked * 9 / 10) << "a transposed weight went unnoticed in dx";
  expect_no_mismatch("dw (does not read w)", wrong.dw);
  expect_no_mismatch("dbias (does not read w)", wrong.dbias);
}

// The kernels that stand in for cuBLASLt's bias epilogues (used where it offers none), called
// directly so that they are tested whichever path the GEMMs above took.
TEST_P(LinearGpu, BiasKernelsMatchFloat64) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(5);
  for (const Case& c : {Case{"digits fc2", 64, 128, 10}, Case{"odd", 7, 37, 13}, Case{"one row", 1, 37, 4096},
                        Case{"wide", 256, 37, 4096}, Case{"tall", 1000, 37, 33}}) {
    SCOPED_TRACE(fmt::format("{} {}", c.name, dtype_name(dtype)));
    const std::vector<double> dy = random_values(dtype, size_t(c.n * c.out), rng);
    const std::vector<double> bias = random_values(dtype, size_t(c.out), rng);
    DeviceTensor dy_d(dtype, dy), bias_d(dtype, bias);
    DeviceTensor dbias_d = DeviceTensor::poisoned(dtype, size_t(c.out));
    DeviceTensor rows_d = DeviceTensor::poisoned(dtype, size_t(c.n * c.out));
    cuda::linear_bias_grad(dtype, dy_d.ptr(), c.n, c.out, dbias_d.ptr(), nullptr, "test");
    cuda::linear_broadcast_bias(dtype, bias_d.ptr(), c.n, c.out, rows_d.ptr(), nullptr, "test");
    gpu_test::sync();
    expect_no_mismatch("dbias", compare(dbias_d.get(), 1, c.out, c.n, dtype, [&](int64_t, int64_t j) {
                         Exact e;
                         for (int64_t t = 0; t < c.n; ++t) e.add(dy[size_t(t * c.out + j)]);
                         return e;
                       }));
    const std::vector<double> rows = rows_d.get();
    for (int64_t i = 0; i < c.n * c.out; ++i)
      ASSERT_EQ(rows[size_t(i)], bias[size_t(i % c.out)]) << "broadcast bias at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, LinearGpu, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// --- The layer in a compiled program ---

// Row-major a (n x k) times b^T (b: m x k) plus bias, in float64.
std::vector<double> times_transposed(const std::vector<double>& a, const std::vector<double>& b,
                                     const std::vector<double>& bias, int64_t n, int64_t k, int64_t m) {
  std::vector<double> out(size_t(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = bias.empty() ? 0.0 : bias[size_t(j)];
      for (int64_t t = 0; t < k; ++t) s += a[size_t(i * k + t)] * b[size_t(j * k + t)];
      out[size_t(i * m + j)] = s;
    }
  return out;
}

// The transpose of a row-major rows x cols matrix.
std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return t;
}

std::vector<double> column_sums(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> s(size_t(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) s[size_t(c)] += a[size_t(r * cols + c)];
  return s;
}

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

class LinearLayerGpu : public ::testing::TestWithParam<Precision> {};

// digits_cnn's head (flatten -> fc1 128 -> ReLU -> fc2 10) as a program without a loss: in fp16
// and bf16 the LINEAR ops read the compute copies of weight and bias and write their gradients
// in the compute dtype (the update reads them there). Against float64 on the
// values the GPU holds (masters rounded to the dtype, the stored fc1 output rounded), relative L2
// within gpu_test::tolerance: rounding of the results dominates.
TEST_P(LinearLayerGpu, TrainsThroughComputeCopiesOfWeightAndBias) {
  KILN_REQUIRE_GPU();
  const Precision precision = GetParam();
  const DType dtype = testing::activation_dtype(precision);
  const bool mixed = dtype != DType::F32;
  const int64_t n = 64, f = 1600, hidden = 128, classes = 10;
  Blueprint m("head");
  m.input(5, 5, 64).flatten("flatten").fc(int(hidden), true, "fc1").relu("relu").fc(int(classes), true, "fc2");
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = int(n), o.loss = false, o.input_grad = true;
  const Program program = compile(m, o);

  for (const char* p : {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) {
    const int copy = program.find(std::string(p) + ":compute");
    if (!mixed) {
      EXPECT_LT(copy, 0) << p;
      continue;
    }
    ASSERT_GE(copy, 0) << p;
    EXPECT_EQ(program.tensors[copy].dtype, dtype) << p;
  }
  // The fp32 parameters and gradients the LINEAR ops touch themselves: all four pairs in fp32,
  // none in mixed precision (there the ops go through the copies).
  std::vector<std::string> masters;
  auto note = [&](const std::vector<int>& ids, TensorRole role) {
    for (int id : ids)
      if (id >= 0 && program.tensors[id].role == role) masters.push_back(program.tensors[id].name);
  };
  for (const Op& op : program.forward)
    if (op.kind == OpKind::LINEAR_FWD) note(op.in, TensorRole::Param);
  for (const Op& op : program.backward)
    if (op.kind == OpKind::LINEAR_BWD) note(op.out, TensorRole::Grad);
  EXPECT_EQ(masters.size(), mixed ? 0u : 8u) << fmt::format("{}", fmt::join(masters, ", "));

  Executable exe(program, 11);
  std::mt19937 rng(77);
  const std::vector<float> x = random_values<float>(dtype, size_t(n * f), rng);
  const std::vector<float> dy = random_values<float>(dtype, size_t(n * classes), rng);
  testing::write_floats(exe, program.input, x);
  testing::write_floats(exe, program.output_grad, dy);
  exe.run_forward({0.f, 0, 1});
  // Read before backward: the memory plan gives fc1's output bytes to backward's tensors once
  // ReLU has read it.
  const std::vector<float> fc1_output = testing::read_floats(exe, "fc1");
  exe.run_backward({0.f, 0, 1});

  // What the GPU holds: the masters rounded to the dtype by the CAST, x and dy as written.
  auto weights = [&](const char* name) { return testing::rounded(dtype, as_double(testing::read_floats(exe, name))); };
  const std::vector<double> w1 = weights("fc1.weight"), b1 = weights("fc1.bias"), w2 = weights("fc2.weight"),
                            b2 = weights("fc2.bias"), xd = as_double(x), dyd = as_double(dy);
  const std::vector<double> y1_exact = times_transposed(xd, w1, b1, n, f, hidden);
  const std::vector<double> y1 = testing::rounded(dtype, y1_exact);  // stored in the dtype
  std::vector<double> h = y1, dh = testing::rounded(dtype, times_transposed(dyd, transposed(w2, classes, hidden), {}, n, classes, hidden));
  for (size_t i = 0; i < h.size(); ++i)
    if (y1[i] <= 0) h[i] = 0, dh[i] = 0;  // ReLU and its backward
  const std::vector<double> y2 = times_transposed(h, w2, b2, n, hidden, classes);
  const std::vector<double> dx = times_transposed(dh, transposed(w1, hidden, f), {}, n, hidden, f);
  const std::vector<double> dw1 = times_transposed(transposed(dh, n, hidden), transposed(xd, n, f), {}, hidden, n, f);
  const std::vector<double> dw2 = times_transposed(transposed(dyd, n, classes), transposed(h, n, hidden), {}, classes, n, hidden);

  const double tol = gpu_test::tolerance(dtype);
  using testing::expect_close_to_reference;
  using testing::read_floats;
  expect_close_to_reference("fc1 output", fc1_output, y1_exact, tol);
  expect_close_to_reference("fc2 output", read_floats(exe, "fc2"), y2, tol);
  expect_close_to_reference("input gradient", read_floats(exe, program.tensors[program.input_grad].name), dx, tol);
  expect_close_to_reference("fc1.weight.grad", read_floats(exe, "fc1.weight.grad"), dw1, tol);
  expect_close_to_reference("fc1.bias.grad", read_floats(exe, "fc1.bias.grad"), column_sums(dh, n, hidden), tol);
  expect_close_to_reference("fc2.weight.grad", read_floats(exe, "fc2.weight.grad"), dw2, tol);
  expect_close_to_reference("fc2.bias.grad", read_floats(exe, "fc2.bias.grad"), column_sums(dyd, n, classes), tol);
}

INSTANTIATE_TEST_SUITE_P(Precisions, LinearLayerGpu, ::testing::Values(Precision::FP32, Precision::FP16, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace kiln
