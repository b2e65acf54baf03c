#pragma once
// Softmax cross-entropy with label smoothing (PyTorch's definition, mean over the batch), and the
// count of rows whose largest logit is the label (accuracy).
#include "runtime/op_contract.h"

namespace kiln {

template <class T>
struct SoftmaxCrossEntropy {
  static constexpr OpKind kind = OpKind::SOFTMAX_CE;
  T logits, labels;  // labels: i32 class indices, one per row
  T loss, dlogits;   // loss: [1]; dlogits: optional
  float label_smoothing = 0.f;
  template <class V>
  void fields(V& v) {
    v.in("logits", logits), v.in("labels", labels), v.out("loss", loss), v.out("dlogits", dlogits, kOptional);
    v.attr("label_smoothing", label_smoothing);
  }
};

// Labels outside [0, classes) never count: the trainer marks the padding rows of a last partial
// inference batch -1.
template <class T>
struct CountCorrect {
  static constexpr OpKind kind = OpKind::COUNT_CORRECT;
  T logits, labels, correct;  // correct: i32 [1]; ties go to the first largest logit
  template <class V>
  void fields(V& v) { v.in("logits", logits), v.in("labels", labels), v.out("correct", correct); }
};

}  // namespace kiln
