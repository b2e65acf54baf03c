#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/batchnorm/batchnorm_contract.h"
#include "ops/batchnorm/batchnorm_cpu.h"
#include "runtime/op_call.h"
#include "support/cpu_test_util.h"
#include "support/gradcheck.h"
#include "support/op_bench.h"

namespace {

using namespace kiln;
using namespace kiln::cpu;
using kiln::testing::cast;
using kiln::testing::expect_gradient_matches;
using kiln::testing::GradError;
using kiln::testing::numeric_gradient;
using kiln::testing::rel_err;
using kiln::testing::uniform_vec;
using kiln::testing::Vec;
using kiln::testing::weighted_sum;

struct RefForward {
  Vec y, mean, var, inv_std, running_mean, running_var;
};

// Textbook BatchNorm in double, one channel at a time.
RefForward ref_forward(const Vec& x, const Vec& gamma, const Vec& beta, Vec running_mean,
                       Vec running_var, int64_t M, int64_t C, double eps, double momentum) {
  RefForward r{Vec(M * C), Vec(C), Vec(C), Vec(C), running_mean, running_var};
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t m = 0; m < M; ++m) sum += x[m * C + c];
    double mean = sum / M, sq = 0;
    for (int64_t m = 0; m < M; ++m) sq += (x[m * C + c] - mean) * (x[m * C + c] - mean);
    double var = sq / M;
    r.mean[c] = mean;
    r.var[c] = var;
    r.inv_std[c] = 1 / std::sqrt(var + eps);
    for (int64_t m = 0; m < M; ++m)
      r.y[m * C + c] = (x[m * C + c] - mean) / std::sqrt(var + eps) * gamma[c] + beta[c];
    r.running_mean[c] = (1 - momentum) * running_mean[c] + momentum * mean;
    r.running_var[c] = (1 - momentum) * running_var[c] + momentum * sq / (M - 1);
  }
  return r;
}

struct Problem {
  int64_t M, C;
  Vec x, gamma, beta, running_mean, running_var;
  Problem(int64_t M_, int64_t C_, uint32_t seed) : M(M_), C(C_) {
    std::mt19937 rng(seed);
    x = uniform_vec(rng, M * C, -1.5, 2.5);
    gamma = uniform_vec(rng, C, 0.5, 1.5);
    beta = uniform_vec(rng, C, -0.5, 0.5);
    running_mean = uniform_vec(rng, C, -0.2, 0.2);
    running_var = uniform_vec(rng, C, 0.8, 1.2);
  }
};

template <class T>
void check_forward(const Problem& p, double tol) {
  const double eps = 1e-5, momentum = 0.1;
  auto x = cast<T>(p.x), gamma = cast<T>(p.gamma), beta = cast<T>(p.beta);
  auto rm = cast<T>(p.running_mean), rv = cast<T>(p.running_var);
  std::vector<T> y(p.M * p.C), mean(p.C), inv_std(p.C);
  bn_forward_train<T>(x.data(), gamma.data(), beta.data(), p.M, p.C, eps, momentum, y.data(),
                      mean.data(), inv_std.data(), rm.data(), rv.data());
  RefForward r = ref_forward(p.x, p.gamma, p.beta, p.running_mean, p.running_var, p.M, p.C, eps,
                             momentum);
  EXPECT_LT(rel_err(y, r.y), tol);
  EXPECT_LT(rel_err(mean, r.mean), tol);
  EXPECT_LT(rel_err(inv_std, r.inv_std), tol);
  EXPECT_LT(rel_err(rm, r.running_mean), tol);
  EXPECT_LT(rel_err(rv, r.running_var), tol);
}

TEST(BatchNormCpu, ForwardTrainMatchesReferenceDouble) { check_forward<double>({60, 6, 1}, 1e-12); }
TEST(BatchNormCpu, ForwardTrainMatchesReferenceFloat) { check_forward<float>({60, 6, 2}, 1e-5); }
// Big enough to take the multi-chunk, multi-thread path.
TEST(BatchNormCpu, ForwardTrainMatchesReferenceLarge) { check_forward<double>({4096, 24, 3}, 1e-12); }

TEST(BatchNormCpu, RunningStatsKnownNumbers) {
  // One channel holding 1, 2, 3, 4: mean 2.5, biased var 1.25, unbiased var 5/3.
  std::vector<double> x = {1, 2, 3, 4}, gamma = {1}, beta = {0}, y(4), mean(1), inv_std(1);
  std::vector<double> rm = {0.0}, rv = {1.0};
  bn_forward_train<double>(x.data(), gamma.data(), beta.data(), 4, 1, 0.0, 0.1, y.data(),
                           mean.data(), inv_std.data(), rm.data(), rv.data());
  EXPECT_DOUBLE_EQ(mean[0], 2.5);
  EXPECT_DOUBLE_EQ(inv_std[0], 1 / std::sqrt(1.25));
  EXPECT_DOUBLE_EQ(rm[0], 0.25);                   // 0.9 * 0 + 0.1 * 2.5
  EXPECT_DOUBLE_EQ(rv[0], 0.9 + 0.1 * 5.0 / 3.0);  // unbiased, as PyTorch
  EXPECT_DOUBLE_EQ(y[0], -1.5 / std::sqrt(1.25));
}

TEST(BatchNormCpu, ForwardIsBitwiseDeterministic) {
  Problem p(8192, 16, 4);
  auto run = [&] {
    auto rm = p.running_mean, rv = p.running_var;
    Vec y(p.M * p.C), mean(p.C), inv_std(p.C);
    bn_forward_train<double>(p.x.data(), p.gamma.data(), p.beta.data(), p.M, p.C, 1e-5, 0.1,
                             y.data(), mean.data(), inv_std.data(), rm.data(), rv.data());
    y.insert(y.end(), rv.begin(), rv.end());
    return y;
  };
  EXPECT_EQ(run(), run());
}

TEST(BatchNormCpu, InferenceMatchesReference) {
  Problem p(30, 5, 5);
  Vec y(p.M * p.C);
  const double eps = 1e-3;
  bn_inference<double>(p.x.data(), p.gamma.data(), p.beta.data(), p.running_mean.data(),
                       p.running_var.data(), p.M, p.C, eps, y.data());
  Vec ref(p.M * p.C);
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t c = 0; c < p.C; ++c)
      ref[m * p.C + c] = (p.x[m * p.C + c] - p.running_mean[c]) /
                             std::sqrt(p.running_var[c] + eps) * p.gamma[c] +
                         p.beta[c];
  EXPECT_LT(rel_err(y, ref), 1e-13);
}

// Loss = sum(y * R) with y from the training-mode forward; central differences in double.
TEST(BatchNormCpu, BackwardMatchesFiniteDifferences) {
  Problem p(12, 3, 6);
  std::mt19937 rng(7);
  Vec R = uniform_vec(rng, p.M * p.C, -1, 1);
  auto loss = [&](const Vec& x, const Vec& gamma, const Vec& beta) {
    Vec y(p.M * p.C), mean(p.C), inv_std(p.C), rm(p.C), rv(p.C, 1.0);
    bn_forward_train<double>(x.data(), gamma.data(), beta.data(), p.M, p.C, 1e-5, 0.1, y.data(),
                             mean.data(), inv_std.data(), rm.data(), rv.data());
    return weighted_sum(y, R);
  };
  Vec y(p.M * p.C), mean(p.C), inv_std(p.C), rm(p.C), rv(p.C, 1.0);
  bn_forward_train<double>(p.x.data(), p.gamma.data(), p.beta.data(), p.M, p.C, 1e-5, 0.1,
                           y.data(), mean.data(), inv_std.data(), rm.data(), rv.data());
  Vec dx(p.M * p.C), dgamma(p.C), dbeta(p.C);
  bn_backward<double>(R.data(), p.x.data(), p.gamma.data(), mean.data(), inv_std.data(), p.M, p.C,
                      dx.data(), dgamma.data(), dbeta.data());
  const double h = 1e-6, tol = 1e-6;
  expect_gradient_matches(dx, numeric_gradient([&](const Vec& v) { return loss(v, p.gamma, p.beta); }, p.x, h),
                          tol, GradError::Relative, "dx");
  expect_gradient_matches(dgamma, numeric_gradient([&](const Vec& v) { return loss(p.x, v, p.beta); }, p.gamma, h),
                          tol, GradError::Relative, "dgamma");
  expect_gradient_matches(dbeta, numeric_gradient([&](const Vec& v) { return loss(p.x, p.gamma, v); }, p.beta, h),
                          tol, GradError::Relative, "dbeta");
}

TEST(BatchNormCpu, BackwardFloatMatchesDouble) {
  Problem p(50, 7, 8);
  std::mt19937 rng(9);
  Vec dy = uniform_vec(rng, p.M * p.C, -1, 1);
  RefForward r = ref_forward(p.x, p.gamma, p.beta, p.running_mean, p.running_var, p.M, p.C, 1e-5,
                             0.1);
  Vec dx(p.M * p.C), dgamma(p.C), dbeta(p.C);
  bn_backward<double>(dy.data(), p.x.data(), p.gamma.data(), r.mean.data(), r.inv_std.data(), p.M,
                      p.C, dx.data(), dgamma.data(), dbeta.data());
  auto xf = cast<float>(p.x), gf = cast<float>(p.gamma), dyf = cast<float>(dy);
  auto mf = cast<float>(r.mean), sf = cast<float>(r.inv_std);
  std::vector<float> dxf(p.M * p.C), dgf(p.C), dbf(p.C);
  bn_backward<float>(dyf.data(), xf.data(), gf.data(), mf.data(), sf.data(), p.M, p.C, dxf.data(),
                     dgf.data(), dbf.data());
  EXPECT_LT(rel_err(dxf, dx), 1e-5);
  EXPECT_LT(rel_err(dgf, dgamma), 1e-5);
  EXPECT_LT(rel_err(dbf, dbeta), 1e-5);
}

TEST(BatchNormCpu, FinalizeFromSumsMatchesMoments) {
  Problem p(40, 4, 10);
  Vec sum(p.C), sqsum(p.C), mean(p.C), var(p.C);
  bn_channel_sums<double>(p.x.data(), p.M, p.C, sum.data(), sqsum.data());
  bn_channel_moments<double>(p.x.data(), p.M, p.C, mean.data(), var.data());
  Vec rm1 = p.running_mean, rv1 = p.running_var, rm2 = rm1, rv2 = rv1;
  Vec sm1(p.C), si1(p.C), sc1(p.C), sh1(p.C), sm2(p.C), si2(p.C), sc2(p.C), sh2(p.C);
  bn_finalize<double>(sum.data(), sqsum.data(), p.M, p.gamma.data(), p.beta.data(), 1e-5, 0.1,
                      rm1.data(), rv1.data(), sm1.data(), si1.data(), sc1.data(), sh1.data(), p.C);
  bn_finalize_moments<double>(mean.data(), var.data(), p.M, p.gamma.data(), p.beta.data(), 1e-5,
                              0.1, rm2.data(), rv2.data(), sm2.data(), si2.data(), sc2.data(),
                              sh2.data(), p.C);
  EXPECT_LT(rel_err(sc1, sc2), 1e-12);
  EXPECT_LT(rel_err(sh1, sh2), 1e-12);
  EXPECT_LT(rel_err(rv1, rv2), 1e-12);
  EXPECT_LT(rel_err(si1, si2), 1e-12);
}

// The CBR pieces: apply+ReLU with a packed mask, then backward through the mask.
TEST(BatchNormCpu, ReluBitmaskPiecesMatchExplicitMask) {
  Problem p(13, 5, 11);  // 65 elements: the mask's last byte is partial
  std::mt19937 rng(12);
  Vec scale = uniform_vec(rng, p.C, 0.5, 1.5), shift = uniform_vec(rng, p.C, -0.5, 0.5);
  Vec y(p.M * p.C);
  std::vector<uint8_t> bits(bitmask_bytes(p.M * p.C), 0xff);
  bn_apply_relu<double>(p.x.data(), scale.data(), shift.data(), p.M, p.C, y.data(), bits.data());
  Vec dy = uniform_vec(rng, p.M * p.C, -1, 1), dy_masked(p.M * p.C);
  for (int64_t i = 0; i < p.M * p.C; ++i) {
    double v = p.x[i] * scale[i % p.C] + shift[i % p.C];
    ASSERT_EQ(y[i], v > 0 ? v : 0.0) << i;
    ASSERT_EQ(bitmask_get(bits.data(), i), v > 0) << i;
    dy_masked[i] = v > 0 ? dy[i] : 0.0;
  }
  EXPECT_EQ(bits.back() >> 1, 0);  // padding bits stay clear
  RefForward r = ref_forward(p.x, p.gamma, p.beta, p.running_mean, p.running_var, p.M, p.C, 1e-5,
                             0.1);
  Vec s1(p.C), t1(p.C), s2(p.C), t2(p.C), dx1(p.M * p.C), dx2(p.M * p.C);
  bn_backward_reduce<double>(dy.data(), bits.data(), p.x.data(), r.mean.data(), r.inv_std.data(),
                             p.M, p.C, s1.data(), t1.data());
  bn_backward_reduce<double>(dy_masked.data(), nullptr, p.x.data(), r.mean.data(),
                             r.inv_std.data(), p.M, p.C, s2.data(), t2.data());
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(t1, t2);
  bn_backward_apply<double>(dy.data(), bits.data(), p.x.data(), p.gamma.data(), r.mean.data(),
                            r.inv_std.data(), s1.data(), t1.data(), p.M, p.C, dx1.data());
  bn_backward_apply<double>(dy_masked.data(), nullptr, p.x.data(), p.gamma.data(), r.mean.data(),
                            r.inv_std.data(), s2.data(), t2.data(), p.M, p.C, dx2.data());
  EXPECT_EQ(dx1, dx2);
}

// --- Op wrappers through the registry ---

// The op tests' bench around layer 1, "features.bn1".
kiln::testing::OpBench bench() { return kiln::testing::OpBench(1, "features.bn1"); }

// BN_FWD_TRAIN of layer 1 from its contract; the tests bind its tensors in the OpCall themselves,
// so the ids only number them.
Op fwd_train_op(float eps = 1e-5f, float momentum = 0.1f) {
  BnForwardTrain<TensorId> c;
  c.x = 0, c.gamma = 1, c.beta = 2;
  c.y = 3, c.saved_mean = 4, c.saved_inv_std = 5, c.running_mean = 6, c.running_var = 7;
  c.eps = eps, c.momentum = momentum;
  return make_op(c, 1);
}

TEST(BatchNormOp, ForwardTrainThroughRegistry) {
  Problem p(2 * 3 * 4, 5, 13);
  kiln::testing::OpBench f = bench();
  Vec y(p.M * p.C), mean(p.C), inv_std(p.C), rm = p.running_mean, rv = p.running_var;
  const Op op = fwd_train_op(1e-3f, 0.25f);
  Shape xs = {2, 3, 4, 5}, cs = {5};
  OpCall call{op,
              f.program,
              {f.arg(xs, p.x.data()), f.arg(cs, p.gamma.data()), f.arg(cs, p.beta.data())},
              {f.arg(xs, y.data()), f.arg(cs, mean.data()), f.arg(cs, inv_std.data()),
               f.arg(cs, rm.data()), f.arg(cs, rv.data())},
              f.scalars};
  find_op(Device::CPU, OpKind::BN_FWD_TRAIN)(call);
  RefForward r = ref_forward(p.x, p.gamma, p.beta, p.running_mean, p.running_var, p.M, p.C,
                             double(1e-3f), double(0.25f));
  EXPECT_LT(rel_err(y, r.y), 1e-12);
  EXPECT_LT(rel_err(rv, r.running_var), 1e-12);
}

TEST(BatchNormOp, WrongGammaSizeNamesLayer) {
  kiln::testing::OpBench f = bench();
  Vec x(24), gamma(4), beta(5), y(24), s(5), rm(5), rv(5);
  const Op op = fwd_train_op();
  Shape cs = {5};
  OpCall call{op,
              f.program,
              {f.arg({4, 6}, x.data()), f.arg({4}, gamma.data()), f.arg(cs, beta.data())},
              {f.arg({4, 6}, y.data()), f.arg(cs, s.data()), f.arg(cs, s.data()),
               f.arg(cs, rm.data()), f.arg(cs, rv.data())},
              f.scalars};
  kiln::testing::expect_error([&] { find_op(Device::CPU, OpKind::BN_FWD_TRAIN)(call); }, {"features.bn1", "gamma"});
}

TEST(BatchNormOp, SingleValuePerChannelIsRejected) {
  kiln::testing::OpBench f = bench();
  Vec x(3), gamma(3), beta(3), y(3), s(3), rm(3), rv(3);
  const Op op = fwd_train_op();
  Shape cs = {3};
  OpCall call{op,
              f.program,
              {f.arg({1, 3}, x.data()), f.arg(cs, gamma.data()), f.arg(cs, beta.data())},
              {f.arg({1, 3}, y.data()), f.arg(cs, s.data()), f.arg(cs, s.data()),
               f.arg(cs, rm.data()), f.arg(cs, rv.data())},
              f.scalars};
  EXPECT_THROW(find_op(Device::CPU, OpKind::BN_FWD_TRAIN)(call), Error);
}

}  // namespace
