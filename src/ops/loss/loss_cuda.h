#pragma once
// Softmax cross-entropy and the top-1 and top-5 counts on the GPU, with the CPU kernels'
// definitions (loss_cpu.h): logits are (n, classes) rows of dtype F32, F16 or BF16, labels one
// int32 per row; arithmetic is fp32. Every function only enqueues work on `stream` and throws
// kiln::Error naming `where` on bad arguments or CUDA errors.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

// loss[0] (fp32) = the mean over rows of the label-smoothed cross-entropy (PyTorch's
// definition: target = (1 - s) * onehot(label) + s / classes); dlogits (nullable, the logits'
// dtype) = (softmax(row) - target) / n, times *loss_scale (device memory; nullptr: 1) before the
// rounding to the dtype. `row_loss` is scratch for n floats: each row's loss is
// written there and a single block then adds them in a fixed order, so the loss is bitwise
// reproducible. A label outside [0, classes) cannot raise an error without stopping the stream
// to read it back: its row's loss, hence the loss, and its row of dlogits become NaN instead.
void softmax_cross_entropy(DType dtype, const void* logits, const int32_t* labels, int64_t n, int64_t classes,
                           float label_smoothing, float* loss, void* dlogits, float* row_loss, cudaStream_t stream,
                           const std::string& where, const float* loss_scale = nullptr);

// correct[kTop1Hits] and correct[kTop5Hits] (int32, totals_slots.h) = the numbers of rows whose
// label ranks below 1 and below 5, as the CPU's count_correct ranks it: the logits greater than
// the label's, plus those equal to it at a smaller class, NaN ordering below every number and
// equal to NaN; labels outside [0, classes) never count. Exact and deterministic (integer sums).
void count_correct(DType dtype, const void* logits, const int32_t* labels, int64_t n, int64_t classes,
                   int32_t* correct, cudaStream_t stream, const std::string& where);

// ACCUMULATE_TOTALS (loss_contract.h), one thread: adds *loss (nullptr when evaluating) and the
// top-1 and top-5 hits correct[0..1] to totals, counts the run, and records the first non-finite
// loss at *step (the step's count in device memory, as a replayed CUDA Graph sees it).
void accumulate_totals(const float* loss, const int32_t* correct, const int64_t* step, double* totals,
                       cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
