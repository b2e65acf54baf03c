#pragma once
// The kernel tests' rounding bound: an element is right when it lies within its result's one
// rounding and the roundoff of the sum it came from, as the mul and layer-scale families check
// their kernels against float64 loops.
#include <cmath>
#include <cstdint>
#include <vector>

namespace kiln::testing {

// The elements of `got` farther from `want` than `store_unit` * |want| (the result's one rounding)
// plus `sum_unit` * `terms` * `addends` (a sum of that many terms accumulated with that unit
// roundoff), plus `store_floor` (half the spacing of the stored type's subnormals, which a result
// below its smallest normal is rounded to: a relative bound misses them): how many, and the first
// one's index (-1 when none).
struct Misses {
  int64_t count = 0, first = -1;
};
template <class G>
Misses outside_bound(const G& got, const std::vector<double>& want, const std::vector<double>& terms,
                     double store_unit, double sum_unit, int64_t addends, double store_floor = 0) {
  Misses m;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = store_floor + store_unit * std::fabs(want[i]) +
                         sum_unit * double(addends) * terms[i] * (1 + store_unit);
    const double g = static_cast<double>(got[i]);
    if (!(std::fabs(g - want[i]) <= bound) && m.count++ == 0) m.first = int64_t(i);
  }
  return m;
}

}  // namespace kiln::testing
