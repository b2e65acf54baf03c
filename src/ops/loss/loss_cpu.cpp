#include "ops/loss/loss_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/loss/totals_slots.h"

namespace kiln::cpu {
namespace {
// Logits per task: below this many a thread costs more than it saves (exp dominates).
constexpr int64_t kParallelElems = 1 << 13;
constexpr int64_t kNoRank = std::numeric_limits<int64_t>::max();  // a row whose label does not count
}  // namespace

template <class T>
double softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t N, int64_t C,
                             double label_smoothing, T* dlogits) {
  std::vector<double> row_loss(N);
  const double off_target = label_smoothing / static_cast<double>(C);
  const double on_target = 1.0 - label_smoothing + off_target;
  const double inv_n = 1.0 / static_cast<double>(N);
  // Rows are independent; their losses are added in row order below.
  const int64_t rows_per_task = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(C, 1));
  parallel_blocks(N, rows_per_task, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const T* z = logits + n * C;
      double max = z[0];
      for (int64_t c = 1; c < C; ++c) max = std::max(max, static_cast<double>(z[c]));
      double sum_exp = 0.0, sum_shifted = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        double shifted = z[c] - max;
        sum_exp += std::exp(shifted);
        sum_shifted += shifted;
      }
      double log_sum = std::log(sum_exp);
      int64_t label = labels[n];
      // -sum_c target_c * (shifted_c - log_sum), with sum_c target_c = 1.
      double target_dot_shifted = (1.0 - label_smoothing) * (z[label] - max) + off_target * sum_shifted;
      row_loss[n] = log_sum - target_dot_shifted;
      if (dlogits) {
        T* d = dlogits + n * C;
        for (int64_t c = 0; c < C; ++c) {
          double p = std::exp(z[c] - max - log_sum);
          double target = c == label ? on_target : off_target;
          d[c] = static_cast<T>((p - target) * inv_n);
        }
      }
    }
  });
  double total = 0.0;
  for (double l : row_loss) total += l;
  return total * inv_n;
}

int64_t find_bad_label(const int32_t* labels, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n)
    if (labels[n] < 0 || labels[n] >= C) return n;
  return -1;
}

template <class T>
int64_t label_rank(const T* z, int64_t C, int64_t label) {
  const T v = z[label];
  int64_t rank = 0;
  if (v == v) {  // a number: NaN is neither greater than it nor equal to it
    for (int64_t c = 0; c < label; ++c) rank += z[c] >= v;
    for (int64_t c = label + 1; c < C; ++c) rank += z[c] > v;
  } else {  // NaN: every number is greater, and NaN at a smaller class is equal
    rank = label;
    for (int64_t c = label + 1; c < C; ++c) rank += z[c] == z[c];
  }
  return rank;
}

template <class T>
TopHits count_correct(const T* logits, const int32_t* labels, int64_t N, int64_t C) {
  // Each row's rank (the largest int64, never a hit, for labels outside [0, C)); integer sums.
  std::vector<int64_t> rank(N);
  const int64_t rows_per_task = std::max<int64_t>(1, kParallelElems / std::max<int64_t>(C, 1));
  parallel_blocks(N, rows_per_task, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t label = labels[n];
      rank[n] = label < 0 || label >= C ? kNoRank : label_rank(logits + n * C, C, label);
    }
  });
  TopHits hits;
  for (int64_t r : rank) hits.top1 += r < 1, hits.top5 += r < kTopK;
  return hits;
}

#define KILN_INSTANTIATE_LOSS(T)                                                              \
  template double softmax_cross_entropy<T>(const T*, const int32_t*, int64_t, int64_t, double, \
                                           T*);                                               \
  template int64_t label_rank<T>(const T*, int64_t, int64_t);                                 \
  template TopHits count_correct<T>(const T*, const int32_t*, int64_t, int64_t);
KILN_INSTANTIATE_LOSS(float)
KILN_INSTANTIATE_LOSS(double)
#undef KILN_INSTANTIATE_LOSS

}  // namespace kiln::cpu
