#pragma once
// The tensor checks the CPU and CUDA loss ops share (loss_ops_cpu.cpp, loss_ops_cuda.cpp); `who`
// names the op in the message.
#include <cstdint>
#include <string>

#include "kiln/error.h"
#include "ops/loss/loss_contract.h"
#include "runtime/op_call.h"

namespace kiln::loss {

struct Rows {
  int64_t n, classes;
};

// Logits (N, classes) and one I32 label per row.
inline Rows logits_and_labels(const std::string& who, const TensorArg& logits, const TensorArg& labels) {
  const Shape& s = logits.shape();
  if (s.size() != 2 || s[0] < 1 || s[1] < 1)
    fail("{}: logits have shape {}, expected (N, classes); flatten and add a Linear layer before the loss", who,
         shape_str(s));
  if (labels.dtype() != DType::I32 || labels.numel() != s[0])
    fail("{}: labels are {} {} but {} I32 class indices are needed (one per logits row)", who,
         dtype_name(labels.dtype()), shape_str(labels.shape()), s[0]);
  return {s[0], s[1]};
}

// COUNT_CORRECT's hit counts: I32 [kCorrectSlots] (top-1, top-5).
inline void expect_correct(const std::string& who, const TensorArg& correct) {
  if (correct.numel() != kCorrectSlots || correct.dtype() != DType::I32)
    fail("{}: correct tensor is {} {}, expected I32 [{}] (top-1 and top-5 hits); recompile the program", who,
         dtype_name(correct.dtype()), shape_str(correct.shape()), int(kCorrectSlots));
}

// ACCUMULATE_TOTALS: an optional F32/F64 [1] loss, I32 [kCorrectSlots] hit counts, F64 [kTotalsSlots]
// totals.
inline void expect_totals(const std::string& who, const TensorArg& loss, const TensorArg& correct,
                          const TensorArg& totals) {
  if (loss && (loss.numel() != 1 || (loss.dtype() != DType::F32 && loss.dtype() != DType::F64)))
    fail("{}: loss tensor is {} {}, expected F32 or F64 [1]; recompile the program", who, dtype_name(loss.dtype()),
         shape_str(loss.shape()));
  expect_correct(who, correct);
  if (totals.numel() != kTotalsSlots || totals.dtype() != DType::F64)
    fail("{}: totals tensor is {} {}, expected F64 [{}]; recompile the program", who, dtype_name(totals.dtype()),
         shape_str(totals.shape()), int(kTotalsSlots));
}

}  // namespace kiln::loss
