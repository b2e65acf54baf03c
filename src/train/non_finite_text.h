#pragma once
// What a tensor with non-finite values holds, for the messages of the training loop and of
// checkpoint writing and loading.
#include <string>
#include <vector>

#include "kiln/checkpoint.h"

namespace kiln {

// "" when every value is finite; else "tensor 'x' holds N non-finite values (the first, v, at index i)".
std::string non_finite_text(const NamedTensor& t);
// The same for the first tensor of `tensors` that holds one.
std::string non_finite_text(const std::vector<NamedTensor>& tensors);

}  // namespace kiln
