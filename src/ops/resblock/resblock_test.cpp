// The fused block-end ops on the CPU through the registry: the tail's apply against a direct
// float64 evaluation (values and mask bits), its identity-shortcut backward against the masked
// gradient, its backward from a gradient in two terms against the summed one, and the errors for
// badly bound tensors. The BN gradients of both branches are checked
// against finite differences through whole programs (tests/gradcheck) and against the unfused
// blocks (tests/compile/residual_fusion_test.cpp).
#include <gtest/gtest.h>

#include <vector>

#include "ir/fused_layer_kinds.h"
#include "ops/resblock/resblock_contract.h"
#include "support/op_bench.h"

namespace kiln {
namespace {

using testing::expect_error;
using testing::OpBench;

constexpr int64_t kN = 2, kH = 3, kW = 3, kC = 5;  // 90 elements: the mask's last byte is partial
const Shape kShape{kN, kH, kW, kC};
constexpr int64_t kElems = kN * kH * kW * kC;

struct TailIds {
  int a, scale_a, shift_a, b, scale_b, shift_b, y, bits, dy, da, db, gamma, mean, inv_std, dgamma, dbeta;
  explicit TailIds(OpBench& bench) {
    a = bench.add("a", kShape, DType::F64, 1), b = bench.add("b", kShape, DType::F64, 2);
    scale_a = bench.add("scale_a", {kC}, DType::F64, 3), shift_a = bench.add("shift_a", {kC}, DType::F64, 4);
    scale_b = bench.add("scale_b", {kC}, DType::F64, 5), shift_b = bench.add("shift_b", {kC}, DType::F64, 6);
    y = bench.add("y", kShape, DType::F64), bits = bench.add("bitmask", {(kElems + 7) / 8}, DType::U8);
    dy = bench.add("dy", kShape, DType::F64, 7), da = bench.add("da", kShape, DType::F64);
    db = bench.add("db", kShape, DType::F64);
    gamma = bench.add("gamma", {kC}, DType::F64, 8), mean = bench.add("mean", {kC}, DType::F64, 9);
    inv_std = bench.add("inv_std", {kC}, DType::F64, 10);
    dgamma = bench.add("dgamma", {kC}, DType::F64), dbeta = bench.add("dbeta", {kC}, DType::F64);
  }
  BnAddRelu<TensorId> fwd(bool normalized_shortcut) const {
    BnAddRelu<TensorId> f;
    f.a = a, f.scale_a = scale_a, f.shift_a = shift_a, f.b = b, f.y = y, f.bitmask = bits;
    if (normalized_shortcut) f.scale_b = scale_b, f.shift_b = shift_b;
    return f;
  }
  BnAddReluBackward<TensorId> identity_bwd() const {
    BnAddReluBackward<TensorId> g;
    g.dy = dy, g.bitmask = bits, g.a = a, g.gamma_a = gamma, g.saved_mean_a = mean, g.saved_inv_std_a = inv_std;
    g.da = da, g.dgamma_a = dgamma, g.dbeta_a = dbeta, g.db = db;
    return g;
  }
};

OpBench tail_bench() { return OpBench(0, "layer1.0.relu", fused_layer::BnAddRelu); }

TEST(ResblockOps, TailApplyAddsTheShortcutBeforeTheRelu) {
  for (bool normalized : {false, true}) {
    SCOPED_TRACE(normalized ? "normalized shortcut" : "identity shortcut");
    OpBench bench = tail_bench();
    const TailIds id(bench);
    bench.run(id.fwd(normalized));
    const auto a = bench.values<double>(id.a), b = bench.values<double>(id.b), y = bench.values<double>(id.y);
    const auto sa = bench.values<double>(id.scale_a), ha = bench.values<double>(id.shift_a);
    const auto sb = bench.values<double>(id.scale_b), hb = bench.values<double>(id.shift_b);
    const auto bits = bench.values<uint8_t>(id.bits);
    int passed = 0;
    for (int64_t i = 0; i < kElems; ++i) {
      const int64_t c = i % kC;
      const double v = a[i] * sa[c] + ha[c] + (normalized ? b[i] * sb[c] + hb[c] : b[i]);
      EXPECT_NEAR(y[i], v > 0 ? v : 0.0, 1e-15) << i;
      EXPECT_EQ((bits[i / 8] >> (i % 8)) & 1, v > 0 ? 1 : 0) << i;
      passed += v > 0;
    }
    EXPECT_GT(passed, kElems / 5);  // the inputs exercise both sides of the ReLU
    EXPECT_LT(passed, kElems * 4 / 5);
    EXPECT_EQ(bits.back() >> (kElems % 8), 0);  // bits past the last element stay 0
  }
}

TEST(ResblockOps, IdentityShortcutGetsTheMaskedGradient) {
  OpBench bench = tail_bench();
  const TailIds id(bench);
  bench.run(id.fwd(false));
  bench.run(id.identity_bwd());
  const auto dy = bench.values<double>(id.dy), db = bench.values<double>(id.db);
  const auto bits = bench.values<uint8_t>(id.bits);
  for (int64_t i = 0; i < kElems; ++i) EXPECT_EQ(db[i], (bits[i / 8] >> (i % 8)) & 1 ? dy[i] : 0.0) << i;
  // dbeta of branch a is the sum of the masked gradient.
  const auto dbeta = bench.values<double>(id.dbeta);
  for (int64_t c = 0; c < kC; ++c) {
    double sum = 0;
    for (int64_t i = c; i < kElems; i += kC) sum += db[i];
    EXPECT_NEAR(dbeta[c], sum, 1e-13) << c;
  }
}

// The gradient in two terms (a block end's whose output feeds two layers) gives the bits of its sum given whole:
// every output of both shortcut kinds, and none equal to what the first term alone gives.
TEST(ResblockOps, TwoGradientTermsGiveTheSummedGradientsBits) {
  for (bool normalized : {false, true}) {
    SCOPED_TRACE(normalized ? "normalized shortcut" : "identity shortcut");
    OpBench bench = tail_bench();
    const TailIds id(bench);
    const int second = bench.add("dy.second", kShape, DType::F64, 11);
    const int whole = bench.add("dy.whole", kShape, DType::F64);
    std::vector<double> sum = bench.values<double>(id.dy);
    const std::vector<double> second_values = bench.values<double>(second);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += second_values[i];
    bench.fill(whole, sum);
    const int dgamma_b = bench.add("dgamma_b", {kC}, DType::F64), dbeta_b = bench.add("dbeta_b", {kC}, DType::F64);
    bench.run(id.fwd(normalized));
    BnAddReluBackward<TensorId> g = id.identity_bwd();
    if (normalized) {
      g.b = id.b, g.gamma_b = id.gamma, g.saved_mean_b = id.mean, g.saved_inv_std_b = id.inv_std;
      g.dgamma_b = dgamma_b, g.dbeta_b = dbeta_b;
    }
    const std::vector<int> outputs{id.da, id.db, id.dgamma, id.dbeta, dgamma_b, dbeta_b};
    auto run = [&](int dy, int dy2) {
      BnAddReluBackward<TensorId> step = g;
      step.dy = dy, step.dy2 = dy2 >= 0 ? TensorId(dy2) : TensorId();
      bench.run(step);
      std::vector<std::vector<double>> out;
      for (int t : outputs) out.push_back(bench.values<double>(t));
      return out;
    };
    const auto summed = run(whole, -1), terms = run(id.dy, second), first_only = run(id.dy, -1);
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!normalized && k >= 4) continue;  // branch b's statistics exist only when it is normalized
      SCOPED_TRACE(bench.program.tensors[outputs[k]].name);
      EXPECT_EQ(terms[k], summed[k]);
      EXPECT_NE(terms[k], first_only[k]);
    }
  }
}

TEST(ResblockOps, BadBindingsNameTheLayerAndTensor) {
  OpBench bench = tail_bench();
  const TailIds id(bench);
  const int short_scale = bench.add("scale.short", {kC - 1}, DType::F64);
  auto run = [&](auto contract) { return [&bench, contract] { bench.run(contract); }; };

  BnAddRelu<TensorId> no_mask = id.fwd(false);
  no_mask.bitmask = TensorId();
  expect_error(run(no_mask), {"layer1.0.relu", "bitmask"});
  BnAddRelu<TensorId> half = id.fwd(true);
  half.shift_b = TensorId();
  expect_error(run(half), {"layer1.0.relu", "scale_b and shift_b"});
  BnAddRelu<TensorId> bad_scale = id.fwd(false);
  bad_scale.scale_a = short_scale;
  expect_error(run(bad_scale), {"layer1.0.relu", "scale.short"});

  BnAddReluBackward<TensorId> partial = id.identity_bwd();
  partial.b = id.b, partial.gamma_b = id.gamma;  // the rest of branch b missing
  expect_error(run(partial), {"layer1.0.relu", "2 of 6"});
  BnAddReluBackward<TensorId> lone_term = id.identity_bwd();
  lone_term.dy2 = id.b, lone_term.db = TensorId();  // a second term without the shortcut's gradient
  expect_error(run(lone_term), {"layer1.0.relu", "dy2", "db"});
  BnAddReluBackward<TensorId> short_term = id.identity_bwd();
  short_term.dy2 = short_scale;
  expect_error(run(short_term), {"layer1.0.relu", "scale.short"});
}

}  // namespace
}  // namespace kiln
