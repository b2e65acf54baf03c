// The fused CBR operator against separate Conv + BN + ReLU layers, both compiled from the same
// blueprint (fusion on / off) with identical initial parameters and inputs, in fp32.
#include <gtest/gtest.h>

#include "support/program_fixture.h"

namespace kiln {
namespace {

using testing::rel_l2;

struct Pair {
  std::unique_ptr<Executable> fused, unfused;
};

Pair build(const Blueprint& m, int batch, Shape hwc) {
  CompileOptions o;
  o.batch = batch;
  o.input_hwc = hwc;
  Pair p;
  p.fused = std::make_unique<Executable>(compile(m, o), 5);
  o.fuse_cbr = false;
  p.unfused = std::make_unique<Executable>(compile(m, o), 5);
  std::mt19937 rng(99);
  testing::fill_normal(p.fused->tensor("input"), rng);
  testing::fill_labels(p.fused->tensor("labels"), 10, rng);
  for (const char* name : {"input", "labels"}) {
    HostTensor a = p.fused->tensor(name), b = p.unfused->tensor(name);
    std::memcpy(b.data, a.data, a.spec->bytes());
  }
  return p;
}

// conv c0 (first layer) -> bn b0 -> relu r0 -> conv c1 (stride 2) -> bn b1 -> relu r1 -> fc
Blueprint two_blocks(int k0, int k1, int kernel1) {
  Blueprint m("m");
  m.conv(k0, 3, 1, 1, false, "c0").bn("b0").relu("r0");
  m.conv(k1, kernel1, 2, kernel1 / 2, false, "c1").bn("b1").relu("r1");
  m.flatten("flat").fc(10, true, "fc");
  return m;
}

void expect_close(Executable& a, const std::string& name_a, Executable& b, const std::string& name_b,
                  double tol = 2e-5) {
  HostTensor ta = a.tensor(name_a), tb = b.tensor(name_b);
  ASSERT_EQ(ta.numel(), tb.numel()) << name_a;
  EXPECT_LT(rel_l2(ta, tb), tol) << name_a << " vs " << name_b;
}

TEST(CbrEquivalence, TrainingForwardBackwardAndFirstLayer) {
  for (auto [k0, k1, kernel1, hw] : {std::tuple{8, 16, 3, 9}, std::tuple{16, 8, 1, 12}, std::tuple{8, 24, 3, 7}}) {
    SCOPED_TRACE("k0=" + std::to_string(k0) + " k1=" + std::to_string(k1));
    Pair p = build(two_blocks(k0, k1, kernel1), 4, {hw, hw, 3});
    EXPECT_EQ(p.fused->program().graph.count(LayerKind::CBR), 2);
    EXPECT_EQ(p.unfused->program().graph.count(LayerKind::CBR), 0);
    for (int step = 0; step < 2; ++step) {  // two steps: running statistics accumulate
      const StepScalars s{0.05f, step, 3};
      // Forward output, saved statistics, running statistics and masks, read before backward
      // reuses their memory (the static plan ends their lifetimes there).
      for (Executable* e : {p.fused.get(), p.unfused.get()}) e->run_forward(s);
      expect_close(*p.fused, "c0", *p.unfused, "r0");
      expect_close(*p.fused, "c1", *p.unfused, "r1");
      for (auto [cbr, bn] : {std::pair{"c0", "b0"}, std::pair{"c1", "b1"}}) {
        expect_close(*p.fused, std::string(cbr) + ":saved_mean", *p.unfused, std::string(bn) + ":saved_mean");
        expect_close(*p.fused, std::string(cbr) + ":saved_inv_std", *p.unfused, std::string(bn) + ":saved_inv_std");
        expect_close(*p.fused, std::string(bn) + ".running_mean", *p.unfused, std::string(bn) + ".running_mean");
        expect_close(*p.fused, std::string(bn) + ".running_var", *p.unfused, std::string(bn) + ".running_var");
      }
      EXPECT_NEAR(testing::loss_of(*p.fused), testing::loss_of(*p.unfused), 1e-5);
      // The bit mask, transcoded, equals the unfused ReLU's byte mask.
      for (auto [cbr, relu] : {std::pair{"c0", "r0"}, std::pair{"c1", "r1"}}) {
        HostTensor bits = p.fused->tensor(std::string(cbr) + ":bitmask");
        HostTensor bytes = p.unfused->tensor(std::string(relu) + ":mask");
        int64_t mismatches = 0, ones = 0;
        for (int64_t i = 0; i < bytes.numel(); ++i) {
          const bool bit = (bits.as<uint8_t>()[i / 8] >> (i % 8)) & 1;
          mismatches += bit != (bytes.as<uint8_t>()[i] != 0);
          ones += bit;
        }
        EXPECT_EQ(mismatches, 0) << cbr;
        EXPECT_GT(ones, bytes.numel() / 5) << cbr;  // a real mask, neither all-zero nor trivial
        EXPECT_LT(ones, bytes.numel());
      }
      for (Executable* e : {p.fused.get(), p.unfused.get()}) e->run_backward(s);
      // All parameter gradients: the first layer's (CBR_BWD_FIRST, no dX) depend on the dX
      // that the second CBR's backward computed.
      for (int id : p.fused->program().grads) {
        const std::string name = p.fused->program().tensors[id].name;
        expect_close(*p.fused, name, *p.unfused, name, 5e-5);
      }
    }
    const int first_kind = int(p.fused->program().backward.back().kind);
    EXPECT_EQ(first_kind, int(OpKind::CBR_BWD_FIRST));
    // Inference: CBR_INF against conv + BN(running stats) + ReLU.
    for (Executable* e : {p.fused.get(), p.unfused.get()}) e->run_inference({0.f, 2, 3});
    expect_close(*p.fused, "c1:inf", *p.unfused, "r1:inf");
    expect_close(*p.fused, "fc:inf", *p.unfused, "fc:inf");
  }
}

}  // namespace
}  // namespace kiln
