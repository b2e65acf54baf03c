#include "ops/channel/channel_cpu.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Memory-bound copies: a task gets at least this many elements (fewer cost more in waking a thread
// than they save).
constexpr int64_t kParallelElems = 1 << 16;

// Runs body(r0, r1) over the rows in pieces of whole rows holding about kParallelElems elements.
template <class F>
void over_rows(int64_t rows, int64_t channels, F&& body) {
  parallel_blocks(rows, std::max<int64_t>(1, kParallelElems / std::max<int64_t>(channels, 1)), body);
}

template <class T>
void fill_zeros(T* p, int64_t n) {
  std::fill(p, p + n, T(0));
}

}  // namespace

template <class T>
void shuffle_channels(const T* x, T* y, int64_t rows, int64_t channels, int64_t groups) {
  const int64_t per_group = channels / groups;
  over_rows(rows, channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* in = x + r * channels;
      T* out = y + r * channels;
      // Reads run along each group (contiguous); writes step by `groups` within the row's cache lines.
      for (int64_t i = 0; i < groups; ++i)
        for (int64_t j = 0; j < per_group; ++j) out[j * groups + i] = in[i * per_group + j];
    }
  });
}

template <class T>
void slice_channels(const T* x, int64_t in_channels, int64_t start, T* y, int64_t rows, int64_t count) {
  over_rows(rows, count, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(y + r * count, x + r * in_channels + start, size_t(count) * sizeof(T));
  });
}

template <class T>
void join_slice_gradients(const std::vector<SliceGradient<T>>& parts, int64_t start, T* dx, int64_t rows,
                          int64_t channels) {
  over_rows(rows, channels, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* out = dx + r * channels;
      fill_zeros(out, start);
      int64_t at = start;
      for (const SliceGradient<T>& part : parts) {
        std::memcpy(out + at, part.dy + r * part.channels, size_t(part.channels) * sizeof(T));
        at += part.channels;
      }
      fill_zeros(out + at, channels - at);
    }
  });
}

template void shuffle_channels<float>(const float*, float*, int64_t, int64_t, int64_t);
template void shuffle_channels<double>(const double*, double*, int64_t, int64_t, int64_t);
template void slice_channels<float>(const float*, int64_t, int64_t, float*, int64_t, int64_t);
template void slice_channels<double>(const double*, int64_t, int64_t, double*, int64_t, int64_t);
template void join_slice_gradients<float>(const std::vector<SliceGradient<float>>&, int64_t, float*, int64_t, int64_t);
template void join_slice_gradients<double>(const std::vector<SliceGradient<double>>&, int64_t, double*, int64_t,
                                           int64_t);

}  // namespace kiln::cpu
