#pragma once
// Softmax cross-entropy on the CPU, with PyTorch's label smoothing:
//   target = (1 - ls) * onehot(label) + ls / C
//   loss   = mean over the batch of -sum_c target_c * log_softmax(logits)_c
//   dloss/dlogits = (softmax - target) / N
// Each row is computed in double after subtracting its max, so large logits do not overflow.
#include <cstdint>

namespace kiln::cpu {

// Returns the loss. logits (N, C), labels (N) must lie in [0, C) (check with
// find_bad_label first). dlogits (N, C) may be nullptr when only the loss is wanted.
// Row losses are added in row order, so the result does not depend on the thread count.
template <class T>
double softmax_cross_entropy(const T* logits, const int32_t* labels, int64_t N, int64_t C,
                             double label_smoothing, T* dlogits);

// Index of the first label outside [0, C), or -1 when all are valid.
int64_t find_bad_label(const int32_t* labels, int64_t N, int64_t C);

// The rank of class `label` in row z[0, C): the logits greater than z[label] plus those equal to
// it at a smaller class, NaN ordering below every number and equal to NaN (loss_contract.h).
// label must lie in [0, C).
template <class T>
int64_t label_rank(const T* z, int64_t C, int64_t label);

// COUNT_CORRECT's counts: rows whose label ranks below 1 (top-1: the first largest logit) and
// below 5 (top-5; every row with fewer than 5 classes); labels outside [0, C) never count.
struct TopHits {
  int64_t top1 = 0, top5 = 0;
};
template <class T>
TopHits count_correct(const T* logits, const int32_t* labels, int64_t N, int64_t C);

}  // namespace kiln::cpu
