#include "ops/loss_scale/loss_scale_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace kiln::cpu {

namespace {
// Elements per task of the check over the gradient region.
constexpr int64_t kTaskElems = 1 << 16;
}  // namespace

template <class T>
bool any_nonfinite(int64_t n, const T* x) {
  // One flag per piece, OR-ed after: the answer does not depend on which thread ran what. No early
  // exit inside a piece: the usual answer is "none", and the branch-free loop vectorizes.
  std::vector<uint8_t> found(size_t(block_count(n, kTaskElems)), 0);
  parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
    bool bad = false;
    for (int64_t i = i0; i < i1; ++i) bad |= !std::isfinite(x[i]);
    found[size_t(i0 / kTaskElems)] = bad;
  });
  return std::any_of(found.begin(), found.end(), [](uint8_t f) { return f != 0; });
}

template bool any_nonfinite<float>(int64_t, const float*);
template bool any_nonfinite<double>(int64_t, const double*);

}  // namespace kiln::cpu
