// Convolution as GEMM. Each output pixel's receptive field is unrolled into one row of a
// "column" matrix (im2col), laid out (groups, R, S, C / groups), so that group g's part of the row,
// columns [g * RSCg, (g + 1) * RSCg), matches a row of its KRSC filters, and for each group
//   forward: y_g (P x Kg)       = col_g (P x RSCg) * w_g^T
//   dgrad:   dcol_g (P x RSCg)  = dy_g (P x Kg) * w_g (Kg x RSCg), then scattered back (col2im)
//   wgrad:   dw_g (Kg x RSCg)   = dy_g^T (Kg x P) * col_g (P x RSCg)
// where P counts output pixels and y_g, dy_g are the group's output channels of each row (one
// group: the plain convolution, its rows (R, S, C)). The batch is processed in chunks of whole
// images so the column buffer stays bounded whatever the batch size. Depthwise convolutions run
// as direct loops instead (conv_depthwise_cpu.h).
#include "ops/conv/conv_cpu.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/common/gemm_cpu.h"
#include "ops/conv/conv_depthwise_cpu.h"
#include "ops/conv/conv_onednn_cpu.h"

namespace kiln::cpu {
namespace {

std::atomic<size_t> col_budget_bytes{size_t{64} << 20};
// Column elements per task of im2col / col2im: fewer cost more in waking a thread than they save.
constexpr int64_t kParallelMinElems = int64_t{1} << 16;

int64_t out_pixels(const ConvGeom& g) { return g.ho * g.wo; }
int64_t patch_len(const ConvGeom& g) { return g.r * g.s * g.c; }
int64_t group_patch_len(const ConvGeom& g) { return g.r * g.s * g.cg; }

// A 1x1, stride-1, unpadded conv reads x as the column matrix itself (any groups: a pixel's
// channels are its (groups, C / groups) patch).
bool is_pointwise(const ConvGeom& g) {
  const ConvWindow& v = g.win;
  return g.r == 1 && g.s == 1 && v.stride_h == 1 && v.stride_w == 1 && v.pad_top == 0 && v.pad_left == 0 &&
         v.pad_bottom == 0 && v.pad_right == 0;
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

// For output column ow, the input column of tap 0 and the taps s in [lo, hi) that land inside the
// input row (iw0 + s * dilation in [0, W)).
struct TapRange {
  int64_t iw0, lo, hi;
};
TapRange taps(const ConvGeom& g, int64_t ow) {
  const int64_t iw0 = ow * g.win.stride_w - g.win.pad_left, d = g.win.dilation_w;
  const int64_t lo = iw0 >= 0 ? 0 : (-iw0 + d - 1) / d;
  const int64_t hi = g.w - iw0 <= 0 ? 0 : std::min<int64_t>(g.s, (g.w - iw0 + d - 1) / d);
  return {iw0, lo, std::max(lo, hi)};
}

int64_t input_row(const ConvGeom& g, int64_t oh, int64_t r) {
  return oh * g.win.stride_h - g.win.pad_top + r * g.win.dilation_h;
}

// One group and undilated columns: a filter row (S taps x C channels) is contiguous both in the
// patch and in x, so each (output pixel, r) pair is one copy plus zero fill for the taps that fall
// in the padding.
bool rows_are_contiguous(const ConvGeom& g) { return g.win.groups == 1 && g.win.dilation_w == 1; }

// Where tap (r, s) of group grp sits in a patch laid out (groups, R, S, C / groups).
int64_t patch_offset(const ConvGeom& g, int64_t grp, int64_t r, int64_t s) {
  return grp * group_patch_len(g) + (r * g.s + s) * g.cg;
}

template <class T>
void im2col_image(const ConvGeom& g, const T* x, T* col) {
  const int64_t seg = g.s * g.c;
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    for (int64_t ow = 0; ow < g.wo; ++ow) {
      const TapRange t = taps(g, ow);
      T* patch = col + (oh * g.wo + ow) * patch_len(g);
      for (int64_t r = 0; r < g.r; ++r) {
        const int64_t ih = input_row(g, oh, r);
        const bool row_inside = ih >= 0 && ih < g.h && t.lo < t.hi;
        if (rows_are_contiguous(g)) {
          T* dst = patch + r * seg;
          if (!row_inside) {
            std::fill(dst, dst + seg, T(0));
            continue;
          }
          std::fill(dst, dst + t.lo * g.c, T(0));
          const T* src = x + (ih * g.w + t.iw0 + t.lo) * g.c;
          std::memcpy(dst + t.lo * g.c, src, static_cast<size_t>((t.hi - t.lo) * g.c) * sizeof(T));
          std::fill(dst + t.hi * g.c, dst + seg, T(0));
          continue;
        }
        for (int64_t grp = 0; grp < g.win.groups; ++grp)
          for (int64_t s = 0; s < g.s; ++s) {
            T* dst = patch + patch_offset(g, grp, r, s);
            if (!row_inside || s < t.lo || s >= t.hi) {
              std::fill(dst, dst + g.cg, T(0));
              continue;
            }
            const T* src = x + (ih * g.w + t.iw0 + s * g.win.dilation_w) * g.c + grp * g.cg;
            std::memcpy(dst, src, static_cast<size_t>(g.cg) * sizeof(T));
          }
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
        const int64_t ih = input_row(g, oh, r);
        if (ih < 0 || ih >= g.h) continue;
        if (rows_are_contiguous(g)) {
          const T* src = patch + r * seg + t.lo * g.c;
          T* dst = dx + (ih * g.w + t.iw0 + t.lo) * g.c;
          const int64_t len = (t.hi - t.lo) * g.c;
          for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
          continue;
        }
        for (int64_t grp = 0; grp < g.win.groups; ++grp)
          for (int64_t s = t.lo; s < t.hi; ++s) {
            const T* src = patch + patch_offset(g, grp, r, s);
            T* dst = dx + (ih * g.w + t.iw0 + s * g.win.dilation_w) * g.c + grp * g.cg;
            for (int64_t i = 0; i < g.cg; ++i) dst[i] += src[i];
          }
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
  if (g.depthwise()) return depthwise_fwd(g, x, w, bias, y);
  const int64_t chunk = images_per_chunk(g, sizeof(T)), rsc = patch_len(g), rscg = group_patch_len(g);
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
    for (int64_t grp = 0; grp < g.win.groups; ++grp)
      gemm<T>(false, true, rows, g.kg, rscg, T(1), a + grp * rscg, rsc, w + grp * g.kg * rscg, rscg,
              bias ? T(1) : T(0), ys + grp * g.kg, g.k);
  }
}

template <class T>
void conv_dgrad(const ConvGeom& g, const T* dy, const T* w, T* dx) {
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_dgrad(g, dy, w, dx)) return;
  if (g.depthwise()) return depthwise_dgrad(g, dy, w, dx);
  const int64_t chunk = images_per_chunk(g, sizeof(T)), rsc = patch_len(g), rscg = group_patch_len(g);
  T* col = is_pointwise(g) ? nullptr : col_buffer<T>(chunk * out_pixels(g) * rsc);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t images = std::min(chunk, g.n - n0), rows = images * out_pixels(g);
    const T* dys = dy + n0 * out_pixels(g) * g.k;
    T* dxs = dx + n0 * g.h * g.w * g.c;
    // Pointwise: the column gradient is dx itself (rsc == c, one row per pixel).
    T* dcol = col ? col : dxs;
    for (int64_t grp = 0; grp < g.win.groups; ++grp)
      gemm<T>(false, false, rows, rscg, g.kg, T(1), dys + grp * g.kg, g.k, w + grp * g.kg * rscg, rscg, T(0),
              dcol + grp * rscg, rsc);
    if (col) col2im_chunk(g, col, images, dxs);
  }
}

template <class T>
void conv_wgrad(const ConvGeom& g, const T* dy, const T* x, T* dw, T* dbias) {
  if constexpr (std::is_same_v<T, float>)
    if (onednn_conv_wgrad(g, dy, x, dw, dbias)) return;
  if (g.depthwise()) {
    depthwise_wgrad(g, dy, x, dw);
  } else {
    const int64_t chunk = images_per_chunk(g, sizeof(T)), rsc = patch_len(g), rscg = group_patch_len(g);
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
      for (int64_t grp = 0; grp < g.win.groups; ++grp)
        gemm<T>(true, false, g.kg, rscg, rows, T(1), dys + grp * g.kg, g.k, b + grp * rscg, rsc,
                n0 == 0 ? T(0) : T(1), dw + grp * g.kg * rscg, rscg);
    }
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
