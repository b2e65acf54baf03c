#pragma once
// The tests' float64 reference of the per-channel scale and its gradients (layer_scale_test.cpp,
// layer_scale_gpu_test.cpp), written from the definitions with explicit (row, channel) loops; the
// scale gradient's sums in long double, each with the sum of its terms' magnitudes, which the
// rounding bounds scale with. Also the correctly rounded value of a double in fp32, fp16 or bf16,
// which the GPU's products are compared with bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/common/rounding_bound_test.h"

namespace kiln::layer_scale_test {

struct Extents {
  int64_t rows = 0, c = 0;
  int64_t elements() const { return rows * c; }
};

struct Reference {
  std::vector<double> y, dx, dgamma;
  std::vector<double> dgamma_terms;  // per channel: sum over rows of |dy * x|
};

// y = x * gamma, dx = dy * gamma (in double: exact for fp32 and narrower factors), dgamma[c] =
// sum over rows of dy * x.
inline Reference reference(const Extents& e, const std::vector<double>& x, const std::vector<double>& gamma,
                           const std::vector<double>& dy) {
  Reference r{std::vector<double>(size_t(e.elements())), std::vector<double>(size_t(e.elements())),
              std::vector<double>(size_t(e.c)), std::vector<double>(size_t(e.c))};
  for (int64_t k = 0; k < e.c; ++k) {
    long double sum = 0, magnitude = 0;
    for (int64_t row = 0; row < e.rows; ++row) {
      const size_t i = size_t(row * e.c + k);
      r.y[i] = x[i] * gamma[size_t(k)];
      r.dx[i] = dy[i] * gamma[size_t(k)];
      const long double term = static_cast<long double>(dy[i]) * static_cast<long double>(x[i]);
      sum += term, magnitude += std::fabs(term);
    }
    r.dgamma[size_t(k)] = double(sum), r.dgamma_terms[size_t(k)] = double(magnitude);
  }
  return r;
}

// `v` rounded to nearest (ties to even) in a binary format of `bits` significant bits whose
// smallest normal is 2^emin (below it, subnormals at that binade's spacing): fp32 (24, -126), fp16
// (11, -14), bf16 (8, -126). Finite values inside the format's range only (the tests' are).
inline double correctly_rounded(double v, int bits, int emin) {
  if (v == 0 || !std::isfinite(v)) return v;
  int exponent = 0;
  std::frexp(v, &exponent);  // |v| in [2^(exponent - 1), 2^exponent)
  const double spacing = std::ldexp(1.0, std::max(exponent - 1, emin) - (bits - 1));
  return std::nearbyint(v / spacing) * spacing;  // the division by a power of two is exact
}

using testing::Misses;
using testing::outside_bound;

}  // namespace kiln::layer_scale_test
