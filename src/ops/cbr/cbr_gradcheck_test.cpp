// CBR_BWD (double) against central finite differences of CBR_FWD, loss = sum(y * R).
#include <gtest/gtest.h>

#include "ops/cbr/cbr_cpu.h"
#include "support/cbr_test_reference.h"
#include "support/gradcheck.h"

namespace kiln::cbr_test {
namespace {

using testing::expect_gradient_matches;
using testing::GradError;

constexpr double kBnEps = 1e-5, kMomentum = 0.1, kStep = 1e-6;

struct Params {
  std::vector<double> x, w, gamma, beta;
};

// Forward loss with fresh running statistics (they do not feed y).
double loss(const Geometry& g, const Params& p, const std::vector<double>& r) {
  std::vector<double> conv_out(g.y_numel()), y(g.y_numel()), mean(g.k), inv_std(g.k),
      running_mean(g.k, 0.0), running_var(g.k, 1.0);
  std::vector<uint8_t> bits(cpu::cbr_mask_bytes(g.y_numel()));
  cpu::CbrForwardTensors<double> t;
  t.x = p.x.data(), t.w = p.w.data(), t.gamma = p.gamma.data(), t.beta = p.beta.data();
  t.conv_out = conv_out.data(), t.y = y.data(), t.saved_mean = mean.data();
  t.saved_inv_std = inv_std.data(), t.bitmask = bits.data();
  t.running_mean = running_mean.data(), t.running_var = running_var.data();
  cpu::cbr_forward<double>(g.conv(), t, kBnEps, kMomentum);
  return testing::weighted_sum(y, r);
}

// Central differences of the loss w.r.t. every element of one parameter tensor.
std::vector<double> numeric_param_gradient(const Geometry& g, const Params& p, std::vector<double> Params::*which,
                                           const std::vector<double>& r) {
  return testing::numeric_gradient(
      [&](const std::vector<double>& v) {
        Params moved = p;
        moved.*which = v;
        return loss(g, moved, r);
      },
      p.*which, kStep);
}

class CbrGradCheck : public ::testing::TestWithParam<Geometry> {};

TEST_P(CbrGradCheck, BackwardMatchesFiniteDifferences) {
  const Geometry g = GetParam();
  std::mt19937 rng(2024);
  Params p{uniform_vec(rng, g.x_numel(), -1, 1), uniform_vec(rng, g.w_numel(), -0.5, 0.5),
           uniform_vec(rng, g.k, 0.5, 1.5), uniform_vec(rng, g.k, -0.5, 0.5)};
  const std::vector<double> r = uniform_vec(rng, g.y_numel(), -1, 1);

  // Analytic gradients: forward, then backward with dy = R.
  std::vector<double> conv_out(g.y_numel()), y(g.y_numel()), mean(g.k), inv_std(g.k),
      running_mean(g.k, 0.0), running_var(g.k, 1.0);
  std::vector<uint8_t> bits(cpu::cbr_mask_bytes(g.y_numel()));
  cpu::CbrForwardTensors<double> f;
  f.x = p.x.data(), f.w = p.w.data(), f.gamma = p.gamma.data(), f.beta = p.beta.data();
  f.conv_out = conv_out.data(), f.y = y.data(), f.saved_mean = mean.data();
  f.saved_inv_std = inv_std.data(), f.bitmask = bits.data();
  f.running_mean = running_mean.data(), f.running_var = running_var.data();
  cpu::cbr_forward<double>(g.conv(), f, kBnEps, kMomentum);

  std::vector<double> dx(g.x_numel()), dw(g.w_numel()), dgamma(g.k), dbeta(g.k), dconv(g.y_numel());
  cpu::CbrBackwardTensors<double> b;
  b.dy = r.data(), b.bitmask = bits.data(), b.conv_out = conv_out.data();
  b.x = p.x.data(), b.w = p.w.data(), b.gamma = p.gamma.data();
  b.saved_mean = mean.data(), b.saved_inv_std = inv_std.data();
  b.dx = dx.data(), b.dw = dw.data(), b.dgamma = dgamma.data(), b.dbeta = dbeta.data();
  b.dconv = dconv.data();
  cpu::cbr_backward<double>(g.conv(), b);

  expect_gradient_matches(dx, numeric_param_gradient(g, p, &Params::x, r), 1e-6, GradError::Relative, "dx");
  expect_gradient_matches(dw, numeric_param_gradient(g, p, &Params::w, r), 1e-6, GradError::Relative, "dw");
  expect_gradient_matches(dgamma, numeric_param_gradient(g, p, &Params::gamma, r), 1e-6, GradError::Relative, "dgamma");
  expect_gradient_matches(dbeta, numeric_param_gradient(g, p, &Params::beta, r), 1e-6, GradError::Relative, "dbeta");
}

// Small shapes: every element is perturbed twice, each a full forward.
INSTANTIATE_TEST_SUITE_P(Geometries, CbrGradCheck,
                         ::testing::Values(Geometry{2, 4, 4, 2, 3, 3, 1, 1},
                                           Geometry{2, 5, 3, 2, 3, 3, 2, 1},
                                           Geometry{3, 3, 3, 3, 5, 1, 1, 0},
                                           Geometry{2, 5, 5, 2, 3, 1, 2, 0}));

}  // namespace
}  // namespace kiln::cbr_test
