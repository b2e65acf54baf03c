// Convolution as GEMM. Each output pixel's receptive field is unrolled into one row of a
// "column" matrix (im2col), laid out (R, S, C) to match a KRSC filter row, so that
//   forward: y (P x K)     = col (P x RSC) * w^T
//   dgrad:   dcol (P x RSC) = dy (P x K) * w (K x RSC), then scattered back (col2im)
//   wgrad:   dw (K x RSC)  = dy^T (K x P) * col (P x RSC)
// where P counts output pixels. The batch is processed in chunks of whole images so the
// column buffer stays bounded whatever the batch size.
#include "ops/conv/conv_cpu.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kiln/error.h"
#include "ops/common/gemm_cpu.h"
#include "ops/conv/conv_onednn_cpu.h"

namespace kiln::cpu {

ConvGeom ConvGeom::make(const Shape& x, const Shape& w, int stride, int pad) {
  if (x.size() != 4)
    fail("conv: input must be NHWC (rank 4) but has shape {}; flatten/reshape it upstream",
         shape_str(x));
  if (w.size() != 4)
    fail("conv: filter must be KRSC (rank 4) but has shape {}", shape_str(w));
  for (int64_t d : x)
    if (d <= 0) fail("conv: input shape {} has an empty dimension", shape_str(x));
  for (int64_t d : w)
    if (d <= 0) fail("conv: filter shape {} has an empty dimension", shape_str(w));
  if (stride < 1) fail("conv: stride is {}; it must be at least 1", stride);
  if (pad < 0) fail("conv: padding is {}; it must not be negative", pad);
  if (x[3] != w[3])
    fail("conv: input {} has {} channels but filter {} expects {}; make the filter's last "
         "dimension equal the input channels",
         shape_str(x), x[3], shape_str(w), w[3]);
  ConvGeom g{};
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.k = w[0], g.r = w[1], g.s = w[2];
  g.stride = stride, g.pad = pad;
  if (g.r > g.h + 2 * pad || g.s > g.w + 2 * pad)
    fail("conv: kernel {}x{} is larger than the padded input {}x{} (input {}x{}, padding {}); "
         "use a smaller kernel, more padding or a larger input",
         g.r, g.s, g.h + 2 * pad, g.w + 2 * pad, g.h, g.w, pad);
  g.ho = (g.h + 2 * pad - g.r) / stride + 1;
  g.wo = (g.w + 2 * pad - g.s) / stride + 1;
  return g;
}

namespace {

std::atomic<size_t> col_budget_bytes{size_t{64} << 20};
// Column elements per task of im2col / col2im: fewer cost more in waking a thread than they save.
constexpr int64_t kParallelMinElems = int64_t{1} << 16;

int64_t out_pixels(const ConvGeom& g) { return g.ho * g.wo; }
int64_t patch_len(const ConvGeom& g) { return g.r * g.s * g.c; }

// A 1x1, stride-1, unpadded conv reads x as the column matrix itself.
bool is_pointwise(const ConvGeom& g) {
  return g.r == 1 && g.s == 1 && g.stride == 1 && g.pad == 0;
}

int64_t images_per_chunk(const ConvGeom& g, size_t elem_bytes) {
  if (is_pointwise(g)) return g.n;
  const size_t per_image = static_cast<size_t>(out_pixels(g) * patch_len(g)) * elem_bytes;
  const size_t budget = col_budget_bytes.load(std::memory_order_relaxed);
  return std::clamp<int64_t>(static_cast<int64_t>(budget / per_image), 1, g.n);
}

// Grow-only scratch, one per thread and element type: conv calls on a thread run one at a
// time, and reusing the allocation avoids page-faulting tens of MB every step.
template <class T>
T* col_buffer(int64_t count) {
  static thread_local std::vector<T> buffer;
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// For output column ow, the filter taps s in [lo, hi) land inside the input row.
struct TapRange {
  int64_t iw0, lo, hi;
};
TapRange taps(const ConvGeom& g, int64_t ow) {
  const int64_t iw0 = ow * g.stride - g.pad;
  return {iw0, std::max<int64_t>(0, -iw0), std::min<int64_t>(g.s, g.w - iw0)};
}

// One filter row (S taps x C channels) is contiguous both in the patch and in x, so each
// (output pixel, r) pair is one copy plus zero fill for the taps that fall in the padding.
template <class T>
void im2col_image(const ConvGeom& g, const T* x, T* col) {
  const int64_t seg = g.s * g.c;
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    for (int64_t ow = 0; ow < g.wo; ++ow) {
      const TapRange t = taps(g, ow);
      T* patch = col + (oh * g.wo + ow) * patch_len(g);
      for (int64_t r = 0; r < g.r; ++r) {
        T* dst = patch + r * seg;
        const int64_t ih = oh * g.stride - g.pad + r;
        if (ih < 0 || ih >= g.h || t.lo >= t.hi) {
          std::fill(dst, dst + seg, T(0));
          continue;
        }
        std::fill(dst, dst + t.lo * g.c, T(0));
        const T* src = x + (ih * g.w + t.iw0 + t.lo) * g.c;
        std::memcpy(dst + t.lo * g.c, src, static_cast<size_t>((t.hi - t.lo) * g.c) * sizeof(T));
        std::fill(dst + t.hi * g.c, dst + seg, T(0));
      }
    }
  }
}

// Inverse of im2col_image: every patch entry is added back onto the input pixel it was read
// from, in a fixed order, so overlapping windows sum deterministically.
template <class T>
void col2im_image(const ConvGeom& g, const T* col, T* dx) {
  std::fill(dx, dx + g.h * g.w * g.c, T(0));
  const int64_t seg = g.s * g.c;
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    for (int64_t ow = 0; ow < g.wo; ++ow) {
      const TapRange t = taps(g, ow);
      if (t.lo >= t.hi) continue;
      const T* patch = col + (oh * g.wo + ow) * patch_len(g);
      for (int64_t r = 0; r < g.r; ++r) {
        const int64_t ih = oh * g.stride - g.pad + r;
        if (ih < 0 || ih >= g.h) continue;
        const T* src = patch + r * seg + t.lo * g.c;
        T* dst = dx + (ih * g.w + t.iw0 + t.lo) * g.c;
        const int64_t len = (t.hi - t.lo) * g.c;
        for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
      }
    }
  }
}

int64_t images_per_task(const ConvGeom& g) {
  return std::max<int64_t>(1, kParallelMinElems / (out_pixels(g) * patch_len(g)));
}

// Images are independent, so tasks split them without sharing any output.
template <class T>
void im2col_chunk(const ConvGeom& g, const T* x, int64_t images, T* col) {
  const int64_t in_image = g.h * g.w * g.c, col_image = out_pixels(g) * patch_len(g);
  parallel_blocks(images, images_per_task(g), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) im2col_image(g, x + i * in_image, col + i * col_image);
  });
}

template <class T>
void col2im_chunk(const ConvGeom& g, const T* col, int64_t images, T* dx) {
  const int64_t in_image = g.h * g.w * g.c, col_image = out_pixels(g) * patch_len(g);
  parallel_blocks(images, images_per_task(g), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) col2im_image(g, col + i * col_image, dx + i * in_image);
  });
}

}  // namespace

void set_conv_workspace_limit(size_t bytes) {
  col_budget_bytes.store(bytes, std::memory_order_relaxed);
}
size_t conv_workspace_limit() { return col_budget_bytes.load(std::memory_order_relaxed); }

template <class T>
void conv_fwd(const ConvGeom& g, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_fwd(g, x, w, bias, y)) return;
  const int64_t chunk = images_per_chunk(g, sizeof(T)), rsc = patch_len(g);
  T* col = is_pointwise(g) ? nullptr : col_buffer<T>(chunk * out_pixels(g) * rsc);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t images = std::min(chunk, g.n - n0), rows = images * out_pixels(g);
    const T* xs = x + n0 * g.h * g.w * g.c;
    T* ys = y + n0 * out_pixels(g) * g.k;
    const T* a = xs;
    if (col) {
      im2col_chunk(g, xs, images, col);
      a = col;
    }
    if (bias) fill_rows(rows, g.k, bias, ys);
    gemm<T>(false, true, rows, g.k, rsc, T(1), a, rsc, w, rsc, bias ? T(1) : T(0), ys, g.k);
  }
}

template <class T>
void conv_dgrad(const ConvGeom& g, const T* dy, const T* w, T* dx) {
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_dgrad(g, dy, w, dx)) return;
  const int64_t chunk = images_per_chunk(g, sizeof(T)), rsc = patch_len(g);
  T* col = is_pointwise(g) ? nullptr : col_buffer<T>(chunk * out_pixels(g) * rsc);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t images = std::min(chunk, g.n - n0), rows = images * out_pixels(g);
    const T* dys = dy + n0 * out_pixels(g) * g.k;
    T* dxs = dx + n0 * g.h * g.w * g.c;
    // Pointwise: the column gradient is dx itself (rsc == c, one row per pixel).
    T* dcol = col ? col : dxs;
    gemm<T>(false, false, rows, rsc, g.k, T(1), dys, g.k, w, rsc, T(0), dcol, rsc);
    if (col) col2im_chunk(g, col, images, dxs);
  }
}

template <class T>
void conv_wgrad(const ConvGeom& g, const T* dy, const T* x, T* dw, T* dbias) {
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_wgrad(g, dy, x, dw, dbias)) return;
  const int64_t chunk = images_per_chunk(g, sizeof(T)), rsc = patch_len(g);
  T* col = is_pointwise(g) ? nullptr : col_buffer<T>(chunk * out_pixels(g) * rsc);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t images = std::min(chunk, g.n - n0), rows = images * out_pixels(g);
    const T* dys = dy + n0 * out_pixels(g) * g.k;
    const T* xs = x + n0 * g.h * g.w * g.c;
    const T* b = xs;
    if (col) {
      im2col_chunk(g, xs, images, col);
      b = col;
    }
    // The first chunk overwrites dw, later ones accumulate onto it.
    gemm<T>(true, false, g.k, rsc, rows, T(1), dys, g.k, b, rsc, n0 == 0 ? T(0) : T(1), dw, rsc);
  }
  if (dbias) sum_rows(g.n * out_pixels(g), g.k, dy, dbias);
}

size_t conv_prepare(const ConvGeom& g, DType dt, bool bias, ConvPasses passes) {
  return dt == DType::F32 ? onednn_conv_prepare(g, bias, passes) : 0;
}

#define KILN_INSTANTIATE_CONV(T)                                                    \
  template void conv_fwd<T>(const ConvGeom&, const T*, const T*, const T*, T*);     \
  template void conv_dgrad<T>(const ConvGeom&, const T*, const T*, T*);             \
  template void conv_wgrad<T>(const ConvGeom&, const T*, const T*, T*, T*);
KILN_INSTANTIATE_CONV(float)
KILN_INSTANTIATE_CONV(double)
#undef KILN_INSTANTIATE_CONV

}  // namespace kiln::cpu
