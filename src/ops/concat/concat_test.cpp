// Channel concatenation: the CPU copy, and a compiled program whose concat joins branches of
// different widths (one read twice) forward, backward and in inference, against values computed
// here; and the refusals of the DSL and of shape inference.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "ops/concat/concat_cpu.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::expect_error;

std::vector<double> normals(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> d;
  std::vector<double> v(n);
  for (double& e : v) e = d(rng);
  return v;
}

TEST(ConcatCpu, CopyChannelsWritesOnlyItsSlice) {
  const int64_t rows = 7, src_c = 5, dst_c = 9;
  const std::vector<double> src = normals(size_t(rows * src_c), 1);
  std::vector<double> dst(size_t(rows * dst_c), -1.0);
  cpu::copy_channels<double>(src.data(), src_c, 1, dst.data(), dst_c, 4, rows, 3);  // src [1, 4) -> dst [4, 7)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dst_c; ++c)
      ASSERT_EQ(dst[size_t(r * dst_c + c)], c >= 4 && c < 7 ? src[size_t(r * src_c + c - 3)] : -1.0) << r << "," << c;
}

// x (5 channels) -> a: a 1x1 conv picking channels 0..2, b: one picking 3..4 times 2; y = concat(a, b, a),
// 8 channels. With these weights every value below is exact in float64: y's slices are x's channels,
// and d(input) is W_a^T (dy[0:3] + dy[5:8]) + W_b^T dy[3:5], i.e. dy[0:3] + dy[5:8] on channels 0..2 and
// 2 dy[3:5] on 3..4: each input's gradient is its slice of dy (a's the sum of its two slices).
Blueprint picking_model() {
  Blueprint m("pick");
  m.input(3, 4, 5);
  m.conv(3, 1, 1, 0, false, "a");
  const Blueprint::Ref a = m.last();
  m.from(m.source()).conv(2, 1, 1, 0, false, "b");
  m.concat({a, m.last(), a}, "cat");
  return m;
}

void write_picking_weights(Executable& exe) {
  std::vector<double> wa(3 * 5, 0.0), wb(2 * 5, 0.0);  // [out, 1, 1, in]
  for (int o = 0; o < 3; ++o) wa[size_t(o * 5 + o)] = 1.0;
  for (int o = 0; o < 2; ++o) wb[size_t(o * 5 + 3 + o)] = 2.0;
  exe.write(exe.id("a.weight"), wa.data(), wa.size() * sizeof(double));
  exe.write(exe.id("b.weight"), wb.data(), wb.size() * sizeof(double));
}

TEST(ConcatProgram, ForwardBackwardAndInferenceAgainstDirectValues) {
  CompileOptions o;
  o.precision = Precision::FP64, o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(picking_model(), o), 3);
  const Program& p = exe.program();
  ASSERT_EQ(p.graph.count(LayerKind::Concat), 1);
  ASSERT_EQ(p.tensors[p.logits].shape, (Shape{2, 3, 4, 8}));
  ASSERT_EQ(p.tensors[p.input].dtype, DType::F64);
  write_picking_weights(exe);
  const int64_t rows = 2 * 3 * 4;
  const std::vector<double> x = normals(size_t(rows * 5), 2), dy = normals(size_t(rows * 8), 3);
  exe.write(p.input, x.data(), x.size() * sizeof(double));
  exe.write(p.output_grad, dy.data(), dy.size() * sizeof(double));
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  const std::vector<double> y = exe.read<double>(p.logits);
  exe.run_backward(s);
  const std::vector<double> dx = exe.read<double>(p.input_grad);
  ASSERT_EQ(y.size(), size_t(rows * 8));
  ASSERT_EQ(dx.size(), size_t(rows * 5));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = &x[size_t(r * 5)];
    const double* yr = &y[size_t(r * 8)];
    const double* gr = &dy[size_t(r * 8)];
    const double* dr = &dx[size_t(r * 5)];
    for (int c = 0; c < 3; ++c) {
      ASSERT_EQ(yr[c], xr[c]) << "row " << r << " channel " << c;
      ASSERT_EQ(yr[5 + c], xr[c]) << "row " << r << " channel " << 5 + c;
      ASSERT_EQ(dr[c], gr[c] + gr[5 + c]) << "d(input) row " << r << " channel " << c;
    }
    for (int c = 3; c < 5; ++c) {
      ASSERT_EQ(yr[c], 2 * xr[c]) << "row " << r << " channel " << c;
      ASSERT_EQ(dr[c], 2 * gr[c]) << "d(input) row " << r << " channel " << c;
    }
  }
  // Inference writes its own output the same way.
  const std::vector<double> x2 = normals(size_t(rows * 5), 4);
  exe.write(p.input, x2.data(), x2.size() * sizeof(double));
  exe.run_inference(s);
  const std::vector<double> yi = exe.read<double>(p.inference_logits);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < 8; ++c) {
      const int from = c < 3 ? c : (c < 5 ? c : c - 5);
      ASSERT_EQ(yi[size_t(r * 8 + c)], (c >= 3 && c < 5 ? 2 : 1) * x2[size_t(r * 5 + from)]) << r << "," << c;
    }
}

// The float program runs the same copies (the CPU's float kernel), exact as well: the products by the
// picking weights are by 1, 2 and 0.
TEST(ConcatProgram, Float32ForwardAndBackward) {
  CompileOptions o;
  o.batch = 2, o.loss = false, o.input_grad = true;
  Executable exe(compile(picking_model(), o), 3);
  const Program& p = exe.program();
  std::vector<float> wa(15, 0.f), wb(10, 0.f);
  for (int c = 0; c < 3; ++c) wa[size_t(c * 5 + c)] = 1.f;
  for (int c = 0; c < 2; ++c) wb[size_t(c * 5 + 3 + c)] = 2.f;
  exe.write(exe.id("a.weight"), wa.data(), wa.size() * sizeof(float));
  exe.write(exe.id("b.weight"), wb.data(), wb.size() * sizeof(float));
  const int64_t rows = 2 * 3 * 4;
  std::vector<float> x, dy;
  for (double v : normals(size_t(rows * 5), 5)) x.push_back(float(v));
  for (double v : normals(size_t(rows * 8), 6)) dy.push_back(float(v));
  exe.write(p.input, x.data(), x.size() * sizeof(float));
  exe.write(p.output_grad, dy.data(), dy.size() * sizeof(float));
  const StepScalars s{0.f, 0, 1};
  exe.run_forward(s);
  const std::vector<float> y = exe.read<float>(p.logits);
  exe.run_backward(s);
  const std::vector<float> dx = exe.read<float>(p.input_grad);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < 8; ++c) {
      const int from = c < 5 ? c : c - 5;
      ASSERT_EQ(y[size_t(r * 8 + c)], (c >= 3 && c < 5 ? 2.f : 1.f) * x[size_t(r * 5 + from)]) << r << "," << c;
      if (c < 5) {
        const float want = c < 3 ? dy[size_t(r * 8 + c)] + dy[size_t(r * 8 + 5 + c)] : 2.f * dy[size_t(r * 8 + c)];
        ASSERT_EQ(dx[size_t(r * 5 + c)], want) << "d(input) " << r << "," << c;
      }
    }
}

TEST(ConcatRefusals, NameTheLayerTheShapesAndTheFix) {
  CompileOptions o;
  o.batch = 2;
  {  // different heights and widths
    Blueprint m("m");
    m.input(8, 8, 3).conv(4, 3, 1, 1, false, "full");
    const Blueprint::Ref full = m.last();
    m.from(m.source()).conv(4, 3, 2, 1, false, "half");
    m.concat({full, m.last()}, "cat").flatten().fc(2);
    expect_error([&] { compile(m, o); },
                 {"concat 'cat'", shape_str({2, 8, 8, 4}), shape_str({2, 4, 4, 4}), "same batch, height and width",
                  "strides"});
  }
  {  // flat features
    Blueprint m("m");
    m.input(4, 4, 3).flatten("flat");
    const Blueprint::Ref flat = m.last();
    m.concat({flat, flat}, "cat").fc(2);
    expect_error([&] { compile(m, o); }, {"concat 'cat'", shape_str({2, 48}), "feature maps", "before flatten"});
  }
  {  // fewer than two handles, at the call
    Blueprint m("m");
    m.input(4, 4, 3).conv(4, 3, 1, 1);
    expect_error([&] { m.concat({m.last()}, "cat"); }, {"blueprint 'm'", "concat()", "got 1 handle", "two or more"});
    expect_error([&] { m.concat({}, "cat"); }, {"concat()", "got 0 handle", "two or more"});
  }
  {  // a handle of another blueprint
    Blueprint m("m"), other("other");
    other.conv(4, 3, 1, 1);
    m.input(4, 4, 3).conv(4, 3, 1, 1);
    expect_error([&] { m.concat({m.last(), other.last()}, "cat"); }, {"concat() at node 1", "another blueprint"});
  }
}

}  // namespace
}  // namespace kiln
