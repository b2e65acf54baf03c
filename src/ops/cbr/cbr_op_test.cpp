// The registered CBR ops: tensor binding order (as kiln/program.h documents it) and the errors
// they raise for badly bound tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "ops/cbr/cbr_cpu.h"
#include "ops/cbr/cbr_test_reference.h"
#include "runtime/op_call.h"

namespace kiln {
void register_cbr_cpu();

namespace cbr_test {
namespace {

using kiln::testing::expect_error;

// A hand-built program holding one CBR layer's tensors, each in its own host buffer.
struct OpBench {
  Program program;
  std::vector<std::unique_ptr<std::byte[]>> memory;
  StepScalars scalars;

  OpBench() {
    register_cbr_cpu();
    Layer layer;
    layer.name = "features.3";
    layer.kind = LayerKind::CBR;
    program.graph.layers.push_back(layer);
  }
  int add(const std::string& name, const Shape& shape, DType dtype) {
    TensorSpec t;
    t.name = name, t.shape = shape, t.dtype = dtype;
    program.tensors.push_back(t);
    memory.push_back(std::make_unique<std::byte[]>(numel(shape) * dtype_size(dtype)));
    return static_cast<int>(program.tensors.size()) - 1;
  }
  template <class T>
  T* data(int id) {
    return reinterpret_cast<T*>(memory[id].get());
  }
  template <class T>
  void fill(int id, const std::vector<double>& values) {
    for (size_t i = 0; i < values.size(); ++i) data<T>(id)[i] = static_cast<T>(values[i]);
  }
  Op op(OpKind kind, std::vector<int> in, std::vector<int> out, const Geometry& g) const {
    Op o{kind, 0, std::move(in), std::move(out), {}};
    o.attrs.out_channels = static_cast<int>(g.k), o.attrs.kernel = static_cast<int>(g.kernel);
    o.attrs.stride = static_cast<int>(g.stride), o.attrs.padding = static_cast<int>(g.pad);
    return o;
  }
  void run(const Op& op) {
    OpCall call{op, program, {}, {}, scalars};
    auto arg = [&](int id) {
      TensorArg a;
      if (id >= 0) a.spec = &program.tensors[id], a.data = memory[id].get();
      return a;
    };
    for (int id : op.in) call.in.push_back(arg(id));
    for (int id : op.out) call.out.push_back(arg(id));
    find_op(Device::CPU, op.kind)(call);
  }
};

// Tensor ids of one CBR layer in an OpBench.
struct CbrIds {
  int x, w, gamma, beta, rmean, rvar, conv_out, y, mean, inv_std, bits, dy, dx, dw, dgamma, dbeta,
      dconv, y_inf;
  CbrIds(OpBench& b, const Geometry& g, DType dt) {
    const Shape out{g.n, g.ho(), g.wo(), g.k}, kc{g.k};
    x = b.add("input", {g.n, g.h, g.w, g.c}, dt),
    w = b.add("conv.weight", {g.k, g.kernel, g.kernel, g.c}, dt);
    gamma = b.add("bn.weight", kc, dt), beta = b.add("bn.bias", kc, dt);
    rmean = b.add("bn.running_mean", kc, dt), rvar = b.add("bn.running_var", kc, dt);
    conv_out = b.add("features.3:conv_out", out, dt), y = b.add("features.3", out, dt);
    mean = b.add("features.3:saved_mean", kc, dt),
    inv_std = b.add("features.3:saved_inv_std", kc, dt);
    bits = b.add("features.3:bitmask", {cpu::cbr_mask_bytes(numel(out))}, DType::U8);
    dy = b.add("features.3.grad", out, dt), dx = b.add("input.grad", {g.n, g.h, g.w, g.c}, dt);
    dw = b.add("conv.weight.grad", {g.k, g.kernel, g.kernel, g.c}, dt);
    dgamma = b.add("bn.weight.grad", kc, dt), dbeta = b.add("bn.bias.grad", kc, dt);
    dconv = b.add("features.3:dconv", out, dt), y_inf = b.add("features.3:inf", out, dt);
  }
  std::vector<int> fwd_in() const { return {x, w, gamma, beta}; }
  std::vector<int> fwd_out() const { return {conv_out, y, mean, inv_std, bits, rmean, rvar}; }
  std::vector<int> bwd_in() const { return {dy, bits, conv_out, x, w, gamma, mean, inv_std}; }
  std::vector<int> bwd_out(bool first) const { return {first ? -1 : dx, dw, dgamma, dbeta, dconv}; }
  std::vector<int> inf_in() const { return {x, w, gamma, beta, rmean, rvar}; }
};

const Geometry kGeom{2, 5, 5, 3, 4, 3, 2, 1};

template <class T>
std::vector<T> read(OpBench& b, int id) {
  const T* p = b.data<T>(id);
  return std::vector<T>(p, p + numel(b.program.tensors[id].shape));
}

TEST(CbrOps, AllFourKindsAreRegistered) {
  register_cbr_cpu();
  for (OpKind kind : {OpKind::CBR_FWD, OpKind::CBR_BWD, OpKind::CBR_BWD_FIRST, OpKind::CBR_INF})
    EXPECT_NO_THROW(find_op(Device::CPU, kind)) << op_kind_name(kind);
}

TEST(CbrOps, RegisteredOpsBindTensorsInProgramOrder) {
  OpBench b;
  const CbrIds id(b, kGeom, DType::F32);
  std::mt19937 rng(5);
  const auto x = uniform_vec(rng, kGeom.x_numel(), -1, 1),
             w = uniform_vec(rng, kGeom.w_numel(), -1, 1),
             gamma = uniform_vec(rng, kGeom.k, 0.5, 1.5),
             beta = uniform_vec(rng, kGeom.k, -0.5, 0.5),
             dy = uniform_vec(rng, kGeom.y_numel(), -1, 1);
  b.fill<float>(id.x, x), b.fill<float>(id.w, w), b.fill<float>(id.gamma, gamma);
  b.fill<float>(id.beta, beta), b.fill<float>(id.dy, dy);
  b.fill<float>(id.rmean, std::vector<double>(kGeom.k, 0.0));
  b.fill<float>(id.rvar, std::vector<double>(kGeom.k, 1.0));
  b.run(b.op(OpKind::CBR_FWD, id.fwd_in(), id.fwd_out(), kGeom));

  const Forward ref = reference_forward(kGeom, x, w, gamma, beta, std::vector<double>(kGeom.k, 0.0),
                                        std::vector<double>(kGeom.k, 1.0), 1e-5, 0.1);
  EXPECT_LT(max_error(read<float>(b, id.y), ref.y), 1e-5);
  EXPECT_LT(max_error(read<float>(b, id.mean), ref.mean), 1e-5);
  EXPECT_LT(max_error(read<float>(b, id.rvar), ref.running_var), 1e-5);
  std::vector<uint8_t> mask(kGeom.y_numel());
  cpu::cbr_mask_to_bytes(b.data<uint8_t>(id.bits), kGeom.y_numel(), mask.data());
  EXPECT_EQ(mask, ref.mask);

  const Backward bref = reference_backward(kGeom, ref, dy, x, w, gamma);
  b.run(b.op(OpKind::CBR_BWD, id.bwd_in(), id.bwd_out(false), kGeom));
  EXPECT_LT(max_error(read<float>(b, id.dx), bref.dx), 1e-5);
  EXPECT_LT(max_error(read<float>(b, id.dw), bref.dw), 1e-5);
  EXPECT_LT(max_error(read<float>(b, id.dgamma), bref.dgamma), 1e-5);
  EXPECT_LT(max_error(read<float>(b, id.dbeta), bref.dbeta), 1e-5);

  const std::vector<float> dw_full = read<float>(b, id.dw);
  std::memset(b.data<float>(id.dw), 0, dw_full.size() * sizeof(float));
  b.run(b.op(OpKind::CBR_BWD_FIRST, id.bwd_in(), id.bwd_out(true), kGeom));
  EXPECT_EQ(read<float>(b, id.dw), dw_full);

  // With running stats equal to this batch's statistics, inference equals training output.
  b.fill<float>(id.rmean, ref.mean);
  b.fill<float>(id.rvar, ref.var);
  b.run(b.op(OpKind::CBR_INF, id.inf_in(), {id.y_inf}, kGeom));
  EXPECT_LT(max_error(read<float>(b, id.y_inf), ref.y), 1e-5);
}

TEST(CbrOps, BadBindingsNameTheLayerAndTensor) {
  OpBench b;
  const CbrIds id(b, kGeom, DType::F32);
  const int short_gamma = b.add("bn.weight.short", {kGeom.k - 1}, DType::F32);
  const int small_mask = b.add("mask.small", {cpu::cbr_mask_bytes(kGeom.y_numel()) - 1}, DType::U8);
  const int double_beta = b.add("bn.bias.f64", {kGeom.k}, DType::F64);
  const int half_x = b.add("input.f16", {kGeom.n, kGeom.h, kGeom.w, kGeom.c}, DType::F16);
  const int wrong_c = b.add("conv.weight.c5", {kGeom.k, kGeom.kernel, kGeom.kernel, 5}, DType::F32);

  auto fwd_with = [&](size_t in_slot, int in_id, size_t out_slot, int out_id) {
    std::vector<int> in = id.fwd_in(), out = id.fwd_out();
    if (in_id >= 0) in[in_slot] = in_id;
    if (out_id >= 0) out[out_slot] = out_id;
    return [&b, in, out] { b.run(b.op(OpKind::CBR_FWD, in, out, kGeom)); };
  };
  expect_error(fwd_with(2, short_gamma, 0, -1), {"features.3", "bn.weight.short", "[3]", "[4]"});
  expect_error(fwd_with(3, double_beta, 0, -1), {"features.3", "bn.bias.f64", "F64"});
  expect_error(fwd_with(0, -1, 4, small_mask), {"features.3", "mask.small"});
  expect_error(fwd_with(0, half_x, 0, -1), {"features.3", "F16", "fp32"});
  expect_error(fwd_with(1, wrong_c, 0, -1), {"features.3", "channels"});

  std::vector<int> no_dx = id.bwd_out(true);
  expect_error([&] { b.run(b.op(OpKind::CBR_BWD, id.bwd_in(), no_dx, kGeom)); },
               {"features.3", "dx", "not bound"});
}

TEST(CbrOps, RejectsSingleValuePerChannel) {
  OpBench b;
  const Geometry one{1, 3, 3, 2, 4, 3, 1, 0};  // N * Ho * Wo = 1
  const CbrIds id(b, one, DType::F64);
  expect_error([&] { b.run(b.op(OpKind::CBR_FWD, id.fwd_in(), id.fwd_out(), one)); },
               {"features.3", "more than one value per channel"});
}

}  // namespace
}  // namespace cbr_test
}  // namespace kiln
