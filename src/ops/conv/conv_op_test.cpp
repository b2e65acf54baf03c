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

// Runs the op of a contract on the bench's tensors, its stride and padding taken from the layer
// as lowering does.
template <template <class> class C>
void run(OpBench& f, C<TensorId> c) {
  const ConvAttrs& a = attrs_of<ConvAttrs>(f.layer_spec());
  c.stride = a.stride_h, c.padding = a.pad_top;
  f.run(c);
}

// The op tests' bench around one Conv layer, "conv1".
OpBench conv1(int kernel, int stride, int padding) {
  return OpBench(0, "conv1", LayerKind::Conv, ConvAttrs::square(0, kernel, stride, padding));
}

class ConvOpCpu : public ::testing::Test {};

template <class T>
void check_ops_match_kernels(DType dtype) {
  OpBench f = conv1(3, 2, 1);
  const Shape xs{2, 7, 6, 3}, ws{4, 3, 3, 3}, ys{2, 4, 3, 4};
  const int x = f.add("x", xs, dtype, 1), w = f.add("w", ws, dtype, 2), b = f.add("b", {4}, dtype, 3);
  const int y = f.add("y", ys, dtype, 4), dy = f.add("dy", ys, dtype, 5);
  const int dx = f.add("dx", xs, dtype, 6), dw = f.add("dw", ws, dtype, 7), db = f.add("db", {4}, dtype, 8);
  run(f, ConvForward<TensorId>{x, w, b, y});
  run(f, ConvDgrad<TensorId>{dy, w, dx});
  run(f, ConvWgrad<TensorId>{dy, x, dw, db});

  const cpu::ConvGeom g = cpu::ConvGeom::make(xs, ws, 2, 1);
  std::vector<T> ey(numel(ys)), edx(numel(xs)), edw(numel(ws)), edb(4);
  cpu::conv_fwd<T>(g, f.data<T>(x), f.data<T>(w), f.data<T>(b), ey.data());
  cpu::conv_dgrad<T>(g, f.data<T>(dy), f.data<T>(w), edx.data());
  cpu::conv_wgrad<T>(g, f.data<T>(dy), f.data<T>(x), edw.data(), edb.data());
  EXPECT_EQ(std::memcmp(ey.data(), f.data<T>(y), ey.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edx.data(), f.data<T>(dx), edx.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edw.data(), f.data<T>(dw), edw.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edb.data(), f.data<T>(db), edb.size() * sizeof(T)), 0);
}

TEST_F(ConvOpCpu, FloatOpsRunTheKernels) { check_ops_match_kernels<float>(DType::F32); }
TEST_F(ConvOpCpu, DoubleOpsRunTheKernels) { check_ops_match_kernels<double>(DType::F64); }

TEST_F(ConvOpCpu, BiasIsOptional) {
  OpBench f = conv1(1, 1, 0);
  const int x = f.add("x", {2, 3, 3, 2}, DType::F32, 1), w = f.add("w", {3, 1, 1, 2}, DType::F32, 2);
  const int y = f.add("y", {2, 3, 3, 3}, DType::F32, 3), dy = f.add("dy", {2, 3, 3, 3}, DType::F32, 4);
  const int dw = f.add("dw", {3, 1, 1, 2}, DType::F32, 5);
  run(f, ConvForward<TensorId>{x, w, -1, y});
  run(f, ConvWgrad<TensorId>{dy, x, dw, -1});
  // y[0,0,0,0] = sum_c x[0,0,0,c] * w[0,0,0,c]
  const float* xp = f.data<float>(x);
  const float* wp = f.data<float>(w);
  EXPECT_NEAR(f.data<float>(y)[0], xp[0] * wp[0] + xp[1] * wp[1], 1e-6);
}

template <class Contract>
void expect_op_error(OpBench& f, const Contract& c, const std::string& needle) {
  kiln::testing::expect_error([&] { run(f, c); }, {"conv1", needle});
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
  expect_op_error(f, ConvForward<TensorId>{x, w_bad_c, -1, y}, "channels");
  expect_op_error(f, ConvForward<TensorId>{x, w_bad_k, -1, y}, "kernel size");
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y_bad}, "y_bad");
  expect_op_error(f, ConvForward<TensorId>{x, w, b_bad, y}, "b_bad");
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y64}, "F64");
  f.unbound = w;  // a malformed program: its CONV_FWD has no filter
  expect_op_error(f, ConvForward<TensorId>{x, w, -1, y}, "'w'");
  f.unbound = -1;
  expect_op_error(f, ConvDgrad<TensorId>{y_bad, w, x}, "y_bad");
  expect_op_error(f, ConvWgrad<TensorId>{y, x, w_bad_c, -1}, "channels");
  expect_op_error(f, ConvForward<TensorId>{x16, w16, -1, y16}, "F16");
}

}  // namespace
}  // namespace kiln
