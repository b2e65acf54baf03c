// The pool ops on the GPU in fp32, fp16 and bf16, run through the CUDA op table as an executable
// runs them, against the CPU ops run in fp32 on the same values: inputs are drawn already rounded
// to the dtype, so both sides read identical numbers, and what separates them is only the GPU's one
// rounding of each result to the dtype (and, for averages, fp32 sums where the CPU sums in double).
//
// Tolerances, per element as mixed_err measures them (|got - want| / (1 + |want|)):
//  - max pool forward (y and argmax) and inference: exact in every dtype; y is one of the inputs.
//  - max pool backward: exact in every dtype against the CPU's fp32 result rounded to the dtype;
//    both add the same dy values in fp32 in the same order (output raster order, from +0), and
//    the GPU rounds the sum once.
//  - average pool forward/backward and global average pool: average_tolerance() below; average pool
//    backward where the divisors differ (count_include_pad off with padding, ceil mode's hanging
//    windows) and adaptive average pool backward: quotient_sum_tolerance().
//  - adaptive average pool forward: average_tolerance() of its largest range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ops/pool/adaptive_pool_cpu.h"
#include "ops/pool/pool_contract.h"
#include "ops/pool/pool_cpu.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"
#include "support/gpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using namespace gpu_test;
using testing::mixed_err;

// The largest relative error of rounding a value to `dtype`.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F16: return std::ldexp(1.0, -11);
    case DType::BF16: return std::ldexp(1.0, -8);
    default: return std::ldexp(1.0, -24);
  }
}

// An average of up to `terms` values: the GPU rounds its fp32 result once to the dtype (at most
// u(dtype) * |want|; doubled for margin), and its fp32 sum errs from the CPU's double one by at
// most (terms - 1) * u(fp32) * sum|x_i| (recursive summation), which after the division by the
// divisor (>= terms) is at most terms * u(fp32) * mean|x_i|; the inputs are N(0, 1), whose mean
// |x| over a window stays far below 4. fp32: 2.3e-6 for a 3x3 window, 1.2e-5 for a 7x7 map; fp16
// adds 9.8e-4 and bf16 7.8e-3 for the final rounding.
double average_tolerance(DType dtype, int64_t terms) {
  return 2 * unit_roundoff(dtype) + 4.0 * double(terms) * unit_roundoff(DType::F32);
}

// A sum of up to `terms` quotients dy / d with divisors d >= 1 (each dy divided by its own output's
// divisor): the GPU rounds each quotient and each partial sum in fp32, so it errs from the CPU's
// double by at most terms * u(fp32) * sum |dy / d| <= terms^2 * u(fp32) * max |dy|, and the N(0, 1)
// draws stay below 5; doubled final rounding as above. fp32 with 9 terms: 2.4e-5.
double quotient_sum_tolerance(DType dtype, int64_t terms) {
  return 2 * unit_roundoff(dtype) + 5.0 * double(terms) * double(terms) * unit_roundoff(DType::F32);
}

// Every element within `tol` of the reference (tol 0: equal) and finite where the reference is:
// outputs start poisoned (NaN), and mixed_err alone would pass over a NaN it never wrote.
void expect_matches(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                    double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_TRUE(std::any_of(want.begin(), want.end(), [](double v) { return v != 0; }))
      << what << ": the reference is all zeros, so nothing would be compared";
  size_t unwritten = 0;
  for (size_t i = 0; i < got.size(); ++i) unwritten += !std::isfinite(got[i]) && std::isfinite(want[i]);
  EXPECT_EQ(unwritten, 0u) << what << ": elements not finite (never written?)";
  EXPECT_LE(mixed_err(got, want), tol) << what;
}

// The value next to v in `dtype`, one unit in the last place away from zero.
double one_ulp_away(DType dtype, double v) {
  const float f = static_cast<float>(v);
  if (dtype == DType::F16) return testing::half_to_float(uint16_t(testing::float_to_half(f) + 1));
  if (dtype == DType::BF16) return testing::bf16_to_float(uint16_t(testing::float_to_bf16(f) + 1));
  return std::nextafter(f, std::copysign(std::numeric_limits<float>::infinity(), f));
}

// A U8 device tensor (argmax: window indices) starting `offset` elements into its buffer (1
// breaks 16-byte alignment, as for the activations); poisoned to 255, which only the last position
// of a 16x16 window can be, so an index the forward never writes shows as a mismatch.
struct DeviceIndices {
  DeviceBytes bytes;
  DeviceIndices(size_t count, size_t offset_elems) : bytes(count, offset_elems) { bytes.poison(0xFF); }
  uint8_t* ptr() const { return bytes.ptr(); }
  void set(const std::vector<uint8_t>& v) { bytes.buf.upload(v.data(), v.size(), bytes.offset); }
  std::vector<uint8_t> get() const { return bytes.get(); }
};

// Runs pool ops through the registries as an executable would: CPU ops over host buffers, CUDA
// ops over device memory on a CUDA backend's main stream. Errors name the layer "stem.pool".
class PoolOps {
 public:
  PoolOps() { register_cuda_ops(); }

  TensorArg arg(Shape shape, void* data, DType dtype = DType::F32) { return bench_.arg(std::move(shape), data, dtype); }

  template <template <class> class C>
  void run(Device device, const C<TensorId>& contract, std::vector<TensorArg> in, std::vector<TensorArg> out) {
    const Op op = make_op(contract, bench_.layer());
    OpCall call{op, bench_.program, std::move(in), std::move(out), bench_.scalars,
                device == Device::CUDA ? &backend_ : nullptr};
    // Uploads and poisoning go through the legacy default stream, which the backend's
    // non-blocking streams do not wait for: finish them before the op's launch.
    if (device == Device::CUDA) sync();
    find_op(device, op.kind)(call);
    if (device == Device::CUDA) sync();
  }

 private:
  testing::OpBench bench_{1, "stem.pool"};
  cuda::CudaBackend backend_{0};
};

struct PoolCase {
  const char* what;
  int64_t n, h, w, c;
  int kernel, stride, padding;
  size_t offset = 0;  // elements before every device tensor: 1 breaks 16-byte alignment (scalar path)
  bool ceil_mode = false, count_include_pad = true;  // PyTorch's (count_include_pad: average pooling)
};

const PoolCase kCases[] = {
    {"2x2/2 (VGG), C % 8 == 0", 2, 8, 10, 16, 2, 2, 0},
    {"2x2/2 (digits), odd 7x7 drops a row and column, C = 3", 3, 7, 7, 3, 2, 2, 0},
    {"3x3/2 pad 1 (ResNet stem), odd 13x11, C = 64", 2, 13, 11, 64, 3, 2, 1},
    {"3x3/2 pad 1, C = 12 (fp32 in packs of 4, fp16/bf16 scalar)", 2, 9, 9, 12, 3, 2, 1},
    {"3x3/2 pad 1, C = 5", 1, 7, 5, 5, 3, 2, 1},
    {"3x3/2 pad 1, misaligned pointers (scalar path at C = 64)", 2, 13, 11, 64, 3, 2, 1, 1},
    {"3x3/2 pad 1, 8 x 56x56x64: many blocks", 8, 56, 56, 64, 3, 2, 1},
    {"3x3/1 pad 1: inputs in up to 9 windows", 1, 6, 6, 8, 3, 1, 1},
    {"1x1/2: inputs no window covers", 1, 9, 9, 8, 1, 2, 0},
    // The largest window a U8 argmax indexes (positions 0..255), in both backward kernels.
    {"16x16/8 pad 8: overlapping, padded, window indices up to 255", 2, 20, 20, 8, 16, 8, 8},
    {"16x16/16 (tiled backward), window indices up to 255", 2, 32, 32, 8, 16, 16, 0},
    // Ceil mode (the last window hangs over the bottom/right edge) and count_include_pad off.
    {"3x3/2 pad 1 ceil, padding not counted, 8x10, C = 16", 2, 8, 10, 16, 3, 2, 1, 0, true, false},
    {"3x3/2 ceil (GoogLeNet's), 14x14 -> 7x7, C = 64", 2, 14, 14, 64, 3, 2, 0, 0, true, true},
    {"2x2/2 ceil, odd 7x9: hanging windows, not the tiled backward, C = 12", 2, 7, 9, 12, 2, 2, 0, 0, true, true},
    {"3x3/1 pad 1, padding not counted, C = 5", 1, 6, 6, 5, 3, 1, 1, 0, false, false},
    {"2x2/2 pad 1 ceil (PyTorch's rule drops the last window), misaligned, C = 8", 2, 7, 5, 8, 2, 2, 1, 1, true,
     false},
};

std::string label(DType dtype, const PoolCase& k) { return std::string(name(dtype)) + " " + k.what; }

struct Layout {
  cpu::PoolGeom g;
  Shape x, y;
  size_t nx, ny;
  PoolWindow window;
};

Layout layout(const PoolCase& k) {
  const Shape x = {k.n, k.h, k.w, k.c};
  const cpu::PoolGeom g = cpu::PoolGeom::make(x, k.kernel, k.stride, k.padding, "pool", "test", k.ceil_mode);
  return {g, x, g.out_shape(), size_t(numel(x)), size_t(numel(g.out_shape())),
          {k.kernel, k.stride, k.padding, k.ceil_mode}};
}

std::vector<double> doubles(const std::vector<float>& v) { return testing::cast<double>(v); }

// Max pooling on the CPU in fp32: y, argmax (U8 window indices) and, for `dy`, dx.
struct CpuMaxPool {
  std::vector<float> y, dx;
  std::vector<uint8_t> argmax;
};

CpuMaxPool cpu_maxpool(PoolOps& ops, const Layout& l, std::vector<float> x, std::vector<float> dy) {
  CpuMaxPool r{std::vector<float>(l.ny), std::vector<float>(l.nx), std::vector<uint8_t>(l.ny)};
  ops.run(Device::CPU, MaxPoolForward<TensorId>{0, 1, 2, l.window}, {ops.arg(l.x, x.data())},
          {ops.arg(l.y, r.y.data()), ops.arg(l.y, r.argmax.data(), DType::U8)});
  ops.run(Device::CPU, MaxPoolBackward<TensorId>{0, 1, 2, l.window},
          {ops.arg(l.y, dy.data()), ops.arg(l.y, r.argmax.data(), DType::U8)}, {ops.arg(l.x, r.dx.data())});
  return r;
}

// The forward on the GPU: y and argmax (and the inference op's y, which must be the same).
struct GpuMaxPool {
  std::vector<double> y, y_inference;
  std::vector<uint8_t> argmax;
};

GpuMaxPool gpu_maxpool(PoolOps& ops, const Layout& l, DType dtype, const std::vector<double>& x, size_t offset) {
  const DeviceTensor xd(dtype, x, offset);
  DeviceTensor y = DeviceTensor::poisoned(dtype, l.ny, offset), yi = DeviceTensor::poisoned(dtype, l.ny, offset);
  DeviceIndices arg(l.ny, offset);
  ops.run(Device::CUDA, MaxPoolForward<TensorId>{0, 1, 2, l.window}, {ops.arg(l.x, xd.ptr(), dtype)},
          {ops.arg(l.y, y.ptr(), dtype), ops.arg(l.y, arg.ptr(), DType::U8)});
  ops.run(Device::CUDA, MaxPoolInference<TensorId>{0, 1, l.window}, {ops.arg(l.x, xd.ptr(), dtype)},
          {ops.arg(l.y, yi.ptr(), dtype)});
  return {y.get(), yi.get(), arg.get()};
}

std::vector<double> gpu_maxpool_backward(PoolOps& ops, const Layout& l, DType dtype, const std::vector<double>& dy,
                                         const std::vector<uint8_t>& argmax, size_t offset) {
  const DeviceTensor dyd(dtype, dy, offset);
  DeviceIndices arg(l.ny, offset);
  arg.set(argmax);
  DeviceTensor dx = DeviceTensor::poisoned(dtype, l.nx, offset);
  ops.run(Device::CUDA, MaxPoolBackward<TensorId>{0, 1, 2, l.window},
          {ops.arg(l.y, dyd.ptr(), dtype), ops.arg(l.y, arg.ptr(), DType::U8)}, {ops.arg(l.x, dx.ptr(), dtype)});
  return dx.get();
}

class PoolGpu : public ::testing::TestWithParam<DType> {};

TEST_P(PoolGpu, MaxPoolMatchesCpuExactly) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(101);
  for (const PoolCase& k : kCases) {
    SCOPED_TRACE(label(dtype, k));
    const Layout l = layout(k);
    const std::vector<double> x = random_values(dtype, l.nx, rng), dy = random_values(dtype, l.ny, rng);
    const CpuMaxPool want = cpu_maxpool(ops, l, testing::cast<float>(x), testing::cast<float>(dy));
    const GpuMaxPool got = gpu_maxpool(ops, l, dtype, x, k.offset);
    expect_matches("y", got.y, doubles(want.y), 0);
    expect_matches("inference y", got.y_inference, doubles(want.y), 0);
    EXPECT_EQ(got.argmax, want.argmax) << "argmax";
    // The CPU's argmax in, so that a wrong forward cannot hide a wrong backward.
    const std::vector<double> dx = gpu_maxpool_backward(ops, l, dtype, dy, want.argmax, k.offset);
    expect_matches("dx", dx, rounded(dtype, doubles(want.dx)), 0);
  }
}

// Many ties (values from {1, 2, 3}) in overlapping 3x3/2 windows: argmax keeps the first maximum
// in raster order, and dx collects dy from every window whose argmax lands on one element.
TEST_P(PoolGpu, MaxPoolTiesKeepTheFirstMaximum) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(102);
  const PoolCase k{"ties", 2, 9, 11, 16, 3, 2, 1};
  const Layout l = layout(k);
  std::vector<double> x(l.nx);
  for (double& v : x) v = double(1 + rng() % 3);
  const std::vector<double> dy = random_values(dtype, l.ny, rng);
  const CpuMaxPool want = cpu_maxpool(ops, l, testing::cast<float>(x), testing::cast<float>(dy));
  const GpuMaxPool got = gpu_maxpool(ops, l, dtype, x, 0);
  EXPECT_EQ(got.argmax, want.argmax) << "argmax";
  expect_matches("y", got.y, doubles(want.y), 0);
  expect_matches("dx", gpu_maxpool_backward(ops, l, dtype, dy, want.argmax, 0), rounded(dtype, doubles(want.dx)), 0);
}

// As on the CPU (and in PyTorch), a NaN in a window wins and is not hidden.
TEST_P(PoolGpu, MaxPoolNaNWinsAsOnCpu) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(103);
  const PoolCase k{"NaN", 2, 9, 9, 16, 3, 2, 1};
  const Layout l = layout(k);
  std::vector<double> x = random_values(dtype, l.nx, rng);
  for (size_t i = 5; i < x.size(); i += 37) x[i] = std::numeric_limits<double>::quiet_NaN();
  const CpuMaxPool want = cpu_maxpool(ops, l, testing::cast<float>(x), std::vector<float>(l.ny, 1.f));
  const GpuMaxPool got = gpu_maxpool(ops, l, dtype, x, 0);
  EXPECT_EQ(got.argmax, want.argmax) << "argmax";
  size_t nans = 0, bad = 0;
  for (size_t i = 0; i < l.ny; ++i) {
    nans += std::isnan(want.y[i]);
    bad += std::isnan(got.y[i]) != std::isnan(want.y[i]) || (!std::isnan(got.y[i]) && got.y[i] != want.y[i]);
  }
  EXPECT_GT(nans, 0u) << "no window holds a NaN; the test checks nothing";
  EXPECT_EQ(bad, 0u) << "y elements differ from the CPU's";
}

// The CPU's average pooling in fp32 (y, and dx for dy), with the given divisor rule.
std::pair<std::vector<float>, std::vector<float>> cpu_avgpool(PoolOps& ops, const Layout& l, bool count_include_pad,
                                                              std::vector<float> x, std::vector<float> dy) {
  std::vector<float> y(l.ny), dx(l.nx);
  ops.run(Device::CPU, AvgPoolForward<TensorId>{0, 1, l.window, count_include_pad}, {ops.arg(l.x, x.data())},
          {ops.arg(l.y, y.data())});
  ops.run(Device::CPU, AvgPoolBackward<TensorId>{0, 1, l.window, count_include_pad}, {ops.arg(l.y, dy.data())},
          {ops.arg(l.x, dx.data())});
  return {y, dx};
}

TEST_P(PoolGpu, AvgPoolMatchesCpu) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(104);
  int other_rule_checked = 0;
  for (const PoolCase& k : kCases) {
    SCOPED_TRACE(label(dtype, k));
    const Layout l = layout(k);
    const std::vector<double> x = random_values(dtype, l.nx, rng), dy = random_values(dtype, l.ny, rng);
    const auto [y, dx] = cpu_avgpool(ops, l, k.count_include_pad, testing::cast<float>(x), testing::cast<float>(dy));

    const DeviceTensor xd(dtype, x, k.offset), dyd(dtype, dy, k.offset);
    DeviceTensor yd = DeviceTensor::poisoned(dtype, l.ny, k.offset);
    DeviceTensor dxd = DeviceTensor::poisoned(dtype, l.nx, k.offset);
    ops.run(Device::CUDA, AvgPoolForward<TensorId>{0, 1, l.window, k.count_include_pad},
            {ops.arg(l.x, xd.ptr(), dtype)}, {ops.arg(l.y, yd.ptr(), dtype)});
    ops.run(Device::CUDA, AvgPoolBackward<TensorId>{0, 1, l.window, k.count_include_pad},
            {ops.arg(l.y, dyd.ptr(), dtype)}, {ops.arg(l.x, dxd.ptr(), dtype)});
    // A window holds k*k taps (a divisor at least its input cells); an input lies in at most that
    // many windows, whose dy share one divisor k*k or are each divided by their own.
    const int64_t taps = int64_t{k.kernel} * k.kernel;
    const double tol = average_tolerance(dtype, taps);
    const double dx_tol = cpu::avgpool_divisor_is_window(l.g, k.count_include_pad) ? tol
                                                                                     : quotient_sum_tolerance(dtype, taps);
    const std::vector<double> got_y = yd.get(), got_dx = dxd.get();
    expect_matches("y", got_y, doubles(y), tol);
    expect_matches("dx", got_dx, doubles(dx), dx_tol);
    // The other divisor rule, where it changes anything, lies far outside the bounds.
    const auto [other_y, other_dx] =
        cpu_avgpool(ops, l, !k.count_include_pad, testing::cast<float>(x), testing::cast<float>(dy));
    if (mixed_err(doubles(other_y), doubles(y)) == 0) continue;
    EXPECT_GT(mixed_err(got_y, doubles(other_y)), 10 * tol) << "count_include_pad is not told apart";
    // dx: where the two rules' own distance is within 20 times its bound (bf16's coarse unit: on an
    // H100 the kernel's dx lay 0.016 from the other rule's, under 10 x its bound of 0.0079), y above
    // tells them apart.
    if (mixed_err(doubles(other_dx), doubles(dx)) > 20 * dx_tol) {
      EXPECT_GT(mixed_err(got_dx, doubles(other_dx)), 10 * dx_tol) << "count_include_pad is not told apart";
    }
    ++other_rule_checked;
  }
  EXPECT_GE(other_rule_checked, 3);
}

struct GapCase {
  const char* what;
  int64_t n, h, w, c;
  size_t offset = 0;
};

const GapCase kGapCases[] = {
    {"7x7, C = 512 (ResNet-18's head)", 4, 7, 7, 512},
    {"7x7, C = 20 (fp32 in packs of 4, fp16/bf16 scalar)", 3, 7, 7, 20},
    {"7x7, C = 3", 2, 7, 7, 3},
    {"7x7, misaligned pointers", 2, 7, 7, 64, 1},
    {"14x14, C = 8: every strand sums several rows", 2, 14, 14, 8},
    {"1x1", 5, 1, 1, 16},
};

TEST_P(PoolGpu, GlobalAvgPoolMatchesCpu) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(105);
  for (const GapCase& k : kGapCases) {
    SCOPED_TRACE(std::string(name(dtype)) + " " + k.what);
    const Shape map = {k.n, k.h, k.w, k.c}, pooled = {k.n, k.c};
    const size_t nx = size_t(numel(map)), ny = size_t(numel(pooled));
    const std::vector<double> x = random_values(dtype, nx, rng), dy = random_values(dtype, ny, rng);
    std::vector<float> xf = testing::cast<float>(x), dyf = testing::cast<float>(dy), y(ny), dx(nx);
    ops.run(Device::CPU, GlobalAvgPoolForward<TensorId>{0, 1}, {ops.arg(map, xf.data())}, {ops.arg(pooled, y.data())});
    ops.run(Device::CPU, GlobalAvgPoolBackward<TensorId>{0, 1}, {ops.arg(pooled, dyf.data())},
            {ops.arg(map, dx.data())});

    const DeviceTensor xd(dtype, x, k.offset), dyd(dtype, dy, k.offset);
    DeviceTensor yd = DeviceTensor::poisoned(dtype, ny, k.offset), dxd = DeviceTensor::poisoned(dtype, nx, k.offset);
    ops.run(Device::CUDA, GlobalAvgPoolForward<TensorId>{0, 1}, {ops.arg(map, xd.ptr(), dtype)},
            {ops.arg(pooled, yd.ptr(), dtype)});
    ops.run(Device::CUDA, GlobalAvgPoolBackward<TensorId>{0, 1}, {ops.arg(pooled, dyd.ptr(), dtype)},
            {ops.arg(map, dxd.ptr(), dtype)});
    expect_matches("y", yd.get(), doubles(y), average_tolerance(dtype, k.h * k.w));
    expect_matches("dx", dxd.get(), doubles(dx), average_tolerance(dtype, 1));  // one division each
  }
}

struct AdaptiveCase {
  const char* what;
  int64_t n, h, w, c, out_h, out_w;
  size_t offset = 0;
};

const AdaptiveCase kAdaptiveCases[] = {
    {"7x7 -> 3x3 (overlapping ranges), C = 64", 2, 7, 7, 64, 3, 3},
    {"13x13 -> 6x6 (AlexNet at 256), C = 256", 2, 13, 13, 256, 6, 6},
    {"5x5 -> 7x7 (growing), C = 16", 2, 5, 5, 16, 7, 7},
    {"2x3 -> 7x7 (VGG's from a small input), C = 8", 3, 2, 3, 8, 7, 7},
    {"9x4 -> 4x6, C = 12 (fp32 in packs of 4, fp16/bf16 scalar)", 2, 9, 4, 12, 4, 6},
    {"14x14 -> 7x7 (dividing), C = 5", 2, 14, 14, 5, 7, 7},
    {"7x7 -> 3x3, misaligned pointers", 2, 7, 7, 64, 3, 3, 1},
};

// The most cells one axis of an in -> out adaptive pooling averages (its ranges' longest), and the
// most outputs one input cell feeds (the same with the sizes swapped).
int64_t longest_range(int64_t in, int64_t out) {
  int64_t most = 0;
  for (int64_t i = 0; i < out; ++i) most = std::max(most, cpu::adaptive_end(i, in, out) - cpu::adaptive_start(i, in, out));
  return most;
}

// Adaptive average pooling, through ADAPTIVE_AVGPOOL_FWD / _BWD on both sides.
TEST_P(PoolGpu, AdaptiveAvgPoolMatchesCpu) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(107);
  for (const AdaptiveCase& k : kAdaptiveCases) {
    SCOPED_TRACE(std::string(name(dtype)) + " " + k.what);
    const Shape map = {k.n, k.h, k.w, k.c}, pooled = {k.n, k.out_h, k.out_w, k.c};
    const size_t nx = size_t(numel(map)), ny = size_t(numel(pooled));
    const std::vector<double> x = random_values(dtype, nx, rng), dy = random_values(dtype, ny, rng);
    std::vector<float> xf = testing::cast<float>(x), dyf = testing::cast<float>(dy), y(ny), dx(nx);
    ops.run(Device::CPU, AdaptiveAvgPoolForward<TensorId>{0, 1}, {ops.arg(map, xf.data())}, {ops.arg(pooled, y.data())});
    ops.run(Device::CPU, AdaptiveAvgPoolBackward<TensorId>{0, 1}, {ops.arg(pooled, dyf.data())},
            {ops.arg(map, dx.data())});

    const DeviceTensor xd(dtype, x, k.offset), dyd(dtype, dy, k.offset);
    DeviceTensor yd = DeviceTensor::poisoned(dtype, ny, k.offset), dxd = DeviceTensor::poisoned(dtype, nx, k.offset);
    ops.run(Device::CUDA, AdaptiveAvgPoolForward<TensorId>{0, 1}, {ops.arg(map, xd.ptr(), dtype)},
            {ops.arg(pooled, yd.ptr(), dtype)});
    ops.run(Device::CUDA, AdaptiveAvgPoolBackward<TensorId>{0, 1}, {ops.arg(pooled, dyd.ptr(), dtype)},
            {ops.arg(map, dxd.ptr(), dtype)});
    const double tol = average_tolerance(dtype, longest_range(k.h, k.out_h) * longest_range(k.w, k.out_w));
    const double dx_tol = quotient_sum_tolerance(dtype, longest_range(k.out_h, k.h) * longest_range(k.out_w, k.w));
    std::vector<double> got_y = yd.get();
    expect_matches("y", got_y, doubles(y), tol);
    expect_matches("dx", dxd.get(), doubles(dx), dx_tol);
    // One output moved by 3 tolerances is caught.
    const std::vector<double> want_y = doubles(y);
    got_y[ny / 2] = want_y[ny / 2] + 3 * tol * (1 + std::abs(want_y[ny / 2]));
    EXPECT_GT(mixed_err(got_y, want_y), tol) << "an average off by 3 tolerances goes unnoticed";
  }
}

// The last maximum of each window in raster order: the tie rule the kernels must not have.
std::vector<uint8_t> last_maximum_argmax(const cpu::PoolGeom& g, const std::vector<double>& x) {
  std::vector<uint8_t> arg(size_t(g.n * g.ho * g.wo * g.c));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.ho; ++oh)
      for (int64_t ow = 0; ow < g.wo; ++ow)
        for (int64_t c = 0; c < g.c; ++c) {
          double best = -std::numeric_limits<double>::infinity();
          uint8_t& a = arg[size_t(((n * g.ho + oh) * g.wo + ow) * g.c + c)];
          const int64_t h0 = oh * g.stride - g.pad, w0 = ow * g.stride - g.pad;
          for (int64_t ih = std::max<int64_t>(h0, 0); ih < std::min(h0 + g.kernel, g.h); ++ih)
            for (int64_t iw = std::max<int64_t>(w0, 0); iw < std::min(w0 + g.kernel, g.w); ++iw) {
              const double v = x[size_t(((n * g.h + ih) * g.w + iw) * g.c + c)];
              if (v >= best) best = v, a = static_cast<uint8_t>((ih - h0) * g.kernel + (iw - w0));
            }
        }
  return arg;
}

// The comparisons above can fail: on tie-heavy data a reference with the other tie rule differs
// from the GPU's argmax (y cannot tell the rules apart, argmax must), one average moved by a few
// tolerances is caught, and so is one max-pool gradient moved by a single unit in the last place.
TEST_P(PoolGpu, ComparisonsCatchAWrongTieRuleAndPerturbedResults) {
  KILN_REQUIRE_GPU();
  const DType dtype = GetParam();
  PoolOps ops;
  std::mt19937 rng(106);
  const PoolCase k{"mutations", 2, 9, 11, 16, 3, 2, 1};
  const Layout l = layout(k);

  std::vector<double> ties(l.nx);
  for (double& v : ties) v = double(1 + rng() % 3);
  const GpuMaxPool got = gpu_maxpool(ops, l, dtype, ties, 0);
  const std::vector<uint8_t> wrong_rule = last_maximum_argmax(l.g, ties);
  EXPECT_NE(got.argmax, wrong_rule) << "the argmax comparison cannot tell first-maximum from last-maximum";

  const std::vector<double> x = random_values(dtype, l.nx, rng), dy = random_values(dtype, l.ny, rng);
  const CpuMaxPool want = cpu_maxpool(ops, l, testing::cast<float>(x), testing::cast<float>(dy));
  std::vector<double> dx = gpu_maxpool_backward(ops, l, dtype, dy, want.argmax, 0);
  const std::vector<double> want_dx = rounded(dtype, doubles(want.dx));
  ASSERT_EQ(mixed_err(dx, want_dx), 0.0) << "the unperturbed gradient must match exactly";
  const auto nonzero = std::find_if(want_dx.begin(), want_dx.end(), [](double v) { return v != 0; });
  const size_t hit = size_t(nonzero - want_dx.begin());
  ASSERT_LT(hit, dx.size());
  dx[hit] = one_ulp_away(dtype, dx[hit]);
  EXPECT_GT(mixed_err(dx, want_dx), 0.0) << "a one-ulp error in dx goes unnoticed";

  std::vector<float> xf = testing::cast<float>(x), y(l.ny);
  ops.run(Device::CPU, AvgPoolForward<TensorId>{0, 1, l.window}, {ops.arg(l.x, xf.data())}, {ops.arg(l.y, y.data())});
  const DeviceTensor xd(dtype, x);
  DeviceTensor yd = DeviceTensor::poisoned(dtype, l.ny);
  ops.run(Device::CUDA, AvgPoolForward<TensorId>{0, 1, l.window}, {ops.arg(l.x, xd.ptr(), dtype)},
          {ops.arg(l.y, yd.ptr(), dtype)});
  const double tol = average_tolerance(dtype, int64_t{k.kernel} * k.kernel);
  std::vector<double> avg = yd.get();
  const std::vector<double> want_avg = doubles(y);
  ASSERT_LE(mixed_err(avg, want_avg), tol) << "the unperturbed average must match";
  avg[l.ny / 2] += 3 * tol * (1 + std::abs(want_avg[l.ny / 2]));
  EXPECT_GT(mixed_err(avg, want_avg), tol) << "an average off by 3 tolerances goes unnoticed";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PoolGpu, ::testing::Values(DType::F32, DType::F16, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The wrappers' checks: errors name the op and its layer, and the fix.
TEST(PoolGpuErrors, BadTensorsNameTheOpAndTheFix) {
  KILN_REQUIRE_GPU();
  PoolOps ops;
  DeviceBuffer memory(4096);
  void* p = memory.get();
  const PoolWindow stem{3, 2, 1};
  // y of the wrong size: the program does not fit this window.
  testing::expect_error(
      [&] {
        ops.run(Device::CUDA, MaxPoolForward<TensorId>{0, 1, 2, stem}, {ops.arg({1, 8, 8, 8}, p, DType::F16)},
                {ops.arg({1, 3, 3, 8}, p, DType::F16), ops.arg({1, 4, 4, 8}, p, DType::U8)});
      },
      {"MAXPOOL_FWD 'stem.pool'", "recompile"});
  // argmax of the wrong dtype: the I32 spatial index of old programs, or an activation dtype.
  for (DType wrong : {DType::I32, DType::F16})
    testing::expect_error(
        [&] {
          ops.run(Device::CUDA, MaxPoolBackward<TensorId>{0, 1, 2, stem},
                  {ops.arg({1, 4, 4, 8}, p, DType::F16), ops.arg({1, 4, 4, 8}, p, wrong)},
                  {ops.arg({1, 8, 8, 8}, p, DType::F16)});
        },
        {"MAXPOOL_BWD 'stem.pool'", "argmax", dtype_name(wrong), "U8", "recompile"});
  // A window of 17x17 = 289 positions does not fit a U8 index.
  testing::expect_error(
      [&] {
        ops.run(Device::CUDA, MaxPoolForward<TensorId>{0, 1, 2, {17, 1, 0}}, {ops.arg({1, 17, 17, 1}, p, DType::F32)},
                {ops.arg({1, 1, 1, 1}, p, DType::F32), ops.arg({1, 1, 1, 1}, p, DType::U8)});
      },
      {"MAXPOOL_FWD 'stem.pool'", "kernel 17", "at most 16"});
  // Padding over half the kernel, as the CPU rejects it.
  testing::expect_error(
      [&] {
        ops.run(Device::CUDA, AvgPoolForward<TensorId>{0, 1, {3, 1, 2}}, {ops.arg({1, 8, 8, 8}, p, DType::F32)},
                {ops.arg({1, 10, 10, 8}, p, DType::F32)});
      },
      {"AVGPOOL_FWD 'stem.pool'", "padding <= 1"});
  // A dtype the GPU kernels do not have.
  testing::expect_error(
      [&] {
        ops.run(Device::CUDA, GlobalAvgPoolForward<TensorId>{0, 1}, {ops.arg({1, 4, 4, 8}, p, DType::F64)},
                {ops.arg({1, 8}, p, DType::F64)});
      },
      {"GAP_FWD 'stem.pool'", "fp16"});
}

}  // namespace
}  // namespace kiln
