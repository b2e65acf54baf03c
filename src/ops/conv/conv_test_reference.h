#pragma once
// Float64 references of a convolution for the tests of the hand-written CUDA kernels
// (wgrad_direct_gpu_test.cpp, few_channel_conv_gpu_test.cpp, conv_sums_cutlass_gpu_test.cpp) and of
// the oneDNN CPU kernels
// (conv_onednn_test.cpp), with each result's sum of |terms|:
// the scale its rounding error is bounded against, and the comparison both tests make. `swap_rs`
// reads the filter transposed, a wrong indexing a test's comparison must reject. Layouts as
// conv_shape_cuda.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/conv/conv_shape_cuda.h"

namespace kiln::conv_test {

using cuda::ConvShape;

// A square filter of r x r, with ho and wo filled in.
inline ConvShape shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t stride,
                       int64_t pad, DType io) {
  ConvShape s{n, h, w, c, k, r, r, stride, pad, 0, 0, io};
  s.ho = (h + 2 * pad - r) / stride + 1, s.wo = (w + 2 * pad - r) / stride + 1;
  return s;
}

inline std::string label(const ConvShape& s) {
  return std::string(dtype_name(s.io)) + " n=" + std::to_string(s.n) + " " + std::to_string(s.h) + "x" +
         std::to_string(s.w) + " c=" + std::to_string(s.c) + " k=" + std::to_string(s.k) + " " +
         std::to_string(s.r) + "x" + std::to_string(s.s) + " stride " + std::to_string(s.stride) + " pad " +
         std::to_string(s.pad);
}

// Calls f(y, w, w_transposed, x) with the flat indices of each product of a direct convolution
// whose input tap lies inside the image: the output, the filter tap, the same tap of the filter
// transposed in r and s (the wrong indexing the comparisons must reject; square filters), and the
// input.
template <class F>
inline void for_each_term(const ConvShape& s, F&& f) {
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t ho = 0; ho < s.ho; ++ho)
      for (int64_t wo = 0; wo < s.wo; ++wo)
        for (int64_t k = 0; k < s.k; ++k)
          for (int64_t r = 0; r < s.r; ++r)
            for (int64_t q = 0; q < s.s; ++q) {
              const int64_t hi = ho * s.stride - s.pad + r, wi = wo * s.stride - s.pad + q;
              if (hi < 0 || hi >= s.h || wi < 0 || wi >= s.w) continue;
              for (int64_t c = 0; c < s.c; ++c)
                f(size_t(((n * s.ho + ho) * s.wo + wo) * s.k + k), size_t(((k * s.r + r) * s.s + q) * s.c + c),
                  size_t(((k * s.r + q) * s.s + r) * s.c + c), size_t(((n * s.h + hi) * s.w + wi) * s.c + c));
            }
}

// y = conv(x, w) and, per output, the sum of |x * w| over its terms.
inline void fprop_reference(const ConvShape& s, const std::vector<double>& x, const std::vector<double>& w,
                            bool swap_rs, std::vector<double>& y, std::vector<double>& scale) {
  y.assign(size_t(s.n * s.ho * s.wo * s.k), 0.0);
  scale.assign(y.size(), 0.0);
  for_each_term(s, [&](size_t yi, size_t wi, size_t wti, size_t xi) {
    const double term = x[xi] * w[swap_rs ? wti : wi];
    y[yi] += term, scale[yi] += std::fabs(term);
  });
}

// dW and, per weight, the sum of |dY * X| over its terms.
inline void wgrad_reference(const ConvShape& s, const std::vector<double>& x, const std::vector<double>& dy,
                            bool swap_rs, std::vector<double>& dw, std::vector<double>& scale) {
  dw.assign(size_t(s.k * s.r * s.s * s.c), 0.0);
  scale.assign(dw.size(), 0.0);
  for_each_term(s, [&](size_t yi, size_t wi, size_t wti, size_t xi) {
    const double term = dy[yi] * x[xi];
    const size_t o = swap_rs ? wti : wi;
    dw[o] += term, scale[o] += std::fabs(term);
  });
}

// dX and, per input element, the sum of |dY * W| over its terms.
inline void dgrad_reference(const ConvShape& s, const std::vector<double>& dy, const std::vector<double>& w,
                            bool swap_rs, std::vector<double>& dx, std::vector<double>& scale) {
  dx.assign(size_t(s.n * s.h * s.w * s.c), 0.0);
  scale.assign(dx.size(), 0.0);
  for_each_term(s, [&](size_t yi, size_t wi, size_t wti, size_t xi) {
    const double term = dy[yi] * w[swap_rs ? wti : wi];
    dx[xi] += term, scale[xi] += std::fabs(term);
  });
}

// How far `got` is from `want`, each difference relative to its scale: the worst ratio, and how
// many elements miss `limit` (a NaN, an element never written, counts as a miss).
struct Miss {
  double worst = 0;
  size_t bad = 0, first = 0;
};

inline Miss relative_miss(const std::vector<double>& got, const std::vector<double>& want,
                          const std::vector<double>& scale, double limit) {
  Miss m;
  for (size_t o = 0; o < want.size(); ++o) {
    const double ratio = std::fabs(got[o] - want[o]) / std::max(scale[o], 1e-30);
    if (!(ratio <= limit) && m.bad++ == 0) m.first = o;
    if (ratio > m.worst) m.worst = ratio;
  }
  return m;
}

// Compares `got` with the reference within `bound` (relative to each result's scale) and checks
// that the same bound rejects the transposed filter's result `wrong` (which differs from the
// right one only where r > 1).
inline void expect_matches(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                           const std::vector<double>& scale, const std::vector<double>& wrong, const ConvShape& s,
                           double bound) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const Miss m = relative_miss(got, want, scale, bound);
  EXPECT_EQ(m.bad, 0u) << what << ": " << m.bad << " of " << want.size() << " miss the bound " << bound
                       << " (worst " << m.worst << "), first at " << m.first << ": got " << got[m.first]
                       << ", want " << want[m.first];
  if (s.r > 1) {
    // The comparison would catch a transposed filter.
    EXPECT_GT(relative_miss(wrong, want, scale, bound).worst, bound) << what << ": transposed filter";
  }
}

// Checks the per-channel sum and sum of squares a kernel took of its own output `y` (rows x k, as
// stored) against float64 sums of that same y. The bound: fp32 accumulation of at most 128 rows
// per partial ((128 - 1) * 2^-24 < 1e-5 of the sum of |terms|), the partials added in fp64 and
// rounded to fp32; the 1e-6 floor covers a channel whose sum is near 0. The bound must tell
// channels apart: each channel's sum against its neighbour's must miss somewhere.
inline void expect_channel_sums(const std::vector<double>& y, size_t k, const std::vector<double>& got_sum,
                                const std::vector<double>& got_sq) {
  ASSERT_EQ(got_sum.size(), k);
  ASSERT_EQ(got_sq.size(), k);
  std::vector<double> want_sum(k, 0.0), abs_sum(k, 0.0), want_sq(k, 0.0);
  for (size_t i = 0; i < y.size(); ++i) {
    want_sum[i % k] += y[i];
    abs_sum[i % k] += std::fabs(y[i]);
    want_sq[i % k] += y[i] * y[i];
  }
  auto sum_ok = [&](size_t ch, double want_ch) { return std::fabs(got_sum[ch] - want_ch) <= 1e-5 * abs_sum[ch] + 1e-6; };
  size_t shifted_misses = 0;
  for (size_t ch = 0; ch < k; ++ch) {
    EXPECT_TRUE(sum_ok(ch, want_sum[ch])) << "sum of channel " << ch << ": got " << got_sum[ch] << ", want "
                                          << want_sum[ch];
    EXPECT_TRUE(std::fabs(got_sq[ch] - want_sq[ch]) <= 1e-5 * want_sq[ch] + 1e-6)
        << "sum of squares of channel " << ch << ": got " << got_sq[ch] << ", want " << want_sq[ch];
    shifted_misses += !sum_ok(ch, want_sum[(ch + 1) % k]);
  }
  EXPECT_GT(shifted_misses, 0u) << "the sums' bound does not tell channels apart";
}

}  // namespace kiln::conv_test
