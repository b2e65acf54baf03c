// CONV_FWD / CONV_DGRAD / CONV_WGRAD on the GPU under every kind of window torchvision's CNNs use
// (groups, depthwise, a depthwise multiplier, dilation, two strides, a rectangular kernel, uneven
// padding) and with the bias, through the CUDA op registry as an executable runs them, in fp32,
// fp16 and bf16, element by element against a float64 loop written here from PyTorch's
// nn.Conv2d definition (independent of kiln's CPU kernels).
//
// Tolerances. The inputs are random normals already rounded to the io dtype (the bias to fp32),
// and the float64 reference reads those same values, so rounding of the inputs is no error here.
// An element of a result is a sum of t products (t = the taps that land inside the input: C/groups
// x R x S for y, fewer at the borders; for dx the filters' taps that reach it; for dw N x Ho x Wo
// positions; for dbias N x Ho x Wo values of dy). cuDNN accumulates in fp32 (kiln's fp32 graphs
// exclude TF32 plans), so the GPU may differ from the exact value by
//   - fp32 accumulation: each addition rounds by at most u32 = 2^-24 relative to the partial sum
//     it makes, at most S = sum |terms|; independent errors add up to a standard deviation of at
//     most u32 sqrt(t) S. We allow 4 of those (as the linear layer's test);
//   - one rounding to the output dtype: u_out |exact|, u_out = 2^-24, 2^-11, 2^-8 for fp32, fp16,
//     bf16 (dbias is fp32 in every precision); plus 2^-24 absolute, over fp16's subnormal spacing;
//   - with a bias, which is added after cuDNN's convolution has rounded y to the io dtype, that
//     first rounding as well: u_out |exact convolution|.
// So |got - exact| <= u_out (|exact| + [bias] |conv|) + 4 sqrt(t) u32 S + 2^-24 for every element.
// The bound follows the terms' size, not the result's, so one wrong term (a tap of another group,
// a padding on the wrong side, an undilated tap) breaks it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/conv_window.h"
#include "ops/conv/conv_contract.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/op_call.h"
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
  int64_t n, h, w, c, k, r, s;
  ConvWindow win;
  bool bias = true;
};

// ConvWindow's fields in order: stride_h, stride_w, pad_top, pad_left, pad_bottom, pad_right,
// dilation_h, dilation_w, groups.
const Case kCases[] = {
    {"groups 2", 2, 9, 9, 8, 12, 3, 3, {1, 1, 1, 1, 1, 1, 1, 1, 2}},
    {"depthwise (C = K = groups)", 2, 10, 10, 16, 16, 3, 3, {1, 1, 1, 1, 1, 1, 1, 1, 16}},
    {"depthwise, stride 2 (MobileNet)", 2, 11, 11, 32, 32, 3, 3, {2, 2, 1, 1, 1, 1, 1, 1, 32}},
    {"depthwise 7x7 (ConvNeXt)", 2, 9, 9, 24, 24, 7, 7, {1, 1, 3, 3, 3, 3, 1, 1, 24}},
    {"depthwise multiplier 2 (K = 2C)", 2, 9, 9, 8, 16, 3, 3, {1, 1, 1, 1, 1, 1, 1, 1, 8}},
    {"dilation 2", 2, 11, 11, 8, 16, 3, 3, {1, 1, 2, 2, 2, 2, 2, 2, 1}},
    {"stride (2, 1)", 2, 9, 9, 8, 8, 3, 3, {2, 1, 1, 1, 1, 1, 1, 1, 1}},
    {"kernel 3x5", 2, 8, 10, 8, 16, 3, 5, {1, 1, 1, 2, 1, 2, 1, 1, 1}},
    {"kernel 1x7 (Inception)", 2, 9, 9, 16, 8, 1, 7, {1, 1, 0, 3, 0, 3, 1, 1, 1}},
    {"padding (1, 0, 2, 1)", 2, 9, 9, 8, 16, 3, 3, {1, 1, 1, 0, 2, 1, 1, 1, 1}},
    {"all at once", 2, 12, 11, 16, 8, 3, 5, {2, 1, 1, 0, 2, 1, 2, 1, 4}},
    {"groups 3, odd channels", 3, 7, 7, 9, 6, 3, 3, {1, 1, 1, 1, 1, 1, 1, 1, 3}},
    {"groups 3, odd channels, no bias", 3, 7, 7, 9, 6, 3, 3, {1, 1, 1, 1, 1, 1, 1, 1, 3}, false},
    {"square window with a bias", 2, 8, 8, 8, 16, 3, 3, ConvWindow::square(1, 1)},
    {"square window, stride 2, no bias", 2, 9, 9, 8, 16, 3, 3, ConvWindow::square(2, 1), false},
};

double unit_roundoff(DType dtype) {
  return dtype == DType::F16 ? std::ldexp(1.0, -11) : dtype == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
}

int64_t out_h(const Case& c) { return c.win.out_h(c.h, c.r); }
int64_t out_w(const Case& c) { return c.win.out_w(c.w, c.s); }

// --- float64 reference ---

struct Inputs {
  std::vector<double> x, w, bias, dy;  // NHWC, KRSC (K, R, S, C/groups), K (fp32), NHWC
};

Inputs random_inputs(const Case& c, DType dtype, std::mt19937& rng) {
  Inputs in;
  in.x = random_values(dtype, size_t(c.n * c.h * c.w * c.c), rng);
  in.w = random_values(dtype, size_t(c.k * c.r * c.s * (c.c / c.win.groups)), rng);
  if (c.bias) in.bias = random_values(DType::F32, size_t(c.k), rng);
  in.dy = random_values(dtype, size_t(c.n * out_h(c) * out_w(c) * c.k), rng);
  return in;
}

// An exact result element: its value, the convolution's part of it (without the bias), the sum
// of its terms' magnitudes and their count (S and t of the bound above).
struct Exact {
  double value = 0, conv = 0, magnitude = 0;
  int64_t terms = 0;
  void add_product(double term) { value += term, conv += term, magnitude += std::abs(term), ++terms; }
};

struct Reference {
  std::vector<Exact> y, dx, dw, dbias;
};

// Every multiply-add of nn.Conv2d(groups=G): output channel k of group g = k / (K/G) reads input
// channels g C/G ... (g+1) C/G - 1; output pixel (oh, ow) reads input row oh stride_h - pad_top +
// r dilation_h and column ow stride_w - pad_left + s dilation_w, zeros outside the input.
Reference reference(const Case& c, const Inputs& in) {
  const ConvWindow& v = c.win;
  const int64_t ho = out_h(c), wo = out_w(c), cg = c.c / v.groups, kg = c.k / v.groups;
  Reference ref{std::vector<Exact>(size_t(c.n * ho * wo * c.k)), std::vector<Exact>(size_t(c.n * c.h * c.w * c.c)),
                std::vector<Exact>(size_t(c.k * c.r * c.s * cg)), std::vector<Exact>(size_t(c.k))};
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow)
        for (int64_t k = 0; k < c.k; ++k) {
          const size_t yi = size_t(((n * ho + oh) * wo + ow) * c.k + k);
          const double dy = in.dy[yi];
          ref.dbias[size_t(k)].add_product(dy);
          for (int64_t r = 0; r < c.r; ++r) {
            const int64_t ih = oh * v.stride_h - v.pad_top + r * v.dilation_h;
            if (ih < 0 || ih >= c.h) continue;
            for (int64_t s = 0; s < c.s; ++s) {
              const int64_t iw = ow * v.stride_w - v.pad_left + s * v.dilation_w;
              if (iw < 0 || iw >= c.w) continue;
              for (int64_t cc = 0; cc < cg; ++cc) {
                const size_t xi = size_t(((n * c.h + ih) * c.w + iw) * c.c + (k / kg) * cg + cc);
                const size_t wi = size_t(((k * c.r + r) * c.s + s) * cg + cc);
                ref.y[yi].add_product(in.x[xi] * in.w[wi]);
                ref.dx[xi].add_product(dy * in.w[wi]);
                ref.dw[wi].add_product(dy * in.x[xi]);
              }
            }
          }
        }
  if (c.bias)
    for (size_t i = 0; i < ref.y.size(); ++i) ref.y[i].value += in.bias[i % size_t(c.k)];
  return ref;
}

struct Mismatches {
  size_t checked = 0, bad = 0;
  double worst = 0;   // the largest |got - exact| / bound
  std::string first;  // the first bad element, with its bound
};

// Compares every element with the bound of the header comment; `u_out` of the result's dtype,
// `rounded_twice`: a bias added after the convolution's own rounding.
Mismatches compare(const std::vector<double>& got, const std::vector<Exact>& exact, double u_out,
                   bool rounded_twice) {
  Mismatches m;
  if (got.size() != exact.size()) {
    m.bad = 1, m.first = fmt::format("{} elements, expected {}", got.size(), exact.size());
    return m;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const Exact& e = exact[i];
    const double bound = u_out * (std::abs(e.value) + (rounded_twice ? std::abs(e.conv) : 0.0)) +
                         4 * std::sqrt(double(std::max<int64_t>(e.terms, 1))) * std::ldexp(e.magnitude, -24) +
                         std::ldexp(1.0, -24);
    const double err = std::abs(got[i] - e.value);
    ++m.checked;
    m.worst = std::max(m.worst, std::isnan(err) ? INFINITY : err / bound);
    if (err <= bound) continue;  // false for NaN: a poisoned element never written
    if (m.bad++ == 0) m.first = fmt::format("[{}]: got {}, exact {}, bound {}", i, got[i], e.value, bound);
  }
  return m;
}

void expect_no_mismatch(const std::string& what, const Mismatches& m) {
  EXPECT_GT(m.checked, 0u) << what;
  EXPECT_EQ(m.bad, 0u) << what << ": " << m.bad << " of " << m.checked << " elements out of bounds, first "
                       << m.first;
}

// --- The ops through the CUDA registry ---

// Runs a contract over device tensors (ids index `args`) as an executable does: its prepare
// function (plan choice, workspace request), the backend's workspace, the kernel; then waits.
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

struct Results {
  std::vector<double> y, dx, dw, dbias;
};

// The backend's default settings (bounded tuning), without a plan cache file, so that the plans
// are chosen here rather than read from an earlier run's.
CudaOptions test_options() {
  CudaOptions o;
  o.plan_cache = "none";
  return o;
}

// Forward, dgrad and wgrad of `c` on the GPU, outputs poisoned (NaN) first. The wgrad runs twice:
// its bias sums add partials in a fixed order, so dbias must repeat bit for bit.
Results run_on_gpu(const Case& c, DType dtype, const Inputs& in) {
  cuda::CudaBackend backend(0, test_options());
  register_cuda_ops();
  backend.activate();
  const int64_t ho = out_h(c), wo = out_w(c), cg = c.c / c.win.groups;
  DeviceTensor x(dtype, in.x), w(dtype, in.w), dy(dtype, in.dy);
  DeviceTensor y = DeviceTensor::poisoned(dtype, size_t(c.n * ho * wo * c.k));
  DeviceTensor dx = DeviceTensor::poisoned(dtype, in.x.size()), dw = DeviceTensor::poisoned(dtype, in.w.size());
  std::optional<DeviceTensor> bias, dbias;
  if (c.bias) bias.emplace(DType::F32, in.bias), dbias.emplace(DeviceTensor::poisoned(DType::F32, size_t(c.k)));

  OpBench bench(0, "conv", LayerKind::Conv);
  std::vector<TensorArg> args;
  auto bind = [&](void* ptr, Shape shape, DType type) {
    args.push_back(bench.arg(std::move(shape), ptr, type));
    return TensorId(int(args.size()) - 1);
  };
  const Shape x_shape{c.n, c.h, c.w, c.c}, w_shape{c.k, c.r, c.s, cg}, y_shape{c.n, ho, wo, c.k};
  ConvForward<TensorId> fwd;
  fwd.x = bind(x.ptr(), x_shape, dtype), fwd.w = bind(w.ptr(), w_shape, dtype);
  fwd.bias = bias ? bind(bias->ptr(), {c.k}, DType::F32) : TensorId();
  fwd.y = bind(y.ptr(), y_shape, dtype);
  fwd.window = c.win;
  ConvDgrad<TensorId> dgrad;
  dgrad.dy = bind(dy.ptr(), y_shape, dtype), dgrad.w = fwd.w, dgrad.dx = bind(dx.ptr(), x_shape, dtype);
  dgrad.window = c.win;
  ConvWgrad<TensorId> wgrad;
  wgrad.dy = dgrad.dy, wgrad.x = fwd.x, wgrad.dw = bind(dw.ptr(), w_shape, dtype);
  wgrad.dbias = dbias ? bind(dbias->ptr(), {c.k}, DType::F32) : TensorId();
  wgrad.window = c.win;

  run_registered(backend, bench, fwd, args);
  run_registered(backend, bench, dgrad, args);
  run_registered(backend, bench, wgrad, args);
  Results r{y.get(), dx.get(), dw.get(), dbias ? dbias->get() : std::vector<double>{}};
  if (dbias) {
    dbias->poison();
    run_registered(backend, bench, wgrad, args);
    EXPECT_EQ(dbias->get(), r.dbias) << "dbias differs between two runs";
  }
  return r;
}

class ConvWindowGpu : public ::testing::TestWithParam<DType> {};

TEST_P(ConvWindowGpu, OpsMatchFloat64ForEveryWindow) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  std::mt19937 rng(4902);
  for (const Case& c : kCases) {
    const std::string label = fmt::format("{}: N={} {}x{} C={} -> K={} {}x{} {}", c.name, c.n, c.h, c.w, c.c, c.k,
                                          c.r, c.s, dtype_name(dtype));
    SCOPED_TRACE(label);
    const Inputs in = random_inputs(c, dtype, rng);  // fresh inputs for every case and dtype
    const Reference ref = reference(c, in);
    const Results got = run_on_gpu(c, dtype, in);
    const double u = unit_roundoff(dtype);
    const Mismatches y = compare(got.y, ref.y, u, c.bias), dx = compare(got.dx, ref.dx, u, false),
                     dw = compare(got.dw, ref.dw, u, false);
    expect_no_mismatch("y", y);
    expect_no_mismatch("dx", dx);
    expect_no_mismatch("dw", dw);
    std::string worst = fmt::format("y {:.3f} dx {:.3f} dw {:.3f}", y.worst, dx.worst, dw.worst);
    if (c.bias) {
      const Mismatches db = compare(got.dbias, ref.dbias, unit_roundoff(DType::F32), false);
      expect_no_mismatch("dbias", db);
      worst += fmt::format(" dbias {:.3f}", db.worst);
    }
    // How close each result came to its bound (1 = at it), for whoever tightens or questions it.
    std::printf("[conv window] %s: worst error / bound: %s\n", label.c_str(), worst.c_str());
  }
  // Which cuDNN engines ran each window (docs/cudnn-support.md's record of what cuDNN offers).
  for (const cuda::TuneRecord& r : cuda::CudaBackend(0, test_options()).graphs().tune_records())
    if (r.problem.io == dtype)
      std::printf("[conv window plan] %s %s: %s (%d offered, %d timed, %.3f ms)\n", r.kind.c_str(),
                  cuda::conv_problem_str(r.problem).c_str(), r.plan_name.c_str(), r.plans_offered, r.plans_tried,
                  r.best_plan_ms);
}

INSTANTIATE_TEST_SUITE_P(DTypes, ConvWindowGpu, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The comparison sees a window read wrongly: the same inputs with the padding moved from the
// bottom to the top (what swapped pre and post padding would compute) fail the bound.
TEST(ConvWindowGpuCheck, ComparisonCatchesPaddingOnTheWrongSide) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(7);
  const Case right{"padding (1, 0, 2, 1)", 2, 9, 9, 8, 16, 3, 3, {1, 1, 1, 0, 2, 1, 1, 1, 1}};
  Case swapped = right;
  swapped.win.pad_top = right.win.pad_bottom, swapped.win.pad_bottom = right.win.pad_top;
  swapped.win.pad_left = right.win.pad_right, swapped.win.pad_right = right.win.pad_left;
  const Inputs in = random_inputs(right, DType::F32, rng);
  const Results got = run_on_gpu(swapped, DType::F32, in);
  const Reference ref = reference(right, in);
  const Mismatches y = compare(got.y, ref.y, unit_roundoff(DType::F32), true);
  EXPECT_GT(y.bad, y.checked / 2) << "padding on the wrong side went unnoticed in y";
}

}  // namespace
}  // namespace kiln
