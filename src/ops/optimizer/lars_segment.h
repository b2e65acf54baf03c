#pragma once
// One parameter tensor of a LARS update (LarsUpdate, optimizer_contract.h): the elements it covers
// in the parameter region, and whether it takes plain momentum SGD steps. Shared by the CPU and the
// CUDA kernels (no other include, so nvcc reads it too).
#include <cstdint>

namespace kiln {

struct LarsSegment {
  int64_t offset = 0, length = 0;  // elements [offset, offset + length) of the region
  bool plain = false;              // skip_1d and one dimension: no trust ratio, no weight decay
};

}  // namespace kiln
