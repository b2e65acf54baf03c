#pragma once
// The tests' float64 reference of the product and its gradients (mul_test.cpp, mul_gpu_test.cpp),
// written from the definitions with explicit (image, row, channel) loops, independent of the
// kernels' flat indexing; a gate's sums in long double. With each gate sum it keeps the sum of the
// magnitudes of its terms, which the tests' rounding bounds scale with.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/common/rounding_bound_test.h"

namespace kiln::mul_test {

struct Extents {
  int64_t n = 0, hw = 0, c = 0;
  bool gate = false;
  int64_t map() const { return n * hw * c; }
  int64_t b() const { return gate ? n * c : map(); }
};

struct Reference {
  std::vector<double> y, da, db;
  std::vector<double> db_terms;  // per element of db: sum of |dy * a| over what it adds
};

// y = a * b, da = dy * b, db = dy * a (a gate's summed over each image's rows).
inline Reference reference(const Extents& e, const std::vector<double>& a, const std::vector<double>& b,
                           const std::vector<double>& dy) {
  Reference r{std::vector<double>(size_t(e.map())), std::vector<double>(size_t(e.map())),
              std::vector<double>(size_t(e.b())), std::vector<double>(size_t(e.b()))};
  for (int64_t img = 0; img < e.n; ++img)
    for (int64_t k = 0; k < e.c; ++k) {
      long double sum = 0, magnitude = 0;
      for (int64_t row = 0; row < e.hw; ++row) {
        const size_t i = size_t((img * e.hw + row) * e.c + k);
        const size_t j = e.gate ? size_t(img * e.c + k) : i;
        r.y[i] = a[i] * b[j];
        r.da[i] = dy[i] * b[j];
        const long double term = static_cast<long double>(dy[i]) * static_cast<long double>(a[i]);
        if (e.gate) {
          sum += term, magnitude += std::fabs(term);
        } else {
          r.db[i] = dy[i] * a[i];
          r.db_terms[i] = std::fabs(dy[i] * a[i]);
        }
      }
      if (e.gate) r.db[size_t(img * e.c + k)] = double(sum), r.db_terms[size_t(img * e.c + k)] = double(magnitude);
    }
  return r;
}

using testing::Misses;
using testing::outside_bound;

}  // namespace kiln::mul_test
