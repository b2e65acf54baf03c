#include "ops/cbr/cbr_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

// Two per-channel sums over all rows. add_row(row, a, b) adds one row's contributions to the
// length-C double arrays a and b. Each chunk fills its own partials; chunks are then added in
// chunk order.
template <class AddRow>
void reduce_channels(int64_t rows, int64_t channels, double* a, double* b, AddRow add_row) {
  const Chunks chunks(rows, channels);
  std::vector<double> partial(chunks.count * 2 * channels, 0.0);
  parallel_for(chunks.count, [&](int64_t k) {
    double* pa = partial.data() + k * 2 * channels;
    for (int64_t m = chunks.begin(k); m < chunks.end(k); ++m) add_row(m, pa, pa + channels);
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

// Writes bit i of `bits` as y[i] > 0 for i in [0, n); `bits` starts on y[0]'s byte.
template <class T>
void pack_positive(const T* y, int64_t n, uint8_t* bits) {
  const int64_t full = n / 8;
  for (int64_t j = 0; j < full; ++j) {
    const T* v = y + 8 * j;
    uint8_t byte = 0;
    for (int b = 0; b < 8; ++b) byte |= static_cast<uint8_t>(v[b] > T(0)) << b;
    bits[j] = byte;
  }
  if (n % 8) {
    uint8_t byte = 0;
    for (int64_t b = 0; b < n % 8; ++b) byte |= static_cast<uint8_t>(y[8 * full + b] > T(0)) << b;
    bits[full] = byte;
  }
}

inline bool mask_bit(const uint8_t* bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

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
      const int64_t first = chunks.begin(k) * channels;  // a multiple of 8
      pack_positive(y + first, chunks.end(k) * channels - first, bits + first / 8);
    }
  });
}

}  // namespace

void cbr_mask_to_bytes(const uint8_t* bits, int64_t numel, uint8_t* bytes) {
  for (int64_t i = 0; i < numel; ++i) bytes[i] = mask_bit(bits, i) ? 1 : 0;
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
  reduce_channels(rows, channels, sum.data(), sq_sum.data(), [&](int64_t m, double* s, double* q) {
    const T* zr = z + m * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const double v = zr[c];
      s[c] += v;
      q[c] += v * v;
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

// Channels whose mask the backward reads into a local array before using it.
constexpr int64_t kMaskBlock = 256;

// dgamma, dbeta and dconv of CBR's backward (CBR.md), with `passed(i, c)` telling where the ReLU
// passed the gradient (element i, channel c).
template <class T, class Passed>
void cbr_bn_backward(const CbrBackwardTensors<T>& t, int64_t rows, int64_t channels, Passed passed) {
  const T* z = t.conv_out;
  const T* dy = t.dy;
  const T* mean = t.saved_mean;
  const T* inv_std = t.saved_inv_std;

  // Pass 1: dbeta = sum(dy * mask), dgamma = sum(dy * mask * xhat); xhat is recomputed.
  std::vector<double> dbeta(channels), dgamma(channels);
  // The mask multiplies instead of branching: a ReLU mask is as good as random, and a branch on it
  // mispredicted half the time (measured: most of the op's time). A masked element adds a zero,
  // which leaves every finite sum as it was. The mask of a block of channels is read first, so
  // the sums over the block vectorize.
  reduce_channels(rows, channels, dbeta.data(), dgamma.data(),
                  [&](int64_t m, double* db, double* dg) {
                    const int64_t base = m * channels;
                    const T *zr = z + base, *dyr = dy + base, *mu = mean, *is = inv_std;
                    const Passed pass = passed;
                    double on[kMaskBlock];
                    for (int64_t c0 = 0; c0 < channels; c0 += kMaskBlock) {
                      const int64_t len = std::min(kMaskBlock, channels - c0);
                      for (int64_t j = 0; j < len; ++j) on[j] = pass(base + c0 + j, c0 + j);
                      for (int64_t j = 0; j < len; ++j) {
                        const int64_t c = c0 + j;
                        const double gy = on[j] * static_cast<double>(dyr[c]);
                        const T xhat = (zr[c] - mu[c]) * is[c];
                        db[c] += gy;
                        dg[c] += gy * static_cast<double>(xhat);
                      }
                    }
                  });

  // Pass 2: dconv = gamma * inv_std * (g - dbeta / M - xhat * dgamma / M), g = dy * mask.
  std::vector<T> k_gy(channels), k_mean(channels), k_xhat(channels);
  const double count = static_cast<double>(rows);
  for (int64_t c = 0; c < channels; ++c) {
    const double a = static_cast<double>(t.gamma[c]) * static_cast<double>(inv_std[c]);
    k_gy[c] = static_cast<T>(a);
    k_mean[c] = static_cast<T>(a * dbeta[c] / count);
    k_xhat[c] = static_cast<T>(a * dgamma[c] / count);
    t.dbeta[c] = static_cast<T>(dbeta[c]);
    t.dgamma[c] = static_cast<T>(dgamma[c]);
  }
  const Chunks chunks(rows, channels);
  T* dconv = t.dconv;
  parallel_for(chunks.count, [&](int64_t k) {
    const T *mu = mean, *is = inv_std, *a = k_gy.data(), *b = k_mean.data(), *d = k_xhat.data();
    const Passed pass = passed;
    T on[kMaskBlock];
    for (int64_t m = chunks.begin(k); m < chunks.end(k); ++m) {
      const int64_t base = m * channels;
      const T *zr = z + base, *dyr = dy + base;
      T* out = dconv + base;
      for (int64_t c0 = 0; c0 < channels; c0 += kMaskBlock) {  // as in pass 1
        const int64_t len = std::min(kMaskBlock, channels - c0);
        for (int64_t j = 0; j < len; ++j) on[j] = static_cast<T>(pass(base + c0 + j, c0 + j));
        for (int64_t j = 0; j < len; ++j) {
          const int64_t c = c0 + j;
          const T gy = on[j] * dyr[c];
          const T xhat = (zr[c] - mu[c]) * is[c];
          out[c] = a[c] * gy - b[c] - d[c] * xhat;
        }
      }
    }
  });
}

}  // namespace

template <class T>
void cbr_backward(const ConvGeom& g, const CbrBackwardTensors<T>& t) {
  const int64_t rows = g.n * g.ho * g.wo, channels = g.k;
  // Where ReLU passed the gradient: the forward's bit, or, in a seam's producer, the same test the
  // apply makes (scale_shift_relu: y > 0 exactly where z * scale + shift > 0). One instantiation
  // each, so the common case's loops carry no test of which.
  if (const uint8_t* bits = t.bitmask) {
    cbr_bn_backward(t, rows, channels, [bits](int64_t i, int64_t) { return mask_bit(bits, i); });
  } else {
    const T *z = t.conv_out, *scale = t.scale, *shift = t.shift;
    cbr_bn_backward(t, rows, channels, [z, scale, shift](int64_t i, int64_t c) {
      const T v = z[i] * scale[c] + shift[c];
      return v > T(0);
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
