#include "ops/pool/pool_cpu.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/mask_bits.h"
#include "core/parallel.h"
#include "kiln/error.h"

namespace kiln::cpu {
namespace {
// Below this many multiply-adds a thread costs more than it saves: each task gets about this
// much work.
constexpr int64_t kParallelWork = 1 << 15;
// Channel block of one maxpool-backward task: tasks own disjoint channels, so the scatter
// needs no atomics and keeps its order.
constexpr int64_t kChannelBlock = 64;

// Items per task when each item costs `work_per_item` multiply-adds.
int64_t items_per_task(int64_t work_per_item) {
  return std::max<int64_t>(1, kParallelWork / std::max<int64_t>(work_per_item, 1));
}
}  // namespace

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil_mode) {
  const int64_t span = in + 2 * pad - kernel;  // where the last window may start, counted from -pad
  if (!ceil_mode) return span < 0 ? 0 : span / stride + 1;
  // ceil(span / stride) for a span of either sign (C++ division truncates toward zero).
  int64_t out = (span >= 0 ? (span + stride - 1) / stride : -(-span / stride)) + 1;
  if (out >= 1 && (out - 1) * stride >= in + pad) --out;  // it would start past the input and its padding
  return out;
}

PoolGeom PoolGeom::make(const Shape& x, int kernel, int stride, int pad, const char* kind,
                        const std::string& layer, bool ceil_mode) {
  if (x.size() != 4)
    fail("{} '{}': input shape {} is not a 4-d NHWC feature map; pool before flattening",
         kind, layer, shape_str(x));
  if (kernel < 1 || stride < 1 || pad < 0)
    fail("{} '{}': kernel {}, stride {}, padding {} are invalid; need kernel >= 1, stride >= 1, "
         "padding >= 0",
         kind, layer, kernel, stride, pad);
  if (2 * pad > kernel)
    fail("{} '{}': padding {} is more than half the kernel {}; use padding <= {} (as PyTorch)",
         kind, layer, pad, kernel, kernel / 2);
  PoolGeom g{x[0], x[1], x[2], x[3], kernel, stride, pad, 0, 0};
  g.ho = pool_output_size(g.h, kernel, stride, pad, ceil_mode);
  g.wo = pool_output_size(g.w, kernel, stride, pad, ceil_mode);
  if (g.ho < 1 || g.wo < 1)
    fail("{} '{}': kernel {} does not fit the {}x{} input with padding {}{}; use a smaller kernel "
         "or a larger input",
         kind, layer, kernel, g.h, g.w, pad, ceil_mode ? " and stride " + std::to_string(stride) + " in ceil mode" : "");
  return g;
}

// One window element's step of a running max over n channels: where x beats best, best takes x
// and arg (nullable) takes idx. NaN wins (and then stays), as in PyTorch, so it is not silently
// hidden. No short-circuit tests, and n by value (a byte store could otherwise alias a bound read
// through a reference): the loops vectorize.
template <class T>
void max_step(const T* x, T* best, uint8_t* arg, uint8_t idx, int64_t n) {
  auto takes = [](T v, T b) { return (v > b) | ((v != v) & (b == b)); };
  if (arg)
    for (int64_t c = 0; c < n; ++c) arg[c] = takes(x[c], best[c]) ? idx : arg[c];
  for (int64_t c = 0; c < n; ++c) best[c] = takes(x[c], best[c]) ? x[c] : best[c];
}

// dx += dy where arg == idx, over n channels: one window element's share of maxpool's backward.
// The select is on the value's bits (keep_if, core/mask_bits.h): a `?:` on the byte compare kept
// a branch per channel and the loop unvectorized.
template <class T>
void add_where_argmax(const T* dy, const uint8_t* arg, uint8_t idx, int64_t n, T* dx) {
  for (int64_t c = 0; c < n; ++c) dx[c] += keep_if(static_cast<uint8_t>(arg[c] == idx), dy[c]);
}

// dx = dy where arg == idx, else 0, over n channels: one window element's gradient where windows
// tile the input, so no other window adds to it.
template <class T>
void write_where_argmax(const T* dy, const uint8_t* arg, uint8_t idx, int64_t n, T* dx) {
  for (int64_t c = 0; c < n; ++c) dx[c] = keep_if(static_cast<uint8_t>(arg[c] == idx), dy[c]);
}

// Windows that tile the input (stride = kernel, no padding) cover each input element at most
// once, so each element's gradient is written, not summed: one parallel pass over the input rows,
// without the zeroing pass the general backward needs first; rows and columns that no window
// covers (the input's size not a multiple of the kernel) are written zero. The values are the
// general backward's: 0 + dy is dy.
template <class T>
void maxpool_backward_tiled(const PoolGeom& g, const T* dy, const uint8_t* argmax, T* dx) {
  const int64_t C = g.c, k = g.kernel, row = g.w * C;
  // A task takes a run of input rows; row r is row r % h of image r / h.
  parallel_blocks(g.n * g.h, items_per_task(row), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.h, ih = r % g.h, oh = ih / k;
      T* dxr = dx + r * row;
      if (oh >= g.ho) {
        std::fill(dxr, dxr + row, T(0));
        continue;
      }
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        const int64_t o = (n * g.ho + oh) * g.wo + ow;
        for (int64_t kw = 0; kw < k; ++kw) {
          const auto idx = static_cast<uint8_t>((ih - oh * k) * k + kw);
          write_where_argmax(dy + o * C, argmax + o * C, idx, C, dxr + (ow * k + kw) * C);
        }
      }
      std::fill(dxr + g.wo * k * C, dxr + row, T(0));
    }
  });
}

template <class T>
void maxpool_forward(const PoolGeom& g, const T* x, T* y, uint8_t* argmax) {
  const int64_t C = g.c;
  // A task takes a run of output rows; row r is row r % ho of image r / ho. Each window
  // element is one branch-free pass over the channels (a select per channel), so it vectorizes.
  parallel_blocks(g.n * g.ho, items_per_task(g.wo * C * g.kernel * g.kernel), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.ho, oh = r % g.ho;
      // padding <= kernel/2 guarantees every window holds at least one real element.
      int64_t h0 = oh * g.stride - g.pad;
      int64_t ih_lo = std::max<int64_t>(h0, 0), ih_hi = std::min(h0 + g.kernel, g.h);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        int64_t w0 = ow * g.stride - g.pad;
        int64_t iw_lo = std::max<int64_t>(w0, 0), iw_hi = std::min(w0 + g.kernel, g.w);
        int64_t out = ((n * g.ho + oh) * g.wo + ow) * C;
        T* best = y + out;
        uint8_t* arg = argmax ? argmax + out : nullptr;
        for (int64_t ih = ih_lo; ih < ih_hi; ++ih)
          for (int64_t iw = iw_lo; iw < iw_hi; ++iw) {
            const T* xr = x + ((n * g.h + ih) * g.w + iw) * C;
            // The window index counts from the window's corner (h0, w0), padding included, so
            // backward decodes it without knowing where the window was clipped.
            auto idx = static_cast<uint8_t>((ih - h0) * g.kernel + (iw - w0));  // < kernel^2 <= 256
            if (ih == ih_lo && iw == iw_lo) {
              std::copy(xr, xr + C, best);
              if (arg) std::fill(arg, arg + C, idx);
              continue;
            }
            max_step(xr, best, arg, idx, C);
          }
      }
    }
  });
}

template <class T>
void maxpool_backward(const PoolGeom& g, const T* dy, const uint8_t* argmax, T* dx) {
  // Tiling windows, none hanging over the edge (ceil mode's last one may).
  if (g.stride == g.kernel && g.pad == 0 && g.windows_end_inside(false))
    return maxpool_backward_tiled(g, dy, argmax, dx);
  const int64_t C = g.c, image = g.h * g.w * C, pixels = g.ho * g.wo;
  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  // A task takes a run of (image, channel block) pairs; pair p is block p % blocks of image
  // p / blocks. It zeroes its part of dx first (in the task, so that the zeroing is parallel too).
  parallel_blocks(g.n * blocks, items_per_task(pixels * kChannelBlock), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n = p / blocks, b = p % blocks;
      int64_t c0 = b * kChannelBlock, c1 = std::min(C, c0 + kChannelBlock);
      T* dxn = dx + n * image;
      for (int64_t i = 0; i < g.h * g.w; ++i) std::fill(dxn + i * C + c0, dxn + i * C + c1, T(0));
      // In output raster order: where windows overlap, dx sums in a fixed order (the GPU's too).
      // Each window element adds dy where it was the argmax and 0 elsewhere: a select over a run
      // of channels instead of a scatter, and x + 0 is x, so the sums are the scatter's.
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        const int64_t h0 = oh * g.stride - g.pad;
        const int64_t ih_lo = std::max<int64_t>(h0, 0), ih_hi = std::min(h0 + g.kernel, g.h);
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          const int64_t w0 = ow * g.stride - g.pad, o = (n * g.ho + oh) * g.wo + ow;
          const int64_t iw_lo = std::max<int64_t>(w0, 0), iw_hi = std::min(w0 + g.kernel, g.w);
          const uint8_t* arg = argmax + o * C;
          const T* dyo = dy + o * C;
          for (int64_t ih = ih_lo; ih < ih_hi; ++ih)
            for (int64_t iw = iw_lo; iw < iw_hi; ++iw) {
              const auto idx = static_cast<uint8_t>((ih - h0) * g.kernel + (iw - w0));
              T* dxr = dxn + (ih * g.w + iw) * C;
              add_where_argmax(dyo + c0, arg + c0, idx, c1 - c0, dxr + c0);
            }
        }
      }
    }
  });
}

template <class T>
void avgpool_forward(const PoolGeom& g, bool count_include_pad, const T* x, T* y) {
  const int64_t C = g.c;
  // A task takes a run of output rows; row r is row r % ho of image r / ho.
  parallel_blocks(g.n * g.ho, items_per_task(g.wo * C * g.kernel * g.kernel), [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(C);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.ho, oh = r % g.ho;
      int64_t h0 = oh * g.stride - g.pad;
      int64_t ih_lo = std::max<int64_t>(h0, 0), ih_hi = std::min(h0 + g.kernel, g.h);
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        int64_t w0 = ow * g.stride - g.pad;
        int64_t iw_lo = std::max<int64_t>(w0, 0), iw_hi = std::min(w0 + g.kernel, g.w);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t ih = ih_lo; ih < ih_hi; ++ih)
          for (int64_t iw = iw_lo; iw < iw_hi; ++iw) {
            const T* xr = x + ((n * g.h + ih) * g.w + iw) * C;
            for (int64_t c = 0; c < C; ++c) acc[c] += xr[c];
          }
        const double divisor = static_cast<double>(avgpool_divisor(g, count_include_pad, oh, ow));
        T* yr = y + ((n * g.ho + oh) * g.wo + ow) * C;
        for (int64_t c = 0; c < C; ++c) yr[c] = static_cast<T>(acc[c] / divisor);
      }
    }
  });
}

// Gathers, for every input element, the outputs whose windows cover it: no scatter, so each
// dx element is written by one task in a fixed order. Where every divisor is k*k the dy are
// summed and the sum divided once (the float64 results of kiln before ceil mode, bit for bit);
// else each dy is divided by its own output's divisor as it is added.
template <class T>
void avgpool_backward(const PoolGeom& g, bool count_include_pad, const T* dy, T* dx) {
  const int64_t C = g.c, k = g.kernel, s = g.stride, p = g.pad;
  const bool one_divisor = avgpool_divisor_is_window(g, count_include_pad);
  const double final_divisor = one_divisor ? static_cast<double>(k * k) : 1.0;
  // Outputs o whose window [o*s - p, o*s - p + k) contains input i.
  auto covering = [&](int64_t i, int64_t out_size, int64_t& lo, int64_t& hi) {
    int64_t a = i + p - k + 1;
    lo = a <= 0 ? 0 : (a + s - 1) / s;
    hi = std::min(out_size, (i + p) / s + 1);
  };
  // A task takes a run of input rows; row r is row r % h of image r / h.
  parallel_blocks(g.n * g.h, items_per_task(g.w * C * k * k), [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(C);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.h, ih = r % g.h;
      int64_t oh_lo, oh_hi;
      covering(ih, g.ho, oh_lo, oh_hi);
      for (int64_t iw = 0; iw < g.w; ++iw) {
        int64_t ow_lo, ow_hi;
        covering(iw, g.wo, ow_lo, ow_hi);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh)
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) {
            const T* dyr = dy + ((n * g.ho + oh) * g.wo + ow) * C;
            if (one_divisor) {
              for (int64_t c = 0; c < C; ++c) acc[c] += dyr[c];
            } else {
              const double divisor = static_cast<double>(avgpool_divisor(g, count_include_pad, oh, ow));
              for (int64_t c = 0; c < C; ++c) acc[c] += dyr[c] / divisor;
            }
          }
        T* dxr = dx + ((n * g.h + ih) * g.w + iw) * C;
        for (int64_t c = 0; c < C; ++c) dxr[c] = static_cast<T>(acc[c] / final_divisor);
      }
    }
  });
}

template <class T>
void gap_forward(const T* x, int64_t n, int64_t hw, int64_t c, T* y) {
  parallel_blocks(n, items_per_task(hw * c), [&](int64_t i0, int64_t i1) {
    std::vector<double> acc(c);
    for (int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < hw; ++j) {
        const T* xr = x + (i * hw + j) * c;
        for (int64_t k = 0; k < c; ++k) acc[k] += xr[k];
      }
      for (int64_t k = 0; k < c; ++k) y[i * c + k] = static_cast<T>(acc[k] / hw);
    }
  });
}

template <class T>
void gap_backward(const T* dy, int64_t n, int64_t hw, int64_t c, T* dx) {
  parallel_blocks(n * hw, items_per_task(c), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* dyr = dy + (r / hw) * c;
      T* dxr = dx + r * c;
      for (int64_t k = 0; k < c; ++k) dxr[k] = static_cast<T>(static_cast<double>(dyr[k]) / hw);
    }
  });
}

#define KILN_INSTANTIATE_POOL(T)                                                           \
  template void maxpool_forward<T>(const PoolGeom&, const T*, T*, uint8_t*);               \
  template void maxpool_backward<T>(const PoolGeom&, const T*, const uint8_t*, T*);        \
  template void avgpool_forward<T>(const PoolGeom&, bool, const T*, T*);                   \
  template void avgpool_backward<T>(const PoolGeom&, bool, const T*, T*);                  \
  template void gap_forward<T>(const T*, int64_t, int64_t, int64_t, T*);                   \
  template void gap_backward<T>(const T*, int64_t, int64_t, int64_t, T*);
KILN_INSTANTIATE_POOL(float)
KILN_INSTANTIATE_POOL(double)
#undef KILN_INSTANTIATE_POOL

}  // namespace kiln::cpu
