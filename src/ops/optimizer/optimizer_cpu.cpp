#include "ops/optimizer/optimizer_cpu.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace kiln {
namespace cpu {

namespace {
// Elements per task: below this many one thread finishes before another would wake.
constexpr int64_t kTaskElems = 1 << 15;

// A piece of one LARS segment, the unit of its parallel loops.
struct Piece {
  size_t segment;
  int64_t begin, end;
};

// The segments cut into pieces of `size` elements; the plain ones (no norms) only `with_plain`.
std::vector<Piece> pieces_of(const std::vector<LarsSegment>& segments, int64_t size, bool with_plain) {
  std::vector<Piece> pieces;
  for (size_t s = 0; s < segments.size(); ++s) {
    const LarsSegment& seg = segments[s];
    if (seg.plain && !with_plain) continue;
    for (int64_t b = seg.offset; b < seg.offset + seg.length; b += size)
      pieces.push_back({s, b, std::min(b + size, seg.offset + seg.length)});
  }
  return pieces;
}
}  // namespace

template <class T>
void sgd_update(int64_t n, const T* grad, T* param, T* momentum_buf, const SgdHyper& h) {
  const T lr = static_cast<T>(h.lr), mom = static_cast<T>(h.momentum),
          wd = static_cast<T>(h.weight_decay), unscale = static_cast<T>(h.unscale);
  const bool use_buf = h.momentum != 0, decay = h.weight_decay != 0, nesterov = h.nesterov;
  parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      T g = grad[i] * unscale;
      if (decay) g += wd * param[i];
      if (use_buf) {
        const T buf = mom * momentum_buf[i] + g;
        momentum_buf[i] = buf;
        g = nesterov ? g + mom * buf : buf;
      }
      param[i] -= lr * g;
    }
  });
}

template <class T>
void adamw_update(int64_t n, const T* grad, T* param, T* m, T* v, const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  const T keep = static_cast<T>(1 - h.lr * h.weight_decay);
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2);
  const T one_minus_b1 = static_cast<T>(1 - h.beta1), one_minus_b2 = static_cast<T>(1 - h.beta2);
  const T step_size = static_cast<T>(h.lr / (1 - std::pow(h.beta1, t)));
  const T bc2_sqrt = static_cast<T>(std::sqrt(1 - std::pow(h.beta2, t)));
  const T eps = static_cast<T>(h.eps), unscale = static_cast<T>(h.unscale);
  parallel_blocks(n, kTaskElems, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const T g = grad[i] * unscale;
      const T mi = b1 * m[i] + one_minus_b1 * g;
      const T vi = b2 * v[i] + one_minus_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const T denom = std::sqrt(vi) / bc2_sqrt + eps;
      param[i] = param[i] * keep - step_size * (mi / denom);
    }
  });
}

template <class T>
void lars_update(const std::vector<LarsSegment>& segments, const T* grad, T* param, T* momentum_buf,
                 const LarsHyper& h) {
  const T lr = static_cast<T>(h.lr), mom = static_cast<T>(h.momentum), wd = static_cast<T>(h.weight_decay),
          eta = static_cast<T>(h.trust_coefficient), unscale = static_cast<T>(h.unscale);
  // Sums of squares of w and g, per piece of each tensor that takes a trust ratio; the pieces of a
  // tensor are then added in order.
  const std::vector<Piece> norm_pieces = pieces_of(segments, kTaskElems, false);
  std::vector<T> w_squares(norm_pieces.size()), g_squares(norm_pieces.size());
  parallel_for(int64_t(norm_pieces.size()), [&](int64_t i) {
    // kLanes running sums, element e in lane e % kLanes, added in lane order at the end: shorter
    // chains of rounding than one sum, and independent ones the compiler may vectorize.
    constexpr int kLanes = 8;
    T w2[kLanes] = {}, g2[kLanes] = {};
    const Piece& piece = norm_pieces[size_t(i)];
    for (int64_t e = piece.begin; e < piece.end; ++e) {
      const T g = grad[e] * unscale;
      w2[e % kLanes] += param[e] * param[e];
      g2[e % kLanes] += g * g;
    }
    for (int lane = 1; lane < kLanes; ++lane) w2[0] += w2[lane], g2[0] += g2[lane];
    w_squares[size_t(i)] = w2[0], g_squares[size_t(i)] = g2[0];
  });
  std::vector<T> w_total(segments.size(), T(0)), g_total(segments.size(), T(0));
  for (size_t i = 0; i < norm_pieces.size(); ++i) {
    w_total[norm_pieces[i].segment] += w_squares[i];
    g_total[norm_pieces[i].segment] += g_squares[i];
  }
  std::vector<T> trust(segments.size(), T(1));
  for (size_t s = 0; s < segments.size(); ++s) {
    const T w_norm = std::sqrt(w_total[s]), g_norm = std::sqrt(g_total[s]);
    if (!segments[s].plain && w_norm > 0 && g_norm > 0) trust[s] = eta * w_norm / (g_norm + wd * w_norm);
  }
  const std::vector<Piece> update_pieces = pieces_of(segments, kTaskElems, true);
  parallel_for(int64_t(update_pieces.size()), [&](int64_t i) {
    const Piece& piece = update_pieces[size_t(i)];
    if (segments[piece.segment].plain) {
      for (int64_t e = piece.begin; e < piece.end; ++e) {
        const T v = mom * momentum_buf[e] + grad[e] * unscale;
        momentum_buf[e] = v;
        param[e] -= lr * v;
      }
      return;
    }
    const T t = trust[piece.segment];
    for (int64_t e = piece.begin; e < piece.end; ++e) {
      const T d = grad[e] * unscale + wd * param[e];
      const T v = mom * momentum_buf[e] + t * d;
      momentum_buf[e] = v;
      param[e] -= lr * v;
    }
  });
}

template void sgd_update<float>(int64_t, const float*, float*, float*, const SgdHyper&);
template void sgd_update<double>(int64_t, const double*, double*, double*, const SgdHyper&);
template void adamw_update<float>(int64_t, const float*, float*, float*, float*, const AdamWHyper&);
template void adamw_update<double>(int64_t, const double*, double*, double*, double*,
                                   const AdamWHyper&);
template void lars_update<float>(const std::vector<LarsSegment>&, const float*, float*, float*, const LarsHyper&);
template void lars_update<double>(const std::vector<LarsSegment>&, const double*, double*, double*,
                                  const LarsHyper&);

}  // namespace cpu
}  // namespace kiln
