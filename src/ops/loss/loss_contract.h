#pragma once
// Softmax cross-entropy with label smoothing (PyTorch's definition, mean over the batch), and the
// counts of rows whose label is the largest logit, and among the 5 largest (top-1 and top-5
// accuracy).
#include "ops/loss/totals_slots.h"
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct SoftmaxCrossEntropy {
  static constexpr OpKind kind = OpKind::SOFTMAX_CE;
  T logits, labels;  // labels: i32 class indices, one per row
  T loss, dlogits;   // loss: [1], never scaled; dlogits: optional
  float label_smoothing = 0.f;
  // Optional, F32 [1] in the program's memory: dynamic loss scaling's scale, by which dlogits are
  // multiplied before they are rounded to their dtype (as PyTorch scales the fp32 loss before
  // autograd casts the gradient to fp16: small gradients then survive the rounding).
  T loss_scale;
  template <class V>
  void fields(V& v) {
    v.in("logits", logits), v.in("labels", labels), v.in("loss_scale", loss_scale, kOptional);
    v.out("loss", loss), v.out("dlogits", dlogits, kOptional);
    v.attr("label_smoothing", label_smoothing);
  }
};

// COUNT_CORRECT: correct (I32 [kCorrectSlots], totals_slots.h) gets the number of rows whose
// label ranks below 1 (correct[kTop1Hits]) and below kTopK = 5 (correct[kTop5Hits]), where
//   rank = (logits of the row greater than the label's) + (logits equal to it at a smaller class),
// so ties go to the first largest logit, and with fewer than 5 classes every counted row is a
// top-5 hit. NaN orders below every number and equal to NaN: a NaN logit never outranks a number.
// Labels outside [0, classes) never count: the trainer marks the padding rows of a last partial
// inference batch -1.
template <class T>
struct CountCorrect {
  static constexpr OpKind kind = OpKind::COUNT_CORRECT;
  T logits, labels, correct;  // correct: I32 [kCorrectSlots], top-1 then top-5 hits
  template <class V>
  void fields(V& v) { v.in("logits", logits), v.in("labels", labels), v.out("correct", correct); }
};

// ACCUMULATE_TOTALS: running totals (slots in totals_slots.h, which says what they are for).
template <class T>
struct AccumulateTotals {
  static constexpr OpKind kind = OpKind::ACCUMULATE_TOTALS;
  T loss;     // F32 (F64 in fp64 programs) [1]; absent when evaluating, which counts hits only
  T correct;  // I32 [kCorrectSlots], COUNT_CORRECT's top-1 and top-5 hits
  T totals;   // F64 [kTotalsSlots], read and added to
  template <class V>
  void fields(V& v) { v.in("loss", loss, kOptional), v.in("correct", correct), v.out("totals", totals); }
};

}  // namespace kiln
