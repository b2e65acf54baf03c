// A linear layer over a channels-last feature map (N, H, W, C) -> (N, H, W, O): nn.Linear at every
// position, as ConvNeXt's pointwise layers apply it. The lowering hands the GEMM ops 2-D views of the
// map, so these tests check the views: every output, the input's, weight's and bias's gradients and
// the inference output against float64 loops over (n, h, w), in fp64 and fp32, and that a reference
// with the map's rows mixed up (a view of the wrong shape) lands far outside the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

constexpr int kH = 3, kW = 2, kC = 5, kOut = 7, kBatch = 2;

Blueprint pointwise() {
  Blueprint m("pointwise");
  m.input(kH, kW, kC).fc(kOut, /*bias=*/true, "fc");
  return m;
}

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// y[r, o] = b[o] + sum_c x[r, c] w[o, c] over the rows r = (n, h, w); dx = dy w; dw = dy^T x; db = sum dy.
Reference reference(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                    const std::vector<double>& dy, int rows) {
  Reference r{std::vector<double>(size_t(rows * kOut)), std::vector<double>(size_t(rows * kC), 0.0),
              std::vector<double>(size_t(kOut * kC), 0.0), std::vector<double>(size_t(kOut), 0.0)};
  for (int i = 0; i < rows; ++i)
    for (int o = 0; o < kOut; ++o) {
      double s = b[size_t(o)];
      for (int c = 0; c < kC; ++c) s += x[size_t(i * kC + c)] * w[size_t(o * kC + c)];
      r.y[size_t(i * kOut + o)] = s;
      const double g = dy[size_t(i * kOut + o)];
      r.db[size_t(o)] += g;
      for (int c = 0; c < kC; ++c) {
        r.dx[size_t(i * kC + c)] += g * w[size_t(o * kC + c)];
        r.dw[size_t(o * kC + c)] += g * x[size_t(i * kC + c)];
      }
    }
  return r;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

template <class T>
std::vector<double> widened(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <class T>
void check_pointwise(double bound) {
  CompileOptions o;
  o.precision = sizeof(T) == 8 ? Precision::FP64 : Precision::FP32;
  o.batch = kBatch, o.loss = false, o.input_grad = true;
  Executable exe(compile(pointwise(), o), 1);
  const Program& p = exe.program();
  ASSERT_EQ(p.tensors[p.logits].shape, (Shape{kBatch, kH, kW, kOut}));
  const int rows = kBatch * kH * kW;
  std::vector<T> x, dy;
  for (double v : testing::uniform_vec(21, size_t(rows * kC), -2, 2)) x.push_back(T(v));
  for (double v : testing::uniform_vec(22, size_t(rows * kOut), -2, 2)) dy.push_back(T(v));
  exe.write(p.input, x.data(), x.size() * sizeof(T));
  exe.write(p.output_grad, dy.data(), dy.size() * sizeof(T));
  const std::vector<double> w = widened(exe.read<T>(exe.id("fc.weight")));
  const std::vector<double> b = widened(exe.read<T>(exe.id("fc.bias")));
  ASSERT_EQ(w.size(), size_t(kOut * kC));  // (out, in), nn.Linear's
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  const std::vector<double> y = widened(exe.read<T>(p.logits));
  exe.run_backward(s);
  const std::vector<double> dx = widened(exe.read<T>(p.input_grad));
  exe.run_inference(s);
  const std::vector<double> yi = widened(exe.read<T>(p.inference_logits));

  const Reference want = reference(widened(x), w, b, widened(dy), rows);
  EXPECT_LE(max_diff(y, want.y), bound);
  EXPECT_LE(max_diff(yi, want.y), bound);
  EXPECT_LE(max_diff(dx, want.dx), bound);
  EXPECT_LE(max_diff(exe.gradient("fc.weight"), want.dw), bound * rows);
  EXPECT_LE(max_diff(exe.gradient("fc.bias"), want.db), bound * rows);
  // The map read as other rows (its positions and channels interleaved, a view of the wrong shape):
  // the weights applied to x's transposed layout instead. Far outside the bound.
  std::vector<double> shuffled(x.size());
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < kC; ++c) shuffled[size_t(i * kC + c)] = double(x[size_t(c * rows + i)]);
  EXPECT_GT(max_diff(reference(shuffled, w, b, widened(dy), rows).y, want.y), 1e4 * bound);
}

// Each output is a sum of kC + 1 terms of magnitude <= 2 * |w| + |b| <= ~3: rounding bounds of a few
// units in the last place of sums of that size (fp64 2^-52, fp32 2^-23) times the terms' total.
TEST(LinearOverMap, Fp64MatchesLoopsAtEveryPosition) { check_pointwise<double>(64 * 0x1p-52); }
TEST(LinearOverMap, Fp32MatchesLoopsAtEveryPosition) { check_pointwise<float>(64 * 0x1p-23); }

// A map feeds the layer without a flatten: no flatten-order reordering of its weight, (out, in).
TEST(LinearOverMap, KeepsTheMapAndNamesItsWeightAsNnLinear) {
  CompileOptions o;
  o.precision = Precision::FP32, o.batch = kBatch, o.loss = false;
  Blueprint m("head");
  m.input(4, 4, 3).conv(6, 3, 1, 1, false, "conv").fc(8, true, "fc1").gelu().fc(6, true, "fc2");
  const Program p = compile(m, o);
  EXPECT_EQ(p.tensors[size_t(p.find("fc1.weight"))].shape, (Shape{8, 6}));
  EXPECT_EQ(p.tensors[size_t(p.find("fc2.weight"))].shape, (Shape{6, 8}));
  EXPECT_EQ(p.tensors[p.logits].shape, (Shape{kBatch, 4, 4, 6}));
}

}  // namespace
}  // namespace kiln
