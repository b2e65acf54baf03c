#pragma once
// The tensor checks the CPU and CUDA loss ops share (loss_ops_cpu.cpp, loss_ops_cuda.cpp); `who`
// names the op in the message.
#include <cstdint>
#include <string>

#include "kiln/error.h"
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

}  // namespace kiln::loss
