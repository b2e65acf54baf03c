#include "ops/pool/adaptive_pool_cpu.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"
#include "kiln/error.h"

namespace kiln::cpu {
namespace {
// About this many additions per task: below it a thread costs more than it saves.
constexpr int64_t kParallelWork = 1 << 15;
int64_t items_per_task(int64_t work_per_item) {
  return std::max<int64_t>(1, kParallelWork / std::max<int64_t>(work_per_item, 1));
}
}  // namespace

AdaptivePoolGeom AdaptivePoolGeom::make(const Shape& x, const Shape& y, const std::string& where) {
  if (x.size() != 4 || y.size() != 4)
    fail("{}: adaptive average pooling maps a 4-d NHWC feature map to another, got {} -> {}; recompile the program",
         where, shape_str(x), shape_str(y));
  if (x[0] != y[0] || x[3] != y[3])
    fail("{}: input {} and output {} differ in batch or channels; recompile the program", where, shape_str(x),
         shape_str(y));
  if (x[1] < 1 || x[2] < 1 || y[1] < 1 || y[2] < 1)
    fail("{}: adaptive average pooling needs positive sizes, got {} -> {}", where, shape_str(x), shape_str(y));
  return {x[0], x[1], x[2], x[3], y[1], y[2]};
}

template <class T>
void adaptive_avgpool_forward(const AdaptivePoolGeom& g, const T* x, T* y) {
  const int64_t C = g.c;
  // The largest window, for the work estimate.
  const int64_t window = (g.h / g.ho + 2) * (g.w / g.wo + 2);
  // A task takes a run of output rows; row r is row r % ho of image r / ho.
  parallel_blocks(g.n * g.ho, items_per_task(g.wo * C * window), [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(C);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.ho, oh = r % g.ho;
      const int64_t ih_lo = adaptive_start(oh, g.h, g.ho), ih_hi = adaptive_end(oh, g.h, g.ho);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const int64_t iw_lo = adaptive_start(ow, g.w, g.wo), iw_hi = adaptive_end(ow, g.w, g.wo);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t ih = ih_lo; ih < ih_hi; ++ih)
          for (int64_t iw = iw_lo; iw < iw_hi; ++iw) {
            const T* xr = x + ((n * g.h + ih) * g.w + iw) * C;
            for (int64_t c = 0; c < C; ++c) acc[c] += xr[c];
          }
        const double cells = static_cast<double>((ih_hi - ih_lo) * (iw_hi - iw_lo));
        T* yr = y + ((n * g.ho + oh) * g.wo + ow) * C;
        for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>(acc[c] / cells);
      }
    }
  });
}

template <class T>
void adaptive_avgpool_backward(const AdaptivePoolGeom& g, const T* dy, T* dx) {
  const int64_t C = g.c;
  const int64_t covering = (g.ho / g.h + 2) * (g.wo / g.w + 2);
  // A task takes a run of input rows; row r is row r % h of image r / h. The outputs whose ranges
  // hold input cell i are [adaptive_start(i, out, in), adaptive_end(i, out, in)): the ranges'
  // bounds with the roles of the sizes swapped.
  parallel_blocks(g.n * g.h, items_per_task(g.w * C * covering), [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(C);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.h, ih = r % g.h;
      const int64_t oh_lo = adaptive_start(ih, g.ho, g.h), oh_hi = adaptive_end(ih, g.ho, g.h);
      for (int64_t iw = 0; iw < g.w; ++iw) {
        const int64_t ow_lo = adaptive_start(iw, g.wo, g.w), ow_hi = adaptive_end(iw, g.wo, g.w);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh)
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
            const T* dyr = dy + ((n * g.ho + oh) * g.wo + ow) * C;
            const double cells = static_cast<double>(g.cells(oh, ow));
            for (int64_t c = 0; c < C; ++c) acc[c] += dyr[c] / cells;
          }
        T* dxr = dx + ((n * g.h + ih) * g.w + iw) * C;
        for (int64_t c = 0; c < C; ++c) dxr[c] = static_cast<T>(acc[c]);
      }
    }
  });
}

template void adaptive_avgpool_forward<float>(const AdaptivePoolGeom&, const float*, float*);
template void adaptive_avgpool_forward<double>(const AdaptivePoolGeom&, const double*, double*);
template void adaptive_avgpool_backward<float>(const AdaptivePoolGeom&, const float*, float*);
template void adaptive_avgpool_backward<double>(const AdaptivePoolGeom&, const double*, double*);

}  // namespace kiln::cpu
