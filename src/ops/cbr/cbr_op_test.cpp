// The registered CBR ops: ops made from their contracts (ops/cbr/cbr_contract.h) bind the tensors
// they name, and the errors they raise for badly bound tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "ops/cbr/cbr_contract.h"
#include "ops/cbr/cbr_cpu.h"
#include "runtime/op_call.h"
#include "support/cbr_test_reference.h"
#include "support/op_bench.h"

namespace kiln {
namespace cbr_test {
namespace {

using kiln::testing::expect_error;

using kiln::testing::OpBench;

// The op tests' bench around one CBR layer, "features.3".
OpBench features3() { return OpBench(0, "features.3", LayerKind::CBR); }

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
  // The ops' contracts over these tensors, with the geometry's stride and padding.
  CbrForward<TensorId> fwd(const Geometry& g) const {
    CbrForward<TensorId> c;
    c.x = x, c.w = w, c.gamma = gamma, c.beta = beta;
    c.conv_out = conv_out, c.y = y, c.saved_mean = mean, c.saved_inv_std = inv_std, c.bitmask = bits;
    c.running_mean = rmean, c.running_var = rvar;
    c.stride = static_cast<int>(g.stride), c.padding = static_cast<int>(g.pad);
    return c;
  }
  CbrBackward<TensorId> bwd(const Geometry& g) const {
    CbrBackward<TensorId> c;
    c.dy = dy, c.bitmask = bits, c.conv_out = conv_out, c.x = x, c.w = w, c.gamma = gamma;
    c.saved_mean = mean, c.saved_inv_std = inv_std;
    c.dx = dx, c.dw = dw, c.dgamma = dgamma, c.dbeta = dbeta, c.dconv = dconv;
    c.stride = static_cast<int>(g.stride), c.padding = static_cast<int>(g.pad);
    return c;
  }
  // CBR_BWD_FIRST, as the layer lowers it: the backward's contract without dx.
  Op bwd_first_op(const Geometry& g) const {
    CbrBackward<TensorId> c = bwd(g);
    c.dx = TensorId();
    Op op = make_op(c, 0);
    op.kind = OpKind::CBR_BWD_FIRST;
    return op;
  }
  CbrInference<TensorId> inf(const Geometry& g) const {
    CbrInference<TensorId> c;
    c.x = x, c.w = w, c.gamma = gamma, c.beta = beta, c.running_mean = rmean, c.running_var = rvar;
    c.y = y_inf;
    c.stride = static_cast<int>(g.stride), c.padding = static_cast<int>(g.pad);
    return c;
  }
};

const Geometry kGeom{2, 5, 5, 3, 4, 3, 2, 1};

TEST(CbrOps, RegisteredOpsBindTheTensorsTheirContractsName) {
  OpBench b = features3();
  const CbrIds id(b, kGeom, DType::F32);
  std::mt19937 rng(5);
  const auto x = uniform_vec(rng, kGeom.x_numel(), -1, 1),
             w = uniform_vec(rng, kGeom.w_numel(), -1, 1),
             gamma = uniform_vec(rng, kGeom.k, 0.5, 1.5),
             beta = uniform_vec(rng, kGeom.k, -0.5, 0.5),
             dy = uniform_vec(rng, kGeom.y_numel(), -1, 1);
  b.fill(id.x, x), b.fill(id.w, w), b.fill(id.gamma, gamma);
  b.fill(id.beta, beta), b.fill(id.dy, dy);
  b.fill(id.rmean, std::vector<double>(kGeom.k, 0.0));
  b.fill(id.rvar, std::vector<double>(kGeom.k, 1.0));
  b.run(make_op(id.fwd(kGeom), 0));

  const Forward ref = reference_forward(kGeom, x, w, gamma, beta, std::vector<double>(kGeom.k, 0.0),
                                        std::vector<double>(kGeom.k, 1.0), 1e-5, 0.1);
  EXPECT_LT(mixed_err(b.values<float>(id.y), ref.y), 1e-5);
  EXPECT_LT(mixed_err(b.values<float>(id.mean), ref.mean), 1e-5);
  EXPECT_LT(mixed_err(b.values<float>(id.rvar), ref.running_var), 1e-5);
  std::vector<uint8_t> mask(kGeom.y_numel());
  cpu::cbr_mask_to_bytes(b.data<uint8_t>(id.bits), kGeom.y_numel(), mask.data());
  EXPECT_EQ(mask, ref.mask);

  const Backward bref = reference_backward(kGeom, ref, dy, x, w, gamma);
  b.run(make_op(id.bwd(kGeom), 0));
  EXPECT_LT(mixed_err(b.values<float>(id.dx), bref.dx), 1e-5);
  EXPECT_LT(mixed_err(b.values<float>(id.dw), bref.dw), 1e-5);
  EXPECT_LT(mixed_err(b.values<float>(id.dgamma), bref.dgamma), 1e-5);
  EXPECT_LT(mixed_err(b.values<float>(id.dbeta), bref.dbeta), 1e-5);

  const std::vector<float> dw_full = b.values<float>(id.dw);
  std::memset(b.data<float>(id.dw), 0, dw_full.size() * sizeof(float));
  b.run(id.bwd_first_op(kGeom));
  EXPECT_EQ(b.values<float>(id.dw), dw_full);

  // With running stats equal to this batch's statistics, inference equals training output.
  b.fill(id.rmean, ref.mean);
  b.fill(id.rvar, ref.var);
  b.run(make_op(id.inf(kGeom), 0));
  EXPECT_LT(mixed_err(b.values<float>(id.y_inf), ref.y), 1e-5);
}

TEST(CbrOps, BadBindingsNameTheLayerAndTensor) {
  OpBench b = features3();
  const CbrIds id(b, kGeom, DType::F32);
  const int short_gamma = b.add("bn.weight.short", {kGeom.k - 1}, DType::F32);
  const int small_mask = b.add("mask.small", {cpu::cbr_mask_bytes(kGeom.y_numel()) - 1}, DType::U8);
  const int double_beta = b.add("bn.bias.f64", {kGeom.k}, DType::F64);
  const int half_x = b.add("input.f16", {kGeom.n, kGeom.h, kGeom.w, kGeom.c}, DType::F16);
  const int wrong_c = b.add("conv.weight.c5", {kGeom.k, kGeom.kernel, kGeom.kernel, 5}, DType::F32);

  // The forward with one of its tensors swapped for a bad one.
  auto fwd_with = [&](const std::function<void(CbrForward<TensorId>&)>& change) {
    CbrForward<TensorId> c = id.fwd(kGeom);
    change(c);
    return [&b, c] { b.run(make_op(c, 0)); };
  };
  expect_error(fwd_with([&](auto& c) { c.gamma = short_gamma; }),
               {"features.3", "bn.weight.short", "[3]", "[4]"});
  expect_error(fwd_with([&](auto& c) { c.beta = double_beta; }), {"features.3", "bn.bias.f64", "F64"});
  expect_error(fwd_with([&](auto& c) { c.bitmask = small_mask; }), {"features.3", "mask.small"});
  expect_error(fwd_with([&](auto& c) { c.x = half_x; }), {"features.3", "F16", "fp32"});
  expect_error(fwd_with([&](auto& c) { c.w = wrong_c; }), {"features.3", "channels"});

  // Fusion across layers' optional fields, bound half-way: a consumer's in_scale without its
  // in_shift and scratch, a producer without y that has no scale and shift, a backward without the
  // mask that cannot recompute it.
  const int in_scale = b.add("features.2:scale", {kGeom.c}, DType::F32);
  expect_error(fwd_with([&](auto& c) { c.in_scale = in_scale; }), {"features.3", "in_scale", "x_applied"});
  expect_error(fwd_with([&](auto& c) { c.y = TensorId(), c.bitmask = TensorId(); }),
               {"features.3", "'scale' and 'shift'"});
  CbrBackward<TensorId> no_mask = id.bwd(kGeom);
  no_mask.bitmask = TensorId();
  expect_error([&] { b.run(make_op(no_mask, 0)); }, {"features.3", "bitmask", "'scale' and 'shift'"});

  // CBR_BWD (not the first layer's) without dx.
  CbrBackward<TensorId> no_dx = id.bwd(kGeom);
  no_dx.dx = TensorId();
  expect_error([&] { b.run(make_op(no_dx, 0)); }, {"features.3", "dx", "not bound"});
}

TEST(CbrOps, RejectsSingleValuePerChannel) {
  OpBench b = features3();
  const Geometry one{1, 3, 3, 2, 4, 3, 1, 0};  // N * Ho * Wo = 1
  const CbrIds id(b, one, DType::F64);
  expect_error([&] { b.run(make_op(id.fwd(one), 0)); },
               {"features.3", "more than one value per channel"});
}

}  // namespace
}  // namespace cbr_test
}  // namespace kiln
