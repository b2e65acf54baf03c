#include "data/image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__SSE2__) && !defined(KILN_RESIZE_SCALAR)
#include <emmintrin.h>
#endif

#include "kiln/error.h"

namespace kiln {
namespace {

// Fixed point of the filter weights, as PIL uses for 8-bit images: 32 bits minus 8 for the pixel
// value minus 2 for the sign and headroom.
constexpr int kPrecisionBits = 22;
constexpr int32_t kHalf = int32_t(1) << (kPrecisionBits - 1);

inline uint8_t clip8(int32_t acc) {
  if (acc >= (int32_t(1) << (kPrecisionBits + 8))) return 255;
  if (acc <= 0) return 0;
  return uint8_t(acc >> kPrecisionBits);
}

// C's (int) conversion (truncation toward zero), kept away from overflow for absurd inputs.
inline int trunc_int(double v) {
  if (!(v < 1e9)) return 1000000000;
  if (!(v > -1e9)) return -1000000000;
  return int(v);
}

// A product rounded on its own, never fused with a following add (-march=native builds would
// otherwise use FMA): the coefficients must round exactly as PIL's (built without FMA) do.
inline double product(double a, double b) {
  volatile double p = a * b;
  return p;
}

inline double tri(double t) {
  if (t < 0) t = -t;
  return t < 1.0 ? 1.0 - t : 0.0;
}

// The resampling of one axis: either a plain copy from `offset`, or per output pixel a window
// [start, start + count) of source pixels (absolute indices) and its fixed-point weights.
struct Axis {
  bool copy = false;
  int offset = 0;
  int ksize = 0;  // weight row length (>= taps)
  int taps = 0;   // every window's length (after padding)
  std::vector<int> start, count;
  std::vector<int32_t> weight;  // out_len x ksize
  std::vector<double> scratch;  // one window's float weights
  std::vector<int32_t> pairs;   // the weights split for the SSE2 pass (split_weight_pairs)
};

// `reverse` stores output i's coefficients at position out_len - 1 - i (the mirror).
void compute_axis(double box_start, double box_len, int valid0, int valid1, int out_len, bool reverse, Axis& a) {
  const int in_size = valid1 - valid0;
  const double in0 = box_start - valid0;  // PIL sees the valid range as its image
  const double scale = box_len / out_len;
  if (scale == 1.0 && in0 == std::floor(in0) && in0 >= 0 && in0 + out_len <= in_size) {
    a.copy = true;
    a.offset = valid0 + int(in0);
    return;
  }
  a.copy = false;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // the triangle's support is 1
  const double ss = 1.0 / filterscale;
  const double ceil_support = std::ceil(support);
  a.ksize = ceil_support < 1e8 ? int(ceil_support) * 2 + 1 : in_size;
  a.ksize = std::min(a.ksize, in_size + 1);
  a.start.resize(out_len);
  a.count.resize(out_len);
  a.weight.assign(size_t(out_len) * a.ksize, 0);
  a.scratch.resize(a.ksize);
  for (int i = 0; i < out_len; ++i) {
    const int at = reverse ? out_len - 1 - i : i;
    const double center = in0 + product(i + 0.5, scale);
    const int xmin = std::max(trunc_int(center - support + 0.5), 0);
    const int xmax = std::min(trunc_int(center + support + 0.5), in_size);
    int n = std::min(xmax - xmin, a.ksize);
    double ww = 0;
    for (int x = 0; x < n; ++x) {
      const double w = tri(product(x + xmin - center + 0.5, ss));
      a.scratch[x] = w;
      ww += w;
    }
    int32_t* k = &a.weight[size_t(at) * a.ksize];
    if (n <= 0 || ww == 0.0) {  // the window misses the valid range: nearest valid pixel
      a.start[at] = valid0 + std::clamp(trunc_int(std::floor(center)), 0, in_size - 1);
      a.count[at] = 1;
      k[0] = int32_t(1) << kPrecisionBits;
      continue;
    }
    for (int x = 0; x < n; ++x) {
      const double w = a.scratch[x] / ww;  // >= 0: the triangle has no negative lobes
      k[x] = int32_t(0.5 + product(w, double(1 << kPrecisionBits)));
    }
    a.start[at] = valid0 + xmin;
    a.count[at] = n;
  }
  // Every window padded with zero weights to the longest one's length, so the passes run a
  // fixed number of taps (unrolled); a zero weight adds exactly nothing, the result is unchanged.
  int taps = 1;
  for (int i = 0; i < out_len; ++i) taps = std::max(taps, a.count[i]);
  for (int i = 0; i < out_len; ++i) {
    const int n = a.count[i];
    if (n == taps) continue;
    int32_t* k = &a.weight[size_t(i) * a.ksize];
    // Extend to the right when the image allows, else to the left (taps <= in_size).
    const int shift = std::max(0, a.start[i] + taps - valid1);
    if (shift > 0) {
      std::copy_backward(k, k + n, k + n + shift);
      std::fill(k, k + shift, 0);
      a.start[i] -= shift;
    }
    std::fill(k + shift + n, k + taps, 0);
    a.count[i] = taps;
  }
  a.taps = taps;
}

// One row of the horizontal pass, C channels and K taps known at compile time.
template <int C, int K>
void horizontal_fixed(const uint8_t* row, const Axis& a, int out_w, int /*scalar_from*/, uint8_t* dst) {
  const int32_t* k = a.weight.data();
  const int ksize = a.ksize;
  for (int i = 0; i < out_w; ++i, k += ksize) {
    const uint8_t* p = row + int64_t(a.start[i]) * C;
    int32_t acc[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[c] = kHalf;
#pragma GCC unroll 8
    for (int x = 0; x < K; ++x)
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c] += int32_t(p[x * C + c]) * k[x];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) dst[i * C + c] = clip8(acc[c]);
  }
}

#if defined(__SSE2__) && !defined(KILN_RESIZE_SCALAR)
// 3 or 4 channels with SSE2 (every x86-64), exactly the scalar arithmetic: each fixed-point weight
// is split as W = Wh * 2^11 + Wl (both fit int16), so pairs of taps go through _mm_madd_epi16 as
// v0 * w0 + v1 * w1 in 32-bit lanes, one lane per channel, and sum = (sum_h << 11) + sum_l.
// A 3-channel pixel is read as 4 bytes (the 4th is the next pixel's, ignored): a window that ends
// at the row's last pixel (start >= scalar_from) takes the scalar path instead of reading past it.
constexpr int kSplitBits = 11;

// Per output, (K + 1) / 2 pairs of high halves, then as many of low halves, each pair packed as
// two int16 in an int32 (tap 2q in the low half) and repeated 4 times: one __m128i operand each.
void split_weight_pairs(Axis& a, int out_w) {
  const int pairs = (a.taps + 1) / 2;
  a.pairs.resize(size_t(out_w) * pairs * 2 * 4);
  constexpr int32_t low_mask = (1 << kSplitBits) - 1;
  for (int i = 0; i < out_w; ++i) {
    const int32_t* k = &a.weight[size_t(i) * a.ksize];
    int32_t* dst = &a.pairs[size_t(i) * pairs * 2 * 4];
    for (int q = 0; q < pairs; ++q) {
      const int32_t w0 = k[2 * q], w1 = 2 * q + 1 < a.taps ? k[2 * q + 1] : 0;
      const int32_t hi = int32_t(uint32_t(w0 >> kSplitBits) | uint32_t(w1 >> kSplitBits) << 16);
      const int32_t lo = int32_t(uint32_t(w0 & low_mask) | uint32_t(w1 & low_mask) << 16);
      std::fill_n(dst + 4 * q, 4, hi);
      std::fill_n(dst + 4 * (pairs + q), 4, lo);
    }
  }
}

inline __m128i load_pixel(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm_unpacklo_epi8(_mm_cvtsi32_si128(v), _mm_setzero_si128());  // 4 x int16 (upper 4 zero)
}

template <int C, int K>
void horizontal_sse2(const uint8_t* row, const Axis& a, int out_w, int scalar_from, uint8_t* dst) {
  static_assert(C == 3 || C == 4);
  constexpr int P = (K + 1) / 2;
  const int* start = a.start.data();
  const int32_t* k = a.weight.data();
  const __m128i* wp = reinterpret_cast<const __m128i*>(a.pairs.data());
  const int ksize = a.ksize;
  const __m128i half = _mm_set1_epi32(kHalf);
  for (int i = 0; i < out_w; ++i, k += ksize, wp += 2 * P) {
    const uint8_t* p = row + int64_t(start[i]) * C;
    uint8_t* d = dst + int64_t(i) * C;
    if (C == 3 && start[i] >= scalar_from) {
      for (int c = 0; c < C; ++c) {
        int32_t acc = kHalf;
        for (int x = 0; x < K; ++x) acc += int32_t(p[x * C + c]) * k[x];
        d[c] = clip8(acc);
      }
      continue;
    }
    __m128i hi = _mm_setzero_si128(), lo = _mm_setzero_si128();
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      const __m128i p0 = load_pixel(p + 2 * q * C);
      const __m128i p1 = 2 * q + 1 < K ? load_pixel(p + (2 * q + 1) * C) : _mm_setzero_si128();
      const __m128i v = _mm_unpacklo_epi16(p0, p1);  // (c0 of tap 2q, c0 of tap 2q+1), (c1, c1), ...
      hi = _mm_add_epi32(hi, _mm_madd_epi16(v, _mm_loadu_si128(wp + q)));
      lo = _mm_add_epi32(lo, _mm_madd_epi16(v, _mm_loadu_si128(wp + P + q)));
    }
    const __m128i acc = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi, kSplitBits), lo), half);
    const __m128i r = _mm_srai_epi32(acc, kPrecisionBits);
    // Saturating packs clamp to [0, 255]: the same as clip8.
    const int32_t out = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(r, r), _mm_setzero_si128()));
    // 4 bytes where the 4th is the next output's first (written next): all but the last output.
    if (C == 4 || i + 1 < out_w)
      std::memcpy(d, &out, 4);
    else
      std::memcpy(d, &out, 3);
  }
}
#endif

// Any channel count and window length.
void horizontal_any(const uint8_t* row, const Axis& a, int out_w, int channels, uint8_t* dst) {
  const int ksize = a.ksize, taps = a.taps;
  for (int i = 0; i < out_w; ++i) {
    const uint8_t* p = row + int64_t(a.start[i]) * channels;
    const int32_t* k = &a.weight[size_t(i) * ksize];
    for (int c = 0; c < channels; ++c) {
      int32_t acc = kHalf;
      for (int x = 0; x < taps; ++x) acc += int32_t(p[x * channels + c]) * k[x];
      dst[int64_t(i) * channels + c] = clip8(acc);
    }
  }
}

using HorizontalFn = void (*)(const uint8_t*, const Axis&, int, int, uint8_t*);

template <int C, template <int, int> class Pass>
HorizontalFn horizontal_for_taps(int taps) {
  switch (taps) {
    case 1: return Pass<C, 1>::run;
    case 2: return Pass<C, 2>::run;
    case 3: return Pass<C, 3>::run;
    case 4: return Pass<C, 4>::run;
    case 5: return Pass<C, 5>::run;
    case 6: return Pass<C, 6>::run;
    case 7: return Pass<C, 7>::run;
    case 8: return Pass<C, 8>::run;
    default: return nullptr;
  }
}
template <int C, int K>
struct Scalar {
  static constexpr HorizontalFn run = horizontal_fixed<C, K>;
};
#if defined(__SSE2__) && !defined(KILN_RESIZE_SCALAR)
template <int C, int K>
struct Vector {
  static constexpr HorizontalFn run = horizontal_sse2<C, K>;
};
#else
template <int C, int K>
using Vector = Scalar<C, K>;
#endif

// The specialized horizontal pass for this channel count and window length, or nullptr.
HorizontalFn horizontal_fn(int channels, int taps) {
  switch (channels) {
    case 1: return horizontal_for_taps<1, Scalar>(taps);
    case 3: return horizontal_for_taps<3, Vector>(taps);
    case 4: return horizontal_for_taps<4, Vector>(taps);
    default: return nullptr;
  }
}

// One output row of the vertical pass: dst[e] = sum over the K rows of rows[k][e] * w[k].
template <int K>
void vertical_fixed(const uint8_t* const* rows, const int32_t* w, int64_t n, uint8_t* dst) {
  const uint8_t* r[K];
  int32_t wk[K];
  for (int k = 0; k < K; ++k) r[k] = rows[k], wk[k] = w[k];
  for (int64_t e = 0; e < n; ++e) {
    int32_t acc = kHalf;
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) acc += int32_t(r[k][e]) * wk[k];
    dst[e] = clip8(acc);
  }
}

#if defined(__SSE2__) && !defined(KILN_RESIZE_SCALAR)
// The vertical pass with SSE2, 16 outputs at a time, exactly the scalar arithmetic (the weight
// split of horizontal_sse2: rows taken in pairs, interleaved to int16 pairs for _mm_madd_epi16).
template <int K>
void vertical_sse2(const uint8_t* const* rows, const int32_t* w, int64_t n, uint8_t* dst) {
  constexpr int P = (K + 1) / 2;
  constexpr int32_t low_mask = (1 << kSplitBits) - 1;
  const uint8_t* r0[P];
  const uint8_t* r1[P];
  __m128i wh[P], wl[P];
  for (int q = 0; q < P; ++q) {
    const bool pair = 2 * q + 1 < K;
    const int32_t w0 = w[2 * q], w1 = pair ? w[2 * q + 1] : 0;
    r0[q] = rows[2 * q];
    r1[q] = pair ? rows[2 * q + 1] : rows[2 * q];  // weight 0: any readable row
    wh[q] = _mm_set1_epi32(int32_t(uint32_t(w0 >> kSplitBits) | uint32_t(w1 >> kSplitBits) << 16));
    wl[q] = _mm_set1_epi32(int32_t(uint32_t(w0 & low_mask) | uint32_t(w1 & low_mask) << 16));
  }
  const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(kHalf);
  int64_t e = 0;
  for (; e + 16 <= n; e += 16) {
    __m128i hi[4] = {zero, zero, zero, zero}, lo[4] = {zero, zero, zero, zero};
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0[q] + e));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1[q] + e));
      const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);  // a0 b0 a1 b1 ...
      const __m128i v[4] = {_mm_unpacklo_epi8(ab_lo, zero), _mm_unpackhi_epi8(ab_lo, zero),
                            _mm_unpacklo_epi8(ab_hi, zero), _mm_unpackhi_epi8(ab_hi, zero)};
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        hi[j] = _mm_add_epi32(hi[j], _mm_madd_epi16(v[j], wh[q]));
        lo[j] = _mm_add_epi32(lo[j], _mm_madd_epi16(v[j], wl[q]));
      }
    }
    __m128i r[4];
    for (int j = 0; j < 4; ++j)
      r[j] = _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(hi[j], kSplitBits), lo[j]), half),
                            kPrecisionBits);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(r[0], r[1]), _mm_packs_epi32(r[2], r[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + e), bytes);
  }
  for (; e < n; ++e) {
    int32_t acc = kHalf;
    for (int k = 0; k < K; ++k) acc += int32_t(rows[k][e]) * w[k];
    dst[e] = clip8(acc);
  }
}
#endif

// Any window length: accumulate row by row into `acc`.
void vertical_any(const uint8_t* const* rows, const int32_t* w, int taps, int64_t n, int32_t* acc, uint8_t* dst) {
  std::fill(acc, acc + n, kHalf);
  for (int k = 0; k < taps; ++k) {
    const uint8_t* row = rows[k];
    const int32_t wk = w[k];
    for (int64_t e = 0; e < n; ++e) acc[e] += int32_t(row[e]) * wk;
  }
  for (int64_t e = 0; e < n; ++e) dst[e] = clip8(acc[e]);
}

using VerticalFn = void (*)(const uint8_t* const*, const int32_t*, int64_t, uint8_t*);

#if defined(__SSE2__) && !defined(KILN_RESIZE_SCALAR)
#define KILN_VERTICAL vertical_sse2
#else
#define KILN_VERTICAL vertical_fixed
#endif
VerticalFn vertical_fn(int taps) {
  switch (taps) {
    case 1: return vertical_fixed<1>;  // a copy of one row, scaled by 1
    case 2: return KILN_VERTICAL<2>;
    case 3: return KILN_VERTICAL<3>;
    case 4: return KILN_VERTICAL<4>;
    case 5: return KILN_VERTICAL<5>;
    case 6: return KILN_VERTICAL<6>;
    case 7: return KILN_VERTICAL<7>;
    case 8: return KILN_VERTICAL<8>;
    default: return nullptr;
  }
}
#undef KILN_VERTICAL

// A row copied with its pixels in reverse order.
void mirror_row(const uint8_t* src, int width, int channels, uint8_t* dst) {
  if (channels == 3) {
    for (int i = 0; i < width; ++i) {
      const uint8_t* p = src + int64_t(width - 1 - i) * 3;
      dst[i * 3 + 0] = p[0];
      dst[i * 3 + 1] = p[1];
      dst[i * 3 + 2] = p[2];
    }
    return;
  }
  for (int i = 0; i < width; ++i)
    std::memcpy(dst + int64_t(i) * channels, src + int64_t(width - 1 - i) * channels, size_t(channels));
}

struct Scratch {
  Axis horizontal, vertical;
  std::vector<uint8_t> rows;  // the horizontal pass's output (8-bit, as PIL keeps it)
  std::vector<int32_t> acc;   // one output row of the vertical pass (long windows)
  std::vector<const uint8_t*> window;  // the rows one vertical window reads
};

}  // namespace

void resize_box_bilinear(const ImageView& src, double box_x, double box_y, double box_w, double box_h,
                         int valid_x0, int valid_y0, int valid_x1, int valid_y1, int out_w, int out_h, bool flip,
                         uint8_t* out, int64_t out_row_stride, PassOrder order) {
  const int C = src.channels;
  if (src.data == nullptr || src.width <= 0 || src.height <= 0 || C <= 0)
    fail("resize_box_bilinear: empty source image ({}x{}, {} channels)", src.width, src.height, C);
  if (src.row_stride < int64_t(src.width) * C)
    fail("resize_box_bilinear: source row stride {} is less than width {} x {} channels", src.row_stride,
         src.width, C);
  if (valid_x0 < 0 || valid_x0 >= valid_x1 || valid_x1 > src.width || valid_y0 < 0 || valid_y0 >= valid_y1 ||
      valid_y1 > src.height)
    fail("resize_box_bilinear: valid range [{}, {}) x [{}, {}) is empty or outside the {}x{} image", valid_x0,
         valid_x1, valid_y0, valid_y1, src.width, src.height);
  if (!std::isfinite(box_x) || !std::isfinite(box_y) || !std::isfinite(box_w) || !std::isfinite(box_h) ||
      !(box_w > 0) || !(box_h > 0))
    fail("resize_box_bilinear: source box ({}, {}, {}, {}) must be finite with a positive size", box_x, box_y, box_w,
         box_h);
  if (out_w <= 0 || out_h <= 0 || out == nullptr)
    fail("resize_box_bilinear: output size {}x{} must be positive", out_w, out_h);
  const int64_t out_row_bytes = int64_t(out_w) * C;
  if (out_row_stride < out_row_bytes)
    fail("resize_box_bilinear: output row stride {} is less than width {} x {} channels", out_row_stride, out_w, C);

  thread_local Scratch s;
  Axis& h = s.horizontal;
  Axis& v = s.vertical;
  compute_axis(box_x, box_w, valid_x0, valid_x1, out_w, flip, h);
  compute_axis(box_y, box_h, valid_y0, valid_y1, out_h, false, v);

  // Source rows the vertical pass reads.
  int row0, row1;
  if (v.copy) {
    row0 = v.offset;
    row1 = v.offset + out_h;
  } else {
    row0 = v.start[0];
    row1 = v.start[0] + v.count[0];
    for (int j = 1; j < out_h; ++j) {
      row0 = std::min(row0, v.start[j]);
      row1 = std::max(row1, v.start[j] + v.count[j]);
    }
  }
  auto src_row = [&](int y) { return src.data + int64_t(y) * src.row_stride; };
  const HorizontalFn fixed = h.copy ? nullptr : horizontal_fn(C, h.taps);
#if defined(__SSE2__) && !defined(KILN_RESIZE_SCALAR)
  if (fixed && (C == 3 || C == 4)) split_weight_pairs(h, out_w);
#endif
  const int scalar_from = src.width - h.taps;  // windows reaching the row's last pixel
  auto horizontal = [&](const uint8_t* row, uint8_t* dst) {
    if (fixed)
      fixed(row, h, out_w, scalar_from, dst);
    else
      horizontal_any(row, h, out_w, C, dst);
  };

  const VerticalFn vertical = v.copy ? nullptr : vertical_fn(v.taps);
  s.window.resize(size_t(v.copy ? 0 : v.taps));
  // Vertical output row j of the columns [col0, col0 + n / C), from rows `rows` (row index 0 at row0).
  auto vertical_row = [&](const uint8_t* rows, int64_t rows_stride, int j, int64_t n, uint8_t* dst) {
    for (int y = 0; y < v.taps; ++y) s.window[y] = rows + int64_t(v.start[j] + y - row0) * rows_stride;
    const int32_t* k = &v.weight[size_t(j) * v.ksize];
    if (vertical)
      vertical(s.window.data(), k, n, dst);
    else
      vertical_any(s.window.data(), k, v.taps, n, s.acc.data(), dst);
  };
  if (!vertical) s.acc.resize(size_t(std::max<int64_t>(out_row_bytes, int64_t(src.width) * C)));

  // Vertical pass first (Pillow 13's order for some shapes): into out_h rows of the source columns
  // the horizontal windows read, then the horizontal pass from those rows.
  if (order == PassOrder::VerticalFirst && !h.copy && !v.copy) {
    int col0 = h.start[0], col1 = h.start[0] + h.count[0];
    for (int i = 1; i < out_w; ++i) {
      col0 = std::min(col0, h.start[i]);
      col1 = std::max(col1, h.start[i] + h.count[i]);
    }
    const int64_t mid_bytes = int64_t(col1 - col0) * C;
    s.rows.resize(size_t(out_h) * size_t(mid_bytes));
    for (int i = 0; i < out_w; ++i) h.start[i] -= col0;  // relative to the intermediate rows
    const int mid_scalar_from = (col1 - col0) - h.taps;
    for (int j = 0; j < out_h; ++j) {
      uint8_t* mid = s.rows.data() + int64_t(j) * mid_bytes;
      vertical_row(src_row(row0) + int64_t(col0) * C, src.row_stride, j, mid_bytes, mid);
      uint8_t* dst = out + int64_t(j) * out_row_stride;
      if (fixed)
        fixed(mid, h, out_w, mid_scalar_from, dst);
      else
        horizontal_any(mid, h, out_w, C, dst);
    }
    return;
  }

  // Horizontal pass straight into the output when the vertical pass is a copy.
  if (v.copy) {
    for (int j = 0; j < out_h; ++j) {
      const uint8_t* row = src_row(row0 + j);
      uint8_t* dst = out + int64_t(j) * out_row_stride;
      if (!h.copy)
        horizontal(row, dst);
      else if (flip)
        mirror_row(row + int64_t(h.offset) * C, out_w, C, dst);
      else
        std::memcpy(dst, row + int64_t(h.offset) * C, size_t(out_row_bytes));
    }
    return;
  }

  // The intermediate rows [row0, row1): the source itself when the horizontal pass is a copy.
  const uint8_t* rows;
  int64_t rows_stride;
  if (h.copy && !flip) {
    rows = src_row(row0) + int64_t(h.offset) * C;
    rows_stride = src.row_stride;
  } else {
    s.rows.resize(size_t(row1 - row0) * size_t(out_row_bytes));
    for (int y = row0; y < row1; ++y) {
      uint8_t* dst = s.rows.data() + int64_t(y - row0) * out_row_bytes;
      if (h.copy)
        mirror_row(src_row(y) + int64_t(h.offset) * C, out_w, C, dst);
      else
        horizontal(src_row(y), dst);
    }
    rows = s.rows.data();
    rows_stride = out_row_bytes;
  }

  for (int j = 0; j < out_h; ++j) vertical_row(rows, rows_stride, j, out_row_bytes, out + int64_t(j) * out_row_stride);
}

PassOrder pillow13_pass_order(int in_w, int in_h, int out_w, int out_h) {
  const int64_t shrink_h = int64_t(in_h) - out_h, shrink_w = int64_t(in_w) - out_w;
  return shrink_h > 0 && shrink_h > 2 * shrink_w ? PassOrder::VerticalFirst : PassOrder::HorizontalFirst;
}

}  // namespace kiln
