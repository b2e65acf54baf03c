// Fused SGD / AdamW against the PyTorch update rules written out step by step in double, and
// LARS against its rule written out the same way (lars_reference_test.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/optimizer/lars_reference_test.h"
#include "ops/optimizer/optimizer_cpu.h"
#include "support/cpu_test_util.h"
#include "support/scoped_threads.h"

namespace kiln::cpu {
namespace {

using kiln::testing::mixed_err;
using kiln::testing::uniform_vec;

// torch.optim.SGD (dampening 0) for one parameter tensor, as its for-loop reads.
struct TorchSgd {
  double lr, momentum, weight_decay;
  bool nesterov;
  std::vector<double> buf;
  bool has_buf = false;
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    std::vector<double> d_p = grad;
    if (weight_decay != 0)
      for (size_t i = 0; i < p.size(); ++i) d_p[i] += weight_decay * p[i];
    if (momentum != 0) {
      if (!has_buf) {
        buf = d_p;  // torch.clone(d_p).detach()
        has_buf = true;
      } else {
        for (size_t i = 0; i < p.size(); ++i) buf[i] = momentum * buf[i] + d_p[i];
      }
      if (nesterov)
        for (size_t i = 0; i < p.size(); ++i) d_p[i] += momentum * buf[i];
      else
        d_p = buf;
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * d_p[i];
  }
};

// torch.optim.AdamW (amsgrad off, single-tensor path).
struct TorchAdamW {
  double lr, beta1, beta2, eps, weight_decay;
  std::vector<double> exp_avg, exp_avg_sq;
  int step_count = 0;
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    if (exp_avg.empty()) exp_avg.assign(p.size(), 0.0), exp_avg_sq.assign(p.size(), 0.0);
    ++step_count;
    const double bias_correction1 = 1 - std::pow(beta1, step_count);
    const double bias_correction2 = 1 - std::pow(beta2, step_count);
    const double step_size = lr / bias_correction1;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - lr * weight_decay;
      exp_avg[i] += (1 - beta1) * (grad[i] - exp_avg[i]);  // lerp
      exp_avg_sq[i] = exp_avg_sq[i] * beta2 + (1 - beta2) * grad[i] * grad[i];
      const double denom = std::sqrt(exp_avg_sq[i]) / std::sqrt(bias_correction2) + eps;
      p[i] += -step_size * exp_avg[i] / denom;
    }
  }
};

constexpr int64_t kSize = 1000;
constexpr int kSteps = 6;

template <class T>
void check_sgd(const SgdHyper& h, double tol) {
  std::mt19937 rng(11);
  std::vector<double> ref = uniform_vec(rng, kSize, -1.0, 1.0);
  std::vector<T> p(ref.begin(), ref.end()), buf(kSize, T(0));
  TorchSgd torch{h.lr, h.momentum, h.weight_decay, h.nesterov, {}};
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<double> g = uniform_vec(rng, kSize, -0.5, 0.5);
    const std::vector<T> gt(g.begin(), g.end());
    torch.step(ref, g);
    sgd_update<T>(kSize, gt.data(), p.data(), h.momentum != 0 ? buf.data() : nullptr, h);
    ASSERT_LT(mixed_err(p, ref), tol) << "step " << s;
  }
}

TEST(SgdUpdate, MomentumMatchesTorch) {
  check_sgd<double>({0.1, 0.9, 0.0, false}, 1e-12);
  check_sgd<float>({0.1, 0.9, 0.0, false}, 1e-6);
}
TEST(SgdUpdate, NesterovWithWeightDecayMatchesTorch) {
  check_sgd<double>({0.05, 0.9, 1e-2, true}, 1e-12);
  check_sgd<float>({0.05, 0.9, 1e-2, true}, 1e-6);
}
TEST(SgdUpdate, WeightDecayMatchesTorch) { check_sgd<double>({0.2, 0.5, 5e-2, false}, 1e-12); }
TEST(SgdUpdate, NoMomentumIsPlainGradientDescent) {
  check_sgd<double>({0.3, 0.0, 1e-3, false}, 1e-12);
  check_sgd<float>({0.3, 0.0, 0.0, false}, 1e-6);
}

// p = 1, g = 0.5 twice, lr 0.1, momentum 0.9, weight decay 0.01, by hand:
// step 1: g' = 0.5 + 0.01 = 0.51, buf = 0.51, p = 1 - 0.051 = 0.949
// step 2: g' = 0.5 + 0.00949 = 0.50949, buf = 0.459 + 0.50949 = 0.96849, p = 0.852151
// Nesterov step 1: g = 0.51 + 0.9 * 0.51 = 0.969, p = 0.9031.
TEST(SgdUpdate, HandComputedOneElement) {
  const SgdHyper h{0.1, 0.9, 0.01, false};
  double p = 1, buf = 0;
  const double g = 0.5;
  sgd_update<double>(1, &g, &p, &buf, h);
  EXPECT_NEAR(p, 0.949, 1e-15);
  EXPECT_NEAR(buf, 0.51, 1e-15);
  sgd_update<double>(1, &g, &p, &buf, h);
  EXPECT_NEAR(buf, 0.96849, 1e-15);
  EXPECT_NEAR(p, 0.852151, 1e-15);

  double pn = 1, bufn = 0;
  sgd_update<double>(1, &g, &pn, &bufn, {0.1, 0.9, 0.01, true});
  EXPECT_NEAR(pn, 0.9031, 1e-15);
}

template <class T>
void check_adamw(const AdamWHyper& base, double tol) {
  std::mt19937 rng(12);
  std::vector<double> ref = uniform_vec(rng, kSize, -1.0, 1.0);
  std::vector<T> p(ref.begin(), ref.end()), m(kSize, T(0)), v(kSize, T(0));
  TorchAdamW torch{base.lr, base.beta1, base.beta2, base.eps, base.weight_decay, {}, {}};
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<double> g = uniform_vec(rng, kSize, -0.5, 0.5);
    const std::vector<T> gt(g.begin(), g.end());
    torch.step(ref, g);
    AdamWHyper h = base;
    h.step = s + 1;
    adamw_update<T>(kSize, gt.data(), p.data(), m.data(), v.data(), h);
    ASSERT_LT(mixed_err(p, ref), tol) << "step " << s;
  }
}

TEST(AdamWUpdate, MatchesTorch) {
  check_adamw<double>({1e-2, 0.9, 0.999, 1e-8, 0.0, 1}, 1e-12);
  check_adamw<float>({1e-2, 0.9, 0.999, 1e-8, 0.0, 1}, 1e-6);
}
TEST(AdamWUpdate, DecoupledWeightDecayMatchesTorch) {
  check_adamw<double>({1e-2, 0.8, 0.99, 1e-6, 0.05, 1}, 1e-12);
  check_adamw<float>({1e-2, 0.8, 0.99, 1e-6, 0.05, 1}, 1e-6);
}

// With bias correction, a constant gradient moves p by lr * sign(g) every step (up to eps):
// m_hat = g and v_hat = g^2 exactly when m and v start at zero.
TEST(AdamWUpdate, HandComputedConstantGradientMovesByLr) {
  AdamWHyper h{0.1, 0.9, 0.999, 1e-8, 0.0, 1};
  double p = 1, m = 0, v = 0;
  const double g = 0.5;
  adamw_update<double>(1, &g, &p, &m, &v, h);
  EXPECT_NEAR(m, 0.05, 1e-16);
  EXPECT_NEAR(v, 0.00025, 1e-18);
  EXPECT_NEAR(p, 1 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);  // 0.9 + 2e-9
  for (h.step = 2; h.step <= 3; ++h.step) adamw_update<double>(1, &g, &p, &m, &v, h);
  EXPECT_NEAR(p, 0.7, 1e-7);

  // Negative gradient moves up; decoupled decay first scales p by 1 - lr * wd = 0.99.
  double q = 2, mq = 0, vq = 0;
  const double gq = -3;
  adamw_update<double>(1, &gq, &q, &mq, &vq, {0.1, 0.9, 0.999, 0.0, 0.1, 1});
  EXPECT_NEAR(q, 2 * 0.99 + 0.1, 1e-15);
}

TEST(AdamWUpdate, ZeroGradientLeavesZeroPaddingAlone) {
  // The regions hold alignment gaps whose gradients stay zero: they must not turn into NaN.
  double p = 0, m = 0, v = 0, g = 0;
  adamw_update<double>(1, &g, &p, &m, &v, {0.1, 0.9, 0.999, 1e-8, 0.01, 1});
  EXPECT_EQ(p, 0.0);
  EXPECT_EQ(m, 0.0);
  EXPECT_EQ(v, 0.0);
}

// --- LARS ---

// A region of tensors as a compiled program lays it out (gaps between them), with a conv-like
// weight, a 1-D tensor, a matrix, a tensor whose gradient is zero and one whose weights are zero
// (both take trust ratio 1), and another 1-D tensor last.
struct LarsRegion {
  std::vector<LarsSegment> segments;
  int64_t n = 0;
  size_t zero_grad = 0, zero_weight = 0;  // indices into segments
};

LarsRegion lars_region(bool skip_1d) {
  LarsRegion r;
  auto add = [&](int64_t length, bool one_dim) {
    r.segments.push_back({r.n, length, skip_1d && one_dim});
    r.n += (length + 7) / 8 * 8 + 8;  // a gap after every tensor
    return r.segments.size() - 1;
  };
  add(4 * 3 * 3 * 3, false);
  add(16, true);
  add(10 * 40, false);
  r.zero_grad = add(5 * 10, false);
  r.zero_weight = add(3 * 7, false);
  add(5, true);
  return r;
}

// Parameters and gradients over the region: `gap` in the gaps, zeros where a tensor's are zero.
std::vector<double> region_values(const LarsRegion& r, std::mt19937& rng, double lo, double hi, size_t zero,
                                  double gap) {
  std::vector<double> v(size_t(r.n), gap);
  for (size_t s = 0; s < r.segments.size(); ++s) {
    const LarsSegment& seg = r.segments[s];
    const std::vector<double> values = uniform_vec(rng, size_t(seg.length), lo, hi);
    for (int64_t i = 0; i < seg.length; ++i) v[size_t(seg.offset + i)] = s == zero ? 0.0 : values[size_t(i)];
  }
  return v;
}

template <class T>
void check_lars(const LarsHyper& h, bool skip_1d, double tol) {
  const LarsRegion r = lars_region(skip_1d);
  std::mt19937 rng(13);
  std::vector<double> w = region_values(r, rng, -1.0, 1.0, r.zero_weight, 7.0), v(size_t(r.n), 0.0);
  std::vector<T> wt(w.begin(), w.end()), vt(size_t(r.n), T(0));
  const testing::LarsReference ref{h.lr, h.momentum, h.weight_decay, h.trust_coefficient};
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<double> g = region_values(r, rng, -0.5, 0.5, r.zero_grad, 3.0);
    const std::vector<T> gt(g.begin(), g.end());
    ref.step(r.segments, w, v, g);
    lars_update<T>(r.segments, gt.data(), wt.data(), vt.data(), h);
    ASSERT_LT(testing::lars_err(wt, w), tol) << "parameters, step " << s;
    ASSERT_LT(testing::lars_err(vt, v), tol) << "momentum, step " << s;
  }
  // The gaps are in no tensor: untouched, whatever their gradients hold.
  for (size_t i = 0; i + 1 < r.segments.size(); ++i)
    for (int64_t e = r.segments[i].offset + r.segments[i].length; e < r.segments[i + 1].offset; ++e) {
      ASSERT_EQ(wt[size_t(e)], T(7)) << "element " << e;
      ASSERT_EQ(vt[size_t(e)], T(0)) << "element " << e;
    }
}

TEST(LarsUpdate, MatchesTheRuleOverSeveralSteps) {
  const LarsHyper h{0.5, 0.9, 1e-2, 0.02};
  check_lars<double>(h, true, 1e-12);
  check_lars<float>(h, true, 1e-5);
}
TEST(LarsUpdate, OneDimensionalTensorsTakeLarsStepsWithoutSkip) {
  const LarsHyper h{0.5, 0.9, 1e-2, 0.02};
  check_lars<double>(h, false, 1e-12);
  check_lars<float>(h, false, 1e-5);
}
TEST(LarsUpdate, WithoutMomentumOrWeightDecay) {
  check_lars<double>({2.0, 0.0, 0.0, 1e-3}, true, 1e-12);
  check_lars<float>({2.0, 0.0, 0.0, 1e-3}, true, 1e-5);
}

// w = (3, 4), g = (0.6, 0.8): ||w|| = 5, ||g|| = 1; eta 0.1, wd 0.2:
// trust = 0.1 * 5 / (1 + 0.2 * 5) = 0.25; d = g + 0.2 w = (1.2, 1.6); v = 0.25 d = (0.3, 0.4);
// lr 0.1: w = (2.97, 3.96). A plain 1-D tensor b = 1, g = 0.5 takes b = 1 - 0.1 * 0.5 = 0.95.
// Step 2 with the same g and momentum 0.9: ||w|| = 4.95, trust = 0.495 / 1.99; the plain one
// has v = 0.9 * 0.5 + 0.5 = 0.95, b = 0.95 - 0.095 = 0.855.
TEST(LarsUpdate, HandComputed) {
  const std::vector<LarsSegment> segments = {{0, 2, false}, {2, 1, true}};
  const LarsHyper h{0.1, 0.9, 0.2, 0.1};
  std::vector<double> w = {3, 4, 1}, v = {0, 0, 0};
  const std::vector<double> g = {0.6, 0.8, 0.5};
  lars_update<double>(segments, g.data(), w.data(), v.data(), h);
  EXPECT_NEAR(v[0], 0.3, 1e-15);
  EXPECT_NEAR(v[1], 0.4, 1e-15);
  EXPECT_NEAR(w[0], 2.97, 1e-15);
  EXPECT_NEAR(w[1], 3.96, 1e-15);
  EXPECT_NEAR(w[2], 0.95, 1e-15);
  lars_update<double>(segments, g.data(), w.data(), v.data(), h);
  const double trust = 0.1 * 4.95 / (1 + 0.2 * 4.95);
  EXPECT_NEAR(v[0], 0.9 * 0.3 + trust * (0.6 + 0.2 * 2.97), 1e-15);
  EXPECT_NEAR(w[0], 2.97 - 0.1 * v[0], 1e-15);
  EXPECT_NEAR(w[2], 0.855, 1e-15);
}

// A zero gradient or zero weights give trust ratio 1, not eta / wd or 0 (nor a NaN): the step is
// momentum SGD with weight decay.
TEST(LarsUpdate, ZeroNormsTakeTrustOne) {
  const std::vector<LarsSegment> segments = {{0, 2, false}, {2, 2, false}};
  const LarsHyper h{0.1, 0.9, 0.25, 0.001};
  std::vector<double> w = {2, -4, 0, 0}, v = {0, 0, 0, 0};
  const std::vector<double> g = {0, 0, 0.5, -1};
  lars_update<double>(segments, g.data(), w.data(), v.data(), h);
  EXPECT_EQ(v, (std::vector<double>{0.5, -1, 0.5, -1}));  // 1 * (0 + 0.25 w); 1 * (g + 0)
  EXPECT_NEAR(w[0], 2 - 0.05, 1e-15);
  EXPECT_NEAR(w[1], -4 + 0.1, 1e-15);
  EXPECT_NEAR(w[2], -0.05, 1e-15);
  EXPECT_NEAR(w[3], 0.1, 1e-15);
}

// The norms of a tensor longer than one piece add the pieces in order: any thread count gives
// the same bytes.
TEST(LarsUpdate, SameBytesAtAnyThreadCount) {
  const std::vector<LarsSegment> segments = {{0, 100003, false}, {100008, 37, true}, {100048, 70001, false}};
  const int64_t n = 100048 + 70001;
  std::mt19937 rng(17);
  const std::vector<double> w0 = uniform_vec(rng, size_t(n), -1.0, 1.0), g0 = uniform_vec(rng, size_t(n), -1.0, 1.0);
  const std::vector<float> g(g0.begin(), g0.end());
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3, 4}) {
    testing::ScopedThreads scoped(threads);
    std::vector<float> w(w0.begin(), w0.end()), v(size_t(n), 0.f);
    for (int s = 0; s < 2; ++s) lars_update<float>(segments, g.data(), w.data(), v.data(), {0.1, 0.9, 1e-3, 0.01});
    results.push_back(w);
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

}  // namespace
}  // namespace kiln::cpu
