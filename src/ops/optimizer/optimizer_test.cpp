// Fused SGD / AdamW against the PyTorch update rules written out step by step in double.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "support/cpu_test_util.h"
#include "ops/optimizer/optimizer_cpu.h"

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

}  // namespace
}  // namespace kiln::cpu
