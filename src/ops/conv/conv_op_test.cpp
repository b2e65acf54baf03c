// The CONV_* op wrappers: they must run the kernels on the op's tensors and reject programs
// whose tensors do not fit the layer, naming the layer.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/conv/conv_contract.h"
#include "ops/conv/conv_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using testing::OpBench;

// Runs the op of a contract on the bench's tensors, its window taken from the layer as lowering
// does.
// (Contracts are built with a default window `{}`, which this replaces.)
template <template <class> class C>
void run(OpBench& f, C<TensorId> c) {
  const ConvAttrs& a = attrs_of<ConvAttrs>(f.layer_spec());
  c.window = {a.stride_h,   a.stride_w,   a.pad_top, a.pad_left, a.pad_bottom, a.pad_right,
              a.dilation_h, a.dilation_w, a.groups};
  f.run(c);
}

// The op tests' bench around one Conv layer, "conv1".
OpBench conv1(int kernel, int stride, int padding) {
  return OpBench(0, "conv1", LayerKind::Conv, ConvAttrs::square(0, kernel, stride, padding));
}

class ConvOpCpu : public ::testing::Test {};

template <class Contract>
void expect_op_error(OpBench& f, const Contract& c, const std::string& needle) {
  kiln::testing::expect_error([&] { run(f, c); }, {"conv1", needle});
}

// A layer of a 3x5 kernel, stride (2,1), padding (top 1, left 0, bottom 2, right 1), dilation
// (2,1) and 2 groups.
ConvAttrs windowed_attrs() {
  ConvAttrs a;
  a.out_channels = 4, a.kernel_h = 3, a.kernel_w = 5;
  a.stride_h = 2, a.stride_w = 1;
  a.pad_top = 1, a.pad_left = 0, a.pad_bottom = 2, a.pad_right = 1;
  a.dilation_h = 2, a.dilation_w = 1, a.groups = 2;
  return a;
}

// The ops on the bench's tensors give the kernels' bytes for the geometry of the layer's window.
template <class T>
void check_ops_match_kernels(OpBench f, DType dtype, const Shape& xs, const Shape& ws, const Shape& ys) {
  const int64_t k = ws[0];
  const int x = f.add("x", xs, dtype, 1), w = f.add("w", ws, dtype, 2), b = f.add("b", {k}, dtype, 3);
  const int y = f.add("y", ys, dtype, 4), dy = f.add("dy", ys, dtype, 5);
  const int dx = f.add("dx", xs, dtype, 6), dw = f.add("dw", ws, dtype, 7), db = f.add("db", {k}, dtype, 8);
  run(f, ConvForward<TensorId>{x, w, b, y, {}});
  run(f, ConvDgrad<TensorId>{dy, w, dx, {}});
  run(f, ConvWgrad<TensorId>{dy, x, dw, db, {}});

  const ConvAttrs& a = attrs_of<ConvAttrs>(f.layer_spec());
  const cpu::ConvGeom g = cpu::ConvGeom::make(
      xs, ws, {a.stride_h, a.stride_w, a.pad_top, a.pad_left, a.pad_bottom, a.pad_right, a.dilation_h, a.dilation_w,
               a.groups});
  std::vector<T> ey(numel(ys)), edx(numel(xs)), edw(numel(ws)), edb(static_cast<size_t>(k));
  cpu::conv_fwd<T>(g, f.data<T>(x), f.data<T>(w), f.data<T>(b), ey.data());
  cpu::conv_dgrad<T>(g, f.data<T>(dy), f.data<T>(w), edx.data());
  cpu::conv_wgrad<T>(g, f.data<T>(dy), f.data<T>(x), edw.data(), edb.data());
  EXPECT_EQ(std::memcmp(ey.data(), f.data<T>(y), ey.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edx.data(), f.data<T>(dx), edx.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edw.data(), f.data<T>(dw), edw.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edb.data(), f.data<T>(db), edb.size() * sizeof(T)), 0);
}

TEST_F(ConvOpCpu, FloatOpsRunTheKernels) {
  check_ops_match_kernels<float>(conv1(3, 2, 1), DType::F32, {2, 7, 6, 3}, {4, 3, 3, 3}, {2, 4, 3, 4});
}
TEST_F(ConvOpCpu, DoubleOpsRunTheKernels) {
  check_ops_match_kernels<double>(conv1(3, 2, 1), DType::F64, {2, 7, 6, 3}, {4, 3, 3, 3}, {2, 4, 3, 4});
}

// The ops read the whole window from the contract: input 9x8 -> (9 + 3 - 5) / 2 + 1 = 4 rows,
// (8 + 1 - 5) / 1 + 1 = 5 columns; filters of C / groups = 3 channels.
TEST_F(ConvOpCpu, WindowedOpsRunTheKernels) {
  const Shape xs{2, 9, 8, 6}, ws{4, 3, 5, 3}, ys{2, 4, 5, 4};
  check_ops_match_kernels<float>(OpBench(0, "conv1", LayerKind::Conv, windowed_attrs()), DType::F32, xs, ws, ys);
  check_ops_match_kernels<double>(OpBench(0, "conv1", LayerKind::Conv, windowed_attrs()), DType::F64, xs, ws, ys);
}

// A windowed layer's refusals name the layer and the culprit: filters of all C channels where the
// groups need C / groups, an output of the square window's size, a filter of another kernel size.
TEST_F(ConvOpCpu, WindowedOpsRefuseTensorsThatDoNotFitTheWindow) {
  OpBench f(0, "conv1", LayerKind::Conv, windowed_attrs());
  const int x = f.add("x", {2, 9, 8, 6}, DType::F32, 1), w = f.add("w", {4, 3, 5, 3}, DType::F32, 2);
  const int w_all_c = f.add("w_all_c", {4, 3, 5, 6}, DType::F32, 3);
  const int w_square = f.add("w_square", {4, 3, 3, 3}, DType::F32, 3);
  const int y = f.add("y", {2, 4, 5, 4}, DType::F32, 4), y_square = f.add("y_square", {2, 5, 4, 4}, DType::F32, 5);
  expect_op_error(f, ConvForward<TensorId>{x, w_all_c, -1, y, {}}, "C / groups = 3");
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y_square, {}}, "y_square");
  expect_op_error(f, ConvForward<TensorId>{x, w_square, -1, y, {}}, "kernel size 3x5");
  expect_op_error(f, ConvDgrad<TensorId>{y_square, w, x, {}}, "y_square");
  expect_op_error(f, ConvWgrad<TensorId>{y, x, w_all_c, -1, {}}, "C / groups = 3");
}

TEST_F(ConvOpCpu, BiasIsOptional) {
  OpBench f = conv1(1, 1, 0);
  const int x = f.add("x", {2, 3, 3, 2}, DType::F32, 1), w = f.add("w", {3, 1, 1, 2}, DType::F32, 2);
  const int y = f.add("y", {2, 3, 3, 3}, DType::F32, 3), dy = f.add("dy", {2, 3, 3, 3}, DType::F32, 4);
  const int dw = f.add("dw", {3, 1, 1, 2}, DType::F32, 5);
  run(f, ConvForward<TensorId>{x, w, -1, y, {}});
  run(f, ConvWgrad<TensorId>{dy, x, dw, -1, {}});
  // y[0,0,0,0] = sum_c x[0,0,0,c] * w[0,0,0,c]
  const float* xp = f.data<float>(x);
  const float* wp = f.data<float>(w);
  EXPECT_NEAR(f.data<float>(y)[0], xp[0] * wp[0] + xp[1] * wp[1], 1e-6);
}

TEST_F(ConvOpCpu, BadTensorsNameTheLayer) {
  OpBench f = conv1(3, 1, 1);
  const int x = f.add("x", {2, 5, 5, 3}, DType::F32, 1), w = f.add("w", {4, 3, 3, 3}, DType::F32, 2);
  const int w_bad_c = f.add("w_bad_c", {4, 3, 3, 2}, DType::F32, 3);
  const int w_bad_k = f.add("w_bad_kernel", {4, 5, 5, 3}, DType::F32, 3);
  const int y = f.add("y", {2, 5, 5, 4}, DType::F32, 4), y_bad = f.add("y_bad", {2, 5, 5, 5}, DType::F32, 5);
  const int b_bad = f.add("b_bad", {5}, DType::F32, 6), y64 = f.add("y64", {2, 5, 5, 4}, DType::F64, 7);
  const int x16 = f.add("x16", {2, 5, 5, 3}, DType::F16, 8), w16 = f.add("w16", {4, 3, 3, 3}, DType::F16, 9);
  const int y16 = f.add("y16", {2, 5, 5, 4}, DType::F16, 10);
  expect_op_error(f, ConvForward<TensorId>{x, w_bad_c, -1, y, {}}, "channels");
  expect_op_error(f, ConvForward<TensorId>{x, w_bad_k, -1, y, {}}, "kernel size");
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y_bad, {}}, "y_bad");
  expect_op_error(f, ConvForward<TensorId>{x, w, b_bad, y, {}}, "b_bad");
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y64, {}}, "F64");
  f.unbound = w;  // a malformed program: its CONV_FWD has no filter
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y, {}}, "'w'");
  f.unbound = -1;
  expect_op_error(f, ConvDgrad<TensorId>{y_bad, w, x, {}}, "y_bad");
  expect_op_error(f, ConvWgrad<TensorId>{y, x, w_bad_c, -1, {}}, "channels");
  expect_op_error(f, ConvForward<TensorId>{x16, w16, -1, y16, {}}, "F16");
}

}  // namespace
}  // namespace kiln
