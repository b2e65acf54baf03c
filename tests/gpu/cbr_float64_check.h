#pragma once
// A float64 reference of one Conv -> BN -> ReLU block (src/ops/cbr/cbr_test_reference.h, written
// from the definitions) for checking a GPU block's backward at a tolerance that catches a wrong
// BN backward in every precision.
//
// In fp16/bf16 the GPU stores conv_out rounded (as PyTorch's autocast does), so a ReLU mask bit
// may differ from float64's where the pre-activation is within rounding of zero; each such flip
// moves a whole dY element into or out of dW, dgamma, dbeta and dX. The check therefore (1) counts
// the flips and requires every one of them to lie within rounding of zero, and (2) compares the
// gradients with float64's computed through the GPU's own mask, so what remains is rounding alone
// (tolerance(): 5e-3 fp16, 3e-2 bf16, 1e-4 fp32 relative L2).
//
// With a dY independent of x the BN backward's correction terms (the mean of dY*mask and the
// x_hat * dgamma term) nearly vanish, and a backward missing one would still pass. correlated_dy()
// makes dY depend on the pre-activation, and the check asserts that dropping either term moves dX
// by many times the tolerance: a BN backward without it fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/cbr_block.h"
#include "support/cbr_test_reference.h"

namespace kiln::testing {

class Float64Block {
 public:
  // x and w as the block holds them (w: the fp32 master weights; the GPU computes with them
  // rounded to the activation dtype); empty gamma/beta mean 1 and 0.
  Float64Block(const BlockShape& s, const std::vector<float>& x, const std::vector<float>& w,
               std::vector<float> gamma, std::vector<float> beta, Precision precision)
      : g_{s.n, s.hw, s.hw, s.c, s.k, s.kernel, s.stride, s.pad()}, precision_(precision), w_master_(w) {
    const DType dtype = activation_dtype(precision);
    if (gamma.empty()) gamma.assign(size_t(s.k), 1.f);
    if (beta.empty()) beta.assign(size_t(s.k), 0.f);
    x_.assign(x.begin(), x.end());
    for (float v : w) w_.push_back(round_to(dtype, v));
    gamma_.assign(gamma.begin(), gamma.end());
    beta_.assign(beta.begin(), beta.end());
    fwd_ = cbr_test::reference_forward(g_, x_, w_, gamma_, beta_, std::vector<double>(size_t(s.k), 0.0),
                                       std::vector<double>(size_t(s.k), 1.0), 1e-5, 0.1);
    mean_abs_.assign(size_t(s.k), 0.0);
    for (size_t i = 0; i < fwd_.z.size(); ++i) mean_abs_[i % size_t(s.k)] += std::abs(fwd_.z[i]) / double(g_.rows());
  }

  // dY = 0.25 + 0.5 * pre-activation + 0.5 * noise, rounded to the activation dtype: the masked
  // dY has a per-channel mean far from zero and correlates with x_hat.
  std::vector<float> correlated_dy(std::mt19937& rng) const {
    std::normal_distribution<double> noise;
    std::vector<float> dy(fwd_.pre.size());
    for (size_t i = 0; i < dy.size(); ++i)
      dy[i] = round_to(activation_dtype(precision_), float(0.25 + 0.5 * fwd_.pre[i] + 0.5 * noise(rng)));
    return dy;
  }

  // `mask`: the run's ReLU mask (0/1 per element); `grads`: conv.weight.grad, bn.weight.grad,
  // bn.bias.grad and, when the block computes it, dx; `w`: the run's weights (must be this
  // reference's).
  void expect_backward_matches(const std::vector<float>& mask, const std::map<std::string, std::vector<float>>& grads,
                               const std::vector<float>& w, const std::vector<float>& dy, const std::string& what) const {
    SCOPED_TRACE(what);
    ASSERT_EQ(w, w_master_) << "the run's weights are not the reference's";
    ASSERT_EQ(mask.size(), fwd_.pre.size());
    expect_flips_only_at_ties(mask);
    cbr_test::Forward f = fwd_;
    for (size_t i = 0; i < mask.size(); ++i) f.mask[i] = mask[i] != 0;
    const std::vector<double> dyd(dy.begin(), dy.end());
    const cbr_test::Backward b = cbr_test::reference_backward(g_, f, dyd, x_, w_, gamma_);
    const double tol = tolerance(precision_);
    expect_below(grads, "conv.weight.grad", b.dw, tol);
    expect_below(grads, "bn.weight.grad", b.dgamma, tol);
    expect_below(grads, "bn.bias.grad", b.dbeta, tol);
    if (!grads.count("dx")) return;
    expect_below(grads, "dx", b.dx, tol);
    // The tolerance catches a BN backward that drops a correction term: dX without the mean of
    // dY*mask, or without x_hat * dgamma, is many tolerances away.
    const std::vector<double> dz_xhat_only = without_term(b, f, true), dz_mean_only = without_term(b, f, false);
    EXPECT_GT(rel_l2(dx_of(dz_xhat_only), b.dx), 10 * tol) << "dY too weakly correlated: a missing mean term would pass";
    EXPECT_GT(rel_l2(dx_of(dz_mean_only), b.dx), 10 * tol) << "dY too weakly correlated: a missing x_hat term would pass";
  }

 private:
  static double unit_roundoff(Precision p) {
    // fp32 also carries the convolution's fp32 accumulation error, far above 2^-24.
    return p == Precision::FP16 ? std::ldexp(1.0, -11) : p == Precision::BF16 ? std::ldexp(1.0, -8) : 1e-6;
  }

  // A mask bit may differ from float64's only where |pre-activation| is within what rounding can
  // move it. The GPU's pre-activation is gamma * (z' - mean') * inv_std' + beta, where z' is
  // conv_out rounded (|z' - z| <= u|z|), mean' the mean of all rounded z of the channel
  // (|mean' - mean| <= u * mean|z|) and inv_std' from their variance (relative error about
  // u * E[z^2] / var). Bound: 4x that sum. A flip from a wrong mask (another element's or
  // channel's bit) lands at |pre| of order |gamma|, far outside it.
  struct Flips {
    size_t differ = 0, far = 0;  // bits unlike float64's; of them, beyond rounding of zero
    size_t first_far = 0;
    double first_far_pre = 0, first_far_bound = 0;
  };

  Flips count_flips(const std::vector<float>& mask) const {
    const double u = unit_roundoff(precision_);
    const size_t channels = size_t(g_.k);
    Flips f;
    for (size_t i = 0; i < mask.size(); ++i) {
      if ((mask[i] != 0) == (fwd_.pre[i] > 0)) continue;
      ++f.differ;
      const size_t k = i % channels;
      const double z = fwd_.z[i], mean = fwd_.mean[k], inv_std = fwd_.inv_std[k];
      const double moments = 1 + mean * mean * inv_std * inv_std;  // E[z^2] / var
      const double bound =
          4 * u * std::abs(gamma_[k]) * inv_std * (std::abs(z) + mean_abs_[k] + std::abs(z - mean) * moments) + 1e-6;
      if (std::abs(fwd_.pre[i]) > bound && f.far++ == 0)
        f.first_far = i, f.first_far_pre = fwd_.pre[i], f.first_far_bound = bound;
    }
    return f;
  }

  void expect_flips_only_at_ties(const std::vector<float>& mask) const {
    const Flips f = count_flips(mask);
    EXPECT_EQ(f.far, 0u) << f.far << " mask bits differ from float64's away from zero; the first, bit " << f.first_far
                         << ", at pre-activation " << f.first_far_pre << " (rounding reaches " << f.first_far_bound << ")";
    EXPECT_LE(f.differ, mask.size() / 500 + 2) << f.differ << " of " << mask.size() << " mask bits differ from float64's";
    std::printf("[ mask ] %s: %zu of %zu bits differ from float64's, %zu of them beyond rounding of zero\n",
                ::testing::UnitTest::GetInstance()->current_test_info()->name(), f.differ, mask.size(), f.far);
    // The bound catches a wrong mask: the same bits one channel over differ far from zero.
    std::vector<float> shifted(mask.size());
    for (size_t i = 0; i < mask.size(); ++i) shifted[i] = mask[(i + 1) % mask.size()];
    EXPECT_GT(count_flips(shifted).far, mask.size() / 10) << "a mask shifted by one channel would pass";
  }

  static void expect_below(const std::map<std::string, std::vector<float>>& grads, const std::string& name,
                           const std::vector<double>& ref, double tol) {
    ASSERT_TRUE(grads.count(name)) << name;
    const std::vector<float> ref_f(ref.begin(), ref.end());
    expect_close_to_reference(name + " against float64", grads.at(name), ref_f, tol);
  }

  // dconv with one of the BN backward's two correction terms dropped (keep_xhat: drop the mean
  // of dY*mask; otherwise drop x_hat * dgamma).
  std::vector<double> without_term(const cbr_test::Backward& b, const cbr_test::Forward& f, bool keep_xhat) const {
    const double m = double(g_.rows());
    std::vector<double> dz = b.dz;
    for (size_t i = 0; i < dz.size(); ++i) {
      const size_t k = i % size_t(g_.k);
      const double scale = gamma_[k] * f.inv_std[k] / m;
      const double xhat = (f.z[i] - f.mean[k]) * f.inv_std[k];
      dz[i] += keep_xhat ? scale * b.dbeta[k] : scale * xhat * b.dgamma[k];
    }
    return dz;
  }

  std::vector<double> dx_of(const std::vector<double>& dz) const {
    std::vector<double> dx(x_.size(), 0.0);
    cbr_test::Conv{g_}.for_each_tap([&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dz[yi] * w_[wi]; });
    return dx;
  }

  cbr_test::Geometry g_;
  Precision precision_;
  std::vector<float> w_master_;
  std::vector<double> x_, w_, gamma_, beta_;
  cbr_test::Forward fwd_;
  std::vector<double> mean_abs_;  // per channel: mean |conv_out|, what rounding moves the mean by
};

}  // namespace kiln::testing
