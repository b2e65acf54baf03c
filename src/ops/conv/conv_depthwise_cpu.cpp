// Depthwise convolutions as direct loops (conv_depthwise_cpu.h). Output channel k reads input
// channel k / m, where m = K / C is the depth multiplier; the filters (K, R, S, 1) are first laid
// out tap-major (R, S, K), so that a tap's weights line up with a pixel's channels and the inner
// loops run over contiguous channels.
#include "ops/conv/conv_depthwise_cpu.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Multiply-adds per task: fewer cost more in waking a thread than they save.
constexpr int64_t kTaskWork = int64_t{1} << 16;
// Output channels per weight-gradient task, and the most ranges of images it cuts the batch into.
constexpr int64_t kWgradChannels = 64;
constexpr int64_t kWgradParts = 8;

template <class T>
std::vector<T> taps_major(const ConvGeom& g, const T* w) {
  const int64_t taps = g.r * g.s;
  std::vector<T> t(size_t(taps * g.k));
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t tap = 0; tap < taps; ++tap) t[size_t(tap * g.k + k)] = w[k * taps + tap];
  return t;
}

// Rows (of output or input pixels) per task, for work `per_row` multiply-adds each.
int64_t rows_per_task(int64_t per_row) { return std::max<int64_t>(1, kTaskWork / std::max<int64_t>(per_row, 1)); }

// The inner loops, over contiguous channels (their pointers never alias, so they vectorize).
// out[k] += a[k / m] * b[k] over k in [0, K): one tap of a forward pass.
template <class T>
void tap_fwd(int64_t k_count, int64_t m, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out) {
  if (m == 1) {
    for (int64_t k = 0; k < k_count; ++k) out[k] += a[k] * b[k];
    return;
  }
  for (int64_t c = 0; c < k_count / m; ++c)
    for (int64_t j = 0; j < m; ++j) out[c * m + j] += a[c] * b[c * m + j];
}

// out[c] += sum over j < m of d[c * m + j] * b[c * m + j], c in [0, C): one tap of a data gradient.
template <class T>
void tap_dgrad(int64_t c_count, int64_t m, const T* __restrict__ d, const T* __restrict__ b, T* __restrict__ out) {
  if (m == 1) {
    for (int64_t c = 0; c < c_count; ++c) out[c] += d[c] * b[c];
    return;
  }
  for (int64_t c = 0; c < c_count; ++c)
    for (int64_t j = 0; j < m; ++j) out[c] += d[c * m + j] * b[c * m + j];
}

// acc[i] += d[i] * x[(k0 + i) / m] in float64, i in [0, len): one tap of a weight gradient for the
// output channels [k0, k0 + len).
template <class T>
void tap_wgrad(int64_t len, int64_t k0, int64_t m, const T* __restrict__ d, const T* __restrict__ x,
               double* __restrict__ acc) {
  if (m == 1) {
    for (int64_t i = 0; i < len; ++i) acc[i] += double(d[i]) * double(x[k0 + i]);
    return;
  }
  for (int64_t i = 0, c = k0 / m, j = k0 % m; i < len; ++i) {
    acc[i] += double(d[i]) * double(x[c]);
    if (++j == m) j = 0, ++c;
  }
}

}  // namespace

template <class T>
void depthwise_fwd(const ConvGeom& g, const T* x, const T* w, const T* bias, T* y) {
  const ConvWindow& win = g.win;
  const std::vector<T> taps = taps_major(g, w);
  const int64_t m = g.kg;
  parallel_blocks(g.n * g.ho, rows_per_task(g.wo * g.k * g.r * g.s), [&](int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t n = row / g.ho, oh = row % g.ho;
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        T* out = y + (row * g.wo + ow) * g.k;
        if (bias) std::copy(bias, bias + g.k, out);
        else std::fill(out, out + g.k, T(0));
        for (int64_t r = 0; r < g.r; ++r) {
          const int64_t ih = oh * win.stride_h - win.pad_top + r * win.dilation_h;
          if (ih < 0 || ih >= g.h) continue;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t iw = ow * win.stride_w - win.pad_left + s * win.dilation_w;
            if (iw < 0 || iw >= g.w) continue;
            tap_fwd(g.k, m, x + ((n * g.h + ih) * g.w + iw) * g.c, taps.data() + (r * g.s + s) * g.k, out);
          }
        }
      }
    }
  });
}

// Gathers each input pixel's gradient from the outputs whose windows read it: one task per block of
// input rows, no two writing the same element.
template <class T>
void depthwise_dgrad(const ConvGeom& g, const T* dy, const T* w, T* dx) {
  const ConvWindow& win = g.win;
  const std::vector<T> taps = taps_major(g, w);
  const int64_t m = g.kg;
  parallel_blocks(g.n * g.h, rows_per_task(g.w * g.k * g.r * g.s), [&](int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t n = row / g.h, ih = row % g.h;
      for (int64_t iw = 0; iw < g.w; ++iw) {
        T* out = dx + (row * g.w + iw) * g.c;
        std::fill(out, out + g.c, T(0));
        for (int64_t r = 0; r < g.r; ++r) {
          // ih = oh * stride - pad + r * dilation, solved for oh.
          const int64_t th = ih + win.pad_top - r * win.dilation_h;
          if (th < 0 || th % win.stride_h != 0 || th / win.stride_h >= g.ho) continue;
          const int64_t oh = th / win.stride_h;
          for (int64_t s = 0; s < g.s; ++s) {
            const int64_t tw = iw + win.pad_left - s * win.dilation_w;
            if (tw < 0 || tw % win.stride_w != 0 || tw / win.stride_w >= g.wo) continue;
            const int64_t ow = tw / win.stride_w;
            tap_dgrad(g.c, m, dy + ((n * g.ho + oh) * g.wo + ow) * g.k, taps.data() + (r * g.s + s) * g.k, out);
          }
        }
      }
    }
  });
}

// The batch is cut into at most kWgradParts ranges of images (a function of the batch alone) and
// the channels into blocks; one task sums the products of every tap for one block over one range,
// in float64, reading each output gradient once, and the ranges' sums are added in range order.
template <class T>
void depthwise_wgrad(const ConvGeom& g, const T* dy, const T* x, T* dw) {
  const ConvWindow& win = g.win;
  const int64_t m = g.kg, taps = g.r * g.s, blocks = block_count(g.k, kWgradChannels);
  const int64_t parts = std::min(g.n, kWgradParts);
  std::vector<double> partial(size_t(parts * taps * g.k), 0.0);  // per range: (tap, k)
  parallel_for(parts * blocks, [&](int64_t task) {
    const int64_t part = task / blocks, k0 = (task % blocks) * kWgradChannels;
    const int64_t len = std::min(g.k, k0 + kWgradChannels) - k0;
    double* acc = partial.data() + part * taps * g.k + k0;
    for (int64_t n = g.n * part / parts; n < g.n * (part + 1) / parts; ++n)
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          const T* d = dy + ((n * g.ho + oh) * g.wo + ow) * g.k + k0;
          for (int64_t r = 0; r < g.r; ++r) {
            const int64_t ih = oh * win.stride_h - win.pad_top + r * win.dilation_h;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t s = 0; s < g.s; ++s) {
              const int64_t iw = ow * win.stride_w - win.pad_left + s * win.dilation_w;
              if (iw < 0 || iw >= g.w) continue;
              const T* xp = x + ((n * g.h + ih) * g.w + iw) * g.c;
              tap_wgrad(len, k0, m, d, xp, acc + (r * g.s + s) * g.k);
            }
          }
        }
  });
  parallel_blocks(g.k, kWgradChannels, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t tap = 0; tap < taps; ++tap) {
        double sum = 0;
        for (int64_t part = 0; part < parts; ++part) sum += partial[size_t((part * taps + tap) * g.k + k)];
        dw[k * taps + tap] = T(sum);
      }
  });
}

#define KILN_INSTANTIATE_DEPTHWISE(T)                                               \
  template void depthwise_fwd<T>(const ConvGeom&, const T*, const T*, const T*, T*); \
  template void depthwise_dgrad<T>(const ConvGeom&, const T*, const T*, T*);         \
  template void depthwise_wgrad<T>(const ConvGeom&, const T*, const T*, T*);
KILN_INSTANTIATE_DEPTHWISE(float)
KILN_INSTANTIATE_DEPTHWISE(double)
#undef KILN_INSTANTIATE_DEPTHWISE

}  // namespace kiln::cpu
