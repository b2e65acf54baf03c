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

// Number of rows whose top-1 class (first maximum on ties) equals the label; labels outside
// [0, C) never count.
template <class T>
int64_t count_correct(const T* logits, const int32_t* labels, int64_t N, int64_t C);

}  // namespace kiln::cpu
