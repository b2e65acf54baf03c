#include "ops/cbr/cbr_cpu.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/mask_bits.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// Rows (N * Ho * Wo positions) per unit of parallel work: about 16K elements, so a chunk stays
// in cache between its reads, and a multiple of 8 rows, so every chunk starts on a mask byte
// and no two threads write the same mask byte. Depends only on the channel count, never on
// the thread count, which keeps the chunked reductions bitwise reproducible.
int64_t rows_per_chunk(int64_t channels) {
  int64_t rows = std::max<int64_t>(1, 16384 / channels);
  return (rows + 7) / 8 * 8;
}

struct Chunks {
  int64_t rows, per_chunk, count;
  explicit Chunks(int64_t rows_, int64_t channels)
      : rows(rows_),
        per_chunk(rows_per_chunk(channels)),
        count((rows_ + per_chunk - 1) / per_chunk) {}
  int64_t begin(int64_t k) const { return k * per_chunk; }
  int64_t end(int64_t k) const { return std::min(rows, (k + 1) * per_chunk); }
};

// Two per-channel sums over all rows. add_rows(m0, m1, a, b) adds the contributions of rows
// [m0, m1) (one chunk) to the length-C double arrays a and b. Each chunk fills its own partials;
// chunks are then added in chunk order.
template <class AddRows>
void reduce_channels(int64_t rows, int64_t channels, double* a, double* b, AddRows add_rows) {
  const Chunks chunks(rows, channels);
  std::vector<double> partial(chunks.count * 2 * channels, 0.0);
  parallel_for(chunks.count, [&](int64_t k) {
    double* pa = partial.data() + k * 2 * channels;
    add_rows(chunks.begin(k), chunks.end(k), pa, pa + channels);
  });
  std::fill(a, a + channels, 0.0);
  std::fill(b, b + channels, 0.0);
  for (int64_t k = 0; k < chunks.count; ++k) {
    const double* pa = partial.data() + k * 2 * channels;
    for (int64_t c = 0; c < channels; ++c) {
      a[c] += pa[c];
      b[c] += pa[channels + c];
    }
  }
}

// Stage 3 (and the whole of inference after the conv): y = relu(z * scale + shift), with the
// bit mask when `bits` is given. y may be z (in place).
template <class T>
void scale_shift_relu(const T* z, int64_t rows, int64_t channels, const T* scale, const T* shift,
                      T* y, uint8_t* bits) {
  const Chunks chunks(rows, channels);
  parallel_for(chunks.count, [&](int64_t k) {
    for (int64_t m = chunks.begin(k); m < chunks.end(k); ++m) {
      const T* zr = z + m * channels;
      T* yr = y + m * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const T v = zr[c] * scale[c] + shift[c];
        yr[c] = v > T(0) ? v : T(0);
      }
    }
    // y > 0 exactly where the pre-activation is > 0, so the mask can be read back from y.
    if (bits) {
      const int64_t first = chunks.begin(k) * channels, n = chunks.end(k) * channels - first;
      pack_positive(y + first, n, bits, first);  // first is a multiple of 8
    }
  });
}

}  // namespace

void cbr_mask_to_bytes(const uint8_t* bits, int64_t numel, uint8_t* bytes) {
  unpack_bits(bits, 0, numel, bytes);
}

// The producer's own apply (scale_shift_relu), so the consumer convolves the values the producer
// would have written.
template <class T>
const T* cbr_seam_input(const ConvGeom& g, const T* x, const T* in_scale, const T* in_shift, T* x_applied) {
  if (!in_scale) return x;
  scale_shift_relu(x, g.n * g.h * g.w, g.c, in_scale, in_shift, x_applied, static_cast<uint8_t*>(nullptr));
  return x_applied;
}

template <class T>
void cbr_forward(const ConvGeom& g, const CbrForwardTensors<T>& t, double eps, double momentum) {
  const int64_t rows = g.n * g.ho * g.wo, channels = g.k;
  conv_fwd<T>(g, cbr_seam_input(g, t.x, t.in_scale, t.in_shift, t.x_applied), t.w, nullptr, t.conv_out);

  // Stage 1: statistics.
  std::vector<double> sum(channels), sq_sum(channels);
  const T* z = t.conv_out;
  reduce_channels(rows, channels, sum.data(), sq_sum.data(), [&](int64_t m0, int64_t m1, double* s, double* q) {
    for (int64_t m = m0; m < m1; ++m) {
      const T* zr = z + m * channels;
      for (int64_t c = 0; c < channels; ++c) {
        const double v = zr[c];
        s[c] += v;
        q[c] += v * v;
      }
    }
  });

  // Stage 2: finalize (length-C, in double).
  std::vector<T> scale(channels), shift(channels);
  const double count = static_cast<double>(rows);
  const double unbias = count > 1 ? count / (count - 1) : 1.0;
  for (int64_t c = 0; c < channels; ++c) {
    const double mean = sum[c] / count;
    // E[z^2] - mean^2 can round below zero when the variance is tiny next to the mean.
    const double var = std::max(sq_sum[c] / count - mean * mean, 0.0);
    const double inv_std = 1.0 / std::sqrt(var + eps);
    const double gamma = t.gamma[c];
    t.saved_mean[c] = static_cast<T>(mean);
    t.saved_inv_std[c] = static_cast<T>(inv_std);
    scale[c] = static_cast<T>(gamma * inv_std);
    shift[c] = static_cast<T>(t.beta[c] - gamma * mean * inv_std);
    t.running_mean[c] = static_cast<T>((1 - momentum) * t.running_mean[c] + momentum * mean);
    t.running_var[c] = static_cast<T>((1 - momentum) * t.running_var[c] + momentum * var * unbias);
  }

  // Stage 3: apply + ReLU + bit mask, or, in a seam's producer, the scale and shift its consumers
  // apply.
  if (t.y) {
    scale_shift_relu(z, rows, channels, scale.data(), shift.data(), t.y, t.bitmask);
  } else {
    std::copy(scale.begin(), scale.end(), t.scale);
    std::copy(shift.begin(), shift.end(), t.shift);
  }
}

namespace {

// Row kernels of CBR's backward. The length comes by value and the mask is a select on bits
// (keep_if, core/mask_bits.h), not a branch: a byte store may alias a bound read through a
// reference, and either would stop the vectorizer.
template <class T>
void bn_backward_sums_row(const T* z, const T* dy, const uint8_t* on, const T* mean, const T* inv_std,
                          int64_t n, double* dbeta, double* dgamma) {
  for (int64_t c = 0; c < n; ++c) {
    const double gy = keep_if(on[c], static_cast<double>(dy[c]));
    const T xhat = (z[c] - mean[c]) * inv_std[c];
    dbeta[c] += gy;
    dgamma[c] += gy * static_cast<double>(xhat);
  }
}

template <class T>
void bn_backward_apply_row(const T* z, const T* dy, const uint8_t* on, const T* mean, const T* inv_std,
                           const T* k_gy, const T* k_mean, const T* k_xhat, int64_t n, T* dconv) {
  for (int64_t c = 0; c < n; ++c) {
    const T gy = keep_if(on[c], dy[c]);
    const T xhat = (z[c] - mean[c]) * inv_std[c];
    dconv[c] = k_gy[c] * gy - k_mean[c] - k_xhat[c] * xhat;
  }
}

// on[c] = z * scale + shift > 0: the seam producer's mask, the test its apply makes.
template <class T>
void passed_row(const T* z, const T* scale, const T* shift, int64_t n, uint8_t* on) {
  for (int64_t c = 0; c < n; ++c) on[c] = z[c] * scale[c] + shift[c] > T(0);
}

// dgamma, dbeta and dconv of CBR's backward (docs/cbr.md). rows_passed(m0, m1, on) writes, for rows
// [m0, m1) of one chunk, 1 in on[(m - m0) * C + c] where the ReLU passed channel c's gradient of
// row m, else 0: a chunk's flags at once, so the unpacking runs over whole chunks, not row by row.
template <class T, class RowsPassed>
void cbr_bn_backward(const CbrBackwardTensors<T>& t, int64_t rows, int64_t channels, RowsPassed rows_passed) {
  const T* z = t.conv_out;
  const T* dy = t.dy;
  const T* mean = t.saved_mean;
  const T* inv_std = t.saved_inv_std;
  const int64_t C = channels;

  // Pass 1: dbeta = sum(dy * mask), dgamma = sum(dy * mask * xhat); xhat is recomputed.
  std::vector<double> dbeta(C), dgamma(C);
  const Chunks chunks(rows, C);
  reduce_channels(rows, C, dbeta.data(), dgamma.data(), [&](int64_t m0, int64_t m1, double* db, double* dg) {
    const std::unique_ptr<uint8_t[]> passed(new uint8_t[size_t(chunks.per_chunk * C)]);
    rows_passed(m0, m1, passed.get());
    for (int64_t m = m0; m < m1; ++m)
      bn_backward_sums_row(z + m * C, dy + m * C, passed.get() + (m - m0) * C, mean, inv_std, C, db, dg);
  });

  // Pass 2: dconv = gamma * inv_std * (g - dbeta / M - xhat * dgamma / M), g = dy * mask.
  std::vector<T> k_gy(C), k_mean(C), k_xhat(C);
  const double count = static_cast<double>(rows);
  for (int64_t c = 0; c < C; ++c) {
    const double a = static_cast<double>(t.gamma[c]) * static_cast<double>(inv_std[c]);
    k_gy[c] = static_cast<T>(a);
    k_mean[c] = static_cast<T>(a * dbeta[c] / count);
    k_xhat[c] = static_cast<T>(a * dgamma[c] / count);
    t.dbeta[c] = static_cast<T>(dbeta[c]);
    t.dgamma[c] = static_cast<T>(dgamma[c]);
  }
  parallel_for(chunks.count, [&](int64_t k) {
    const int64_t m0 = chunks.begin(k), m1 = chunks.end(k);
    const std::unique_ptr<uint8_t[]> passed(new uint8_t[size_t(chunks.per_chunk * C)]);
    rows_passed(m0, m1, passed.get());
    for (int64_t m = m0; m < m1; ++m)
      bn_backward_apply_row(z + m * C, dy + m * C, passed.get() + (m - m0) * C, mean, inv_std, k_gy.data(),
                            k_mean.data(), k_xhat.data(), C, t.dconv + m * C);
  });
}

}  // namespace

template <class T>
void cbr_backward(const ConvGeom& g, const CbrBackwardTensors<T>& t) {
  const int64_t rows = g.n * g.ho * g.wo, channels = g.k;
  // Where ReLU passed the gradient: the forward's bits, or, in a seam's producer, the same test
  // the apply makes (scale_shift_relu: y > 0 exactly where z * scale + shift > 0).
  if (const uint8_t* bits = t.bitmask) {
    cbr_bn_backward(t, rows, channels, [bits, channels](int64_t m0, int64_t m1, uint8_t* on) {
      unpack_bits(bits, m0 * channels, (m1 - m0) * channels, on);
    });
  } else {
    const T *z = t.conv_out, *scale = t.scale, *shift = t.shift;
    cbr_bn_backward(t, rows, channels, [z, scale, shift, channels](int64_t m0, int64_t m1, uint8_t* on) {
      for (int64_t m = m0; m < m1; ++m) passed_row(z + m * channels, scale, shift, channels, on + (m - m0) * channels);
    });
  }

  // wgrad reads x before dgrad may overwrite it (dx can share x's storage).
  conv_wgrad<T>(g, t.dconv, cbr_seam_input(g, t.x, t.in_scale, t.in_shift, t.x_applied), t.dw, nullptr);
  if (t.dx) conv_dgrad<T>(g, t.dconv, t.w, t.dx);
}

template <class T>
void cbr_inference(const ConvGeom& g, const T* x, const T* w, const T* gamma, const T* beta,
                   const T* running_mean, const T* running_var, double eps, T* y) {
  const int64_t rows = g.n * g.ho * g.wo, channels = g.k;
  conv_fwd<T>(g, x, w, nullptr, y);
  std::vector<T> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double s =
        static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(running_var[c]) + eps);
    scale[c] = static_cast<T>(s);
    shift[c] = static_cast<T>(beta[c] - running_mean[c] * s);
  }
  scale_shift_relu(y, rows, channels, scale.data(), shift.data(), y,
                   static_cast<uint8_t*>(nullptr));
}

#define KILN_CBR_INSTANTIATE(T)                                                               \
  template const T* cbr_seam_input<T>(const ConvGeom&, const T*, const T*, const T*, T*);     \
  template void cbr_forward<T>(const ConvGeom&, const CbrForwardTensors<T>&, double, double); \
  template void cbr_backward<T>(const ConvGeom&, const CbrBackwardTensors<T>&);               \
  template void cbr_inference<T>(const ConvGeom&, const T*, const T*, const T*, const T*,     \
                                 const T*, const T*, double, T*);
KILN_CBR_INSTANTIATE(float)
KILN_CBR_INSTANTIATE(double)
#undef KILN_CBR_INSTANTIATE

}  // namespace kiln::cpu
