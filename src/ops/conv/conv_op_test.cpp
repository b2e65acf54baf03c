// The CONV_* op wrappers: they must run the kernels on the op's tensors and reject programs
// whose tensors do not fit the layer, naming the layer.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/common/cpu_test_util.h"
#include "ops/conv/conv_cpu.h"
#include "runtime/op_call.h"

namespace kiln {
void register_conv_cpu();
namespace {

// A one-layer program holding host tensors, enough to build OpCalls by hand.
struct Fixture {
  Program program;
  std::vector<std::vector<double>> storage;  // double-sized slots fit either precision
  StepScalars scalars;

  explicit Fixture(LayerAttrs attrs) {
    Layer layer;
    layer.name = "conv1";
    layer.kind = LayerKind::Conv;
    layer.attrs = attrs;
    program.graph.layers.push_back(layer);
    program.tensors.reserve(16);  // TensorArgs point into it
    storage.reserve(16);
  }

  int add(const std::string& name, Shape shape, DType dtype, unsigned seed) {
    TensorSpec spec;
    spec.name = name;
    spec.shape = shape;
    spec.dtype = dtype;
    program.tensors.push_back(spec);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> dist(-1, 1);
    std::vector<double> values(numel(shape));
    for (double& v : values) v = dist(rng);
    storage.emplace_back(numel(shape));
    if (dtype == DType::F32)
      for (size_t i = 0; i < values.size(); ++i) as<float>(storage.size() - 1)[i] = float(values[i]);
    else
      storage.back() = values;
    return static_cast<int>(program.tensors.size()) - 1;
  }

  template <class T>
  T* as(size_t id) { return reinterpret_cast<T*>(storage[id].data()); }

  TensorArg arg(int id) {
    if (id < 0) return {};
    return {&program.tensors[id], storage[id].data()};
  }

  void run(OpKind kind, const std::vector<int>& in, const std::vector<int>& out) {
    Op op{kind, 0, in, out, program.graph.layers[0].attrs};
    std::vector<TensorArg> in_args, out_args;
    for (int id : in) in_args.push_back(arg(id));
    for (int id : out) out_args.push_back(arg(id));
    OpCall call{op, program, in_args, out_args, scalars};
    find_op(Device::CPU, kind)(call);
  }
};

LayerAttrs conv_attrs(int kernel, int stride, int padding) {
  LayerAttrs a;
  a.kernel = kernel, a.stride = stride, a.padding = padding;
  return a;
}

class ConvOpCpu : public ::testing::Test {
 protected:
  void SetUp() override { register_conv_cpu(); }
};

template <class T>
void check_ops_match_kernels(DType dtype) {
  Fixture f(conv_attrs(3, 2, 1));
  const Shape xs{2, 7, 6, 3}, ws{4, 3, 3, 3}, ys{2, 4, 3, 4};
  const int x = f.add("x", xs, dtype, 1), w = f.add("w", ws, dtype, 2), b = f.add("b", {4}, dtype, 3);
  const int y = f.add("y", ys, dtype, 4), dy = f.add("dy", ys, dtype, 5);
  const int dx = f.add("dx", xs, dtype, 6), dw = f.add("dw", ws, dtype, 7), db = f.add("db", {4}, dtype, 8);
  f.run(OpKind::CONV_FWD, {x, w, b}, {y});
  f.run(OpKind::CONV_DGRAD, {dy, w}, {dx});
  f.run(OpKind::CONV_WGRAD, {dy, x}, {dw, db});

  const cpu::ConvGeom g = cpu::ConvGeom::make(xs, ws, 2, 1);
  std::vector<T> ey(numel(ys)), edx(numel(xs)), edw(numel(ws)), edb(4);
  cpu::conv_fwd<T>(g, f.as<T>(x), f.as<T>(w), f.as<T>(b), ey.data());
  cpu::conv_dgrad<T>(g, f.as<T>(dy), f.as<T>(w), edx.data());
  cpu::conv_wgrad<T>(g, f.as<T>(dy), f.as<T>(x), edw.data(), edb.data());
  EXPECT_EQ(std::memcmp(ey.data(), f.as<T>(y), ey.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edx.data(), f.as<T>(dx), edx.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edw.data(), f.as<T>(dw), edw.size() * sizeof(T)), 0);
  EXPECT_EQ(std::memcmp(edb.data(), f.as<T>(db), edb.size() * sizeof(T)), 0);
}

TEST_F(ConvOpCpu, FloatOpsRunTheKernels) { check_ops_match_kernels<float>(DType::F32); }
TEST_F(ConvOpCpu, DoubleOpsRunTheKernels) { check_ops_match_kernels<double>(DType::F64); }

TEST_F(ConvOpCpu, BiasIsOptional) {
  Fixture f(conv_attrs(1, 1, 0));
  const int x = f.add("x", {2, 3, 3, 2}, DType::F32, 1), w = f.add("w", {3, 1, 1, 2}, DType::F32, 2);
  const int y = f.add("y", {2, 3, 3, 3}, DType::F32, 3), dy = f.add("dy", {2, 3, 3, 3}, DType::F32, 4);
  const int dw = f.add("dw", {3, 1, 1, 2}, DType::F32, 5);
  f.run(OpKind::CONV_FWD, {x, w, -1}, {y});
  f.run(OpKind::CONV_WGRAD, {dy, x}, {dw, -1});
  f.run(OpKind::CONV_WGRAD, {dy, x}, {dw});
  // y[0,0,0,0] = sum_c x[0,0,0,c] * w[0,0,0,c]
  const float* xp = f.as<float>(x);
  const float* wp = f.as<float>(w);
  EXPECT_NEAR(f.as<float>(y)[0], xp[0] * wp[0] + xp[1] * wp[1], 1e-6);
}

void expect_op_error(Fixture& f, OpKind kind, const std::vector<int>& in,
                     const std::vector<int>& out, const std::string& needle) {
  kiln::testing::expect_error([&] { f.run(kind, in, out); }, {"conv1", needle});
}

TEST_F(ConvOpCpu, BadTensorsNameTheLayer) {
  Fixture f(conv_attrs(3, 1, 1));
  const int x = f.add("x", {2, 5, 5, 3}, DType::F32, 1), w = f.add("w", {4, 3, 3, 3}, DType::F32, 2);
  const int w_bad_c = f.add("w_bad_c", {4, 3, 3, 2}, DType::F32, 3);
  const int w_bad_k = f.add("w_bad_kernel", {4, 5, 5, 3}, DType::F32, 3);
  const int y = f.add("y", {2, 5, 5, 4}, DType::F32, 4), y_bad = f.add("y_bad", {2, 5, 5, 5}, DType::F32, 5);
  const int b_bad = f.add("b_bad", {5}, DType::F32, 6), y64 = f.add("y64", {2, 5, 5, 4}, DType::F64, 7);
  const int x16 = f.add("x16", {2, 5, 5, 3}, DType::F16, 8), w16 = f.add("w16", {4, 3, 3, 3}, DType::F16, 9);
  const int y16 = f.add("y16", {2, 5, 5, 4}, DType::F16, 10);
  expect_op_error(f, OpKind::CONV_FWD, {x, w_bad_c}, {y}, "channels");
  expect_op_error(f, OpKind::CONV_FWD, {x, w_bad_k}, {y}, "kernel size");
  expect_op_error(f, OpKind::CONV_FWD, {x, w}, {y_bad}, "y_bad");
  expect_op_error(f, OpKind::CONV_FWD, {x, w, b_bad}, {y}, "b_bad");
  expect_op_error(f, OpKind::CONV_FWD, {x, w}, {y64}, "F64");
  expect_op_error(f, OpKind::CONV_FWD, {x, -1}, {y}, "'w'");
  expect_op_error(f, OpKind::CONV_DGRAD, {y_bad, w}, {x}, "y_bad");
  expect_op_error(f, OpKind::CONV_WGRAD, {y, x}, {w_bad_c}, "channels");
  expect_op_error(f, OpKind::CONV_FWD, {x16, w16}, {y16}, "F16");
}

}  // namespace
}  // namespace kiln
