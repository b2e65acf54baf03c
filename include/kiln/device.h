#pragma once
// Which devices this process can run programs on.
#include <cstddef>
#include <string>

#include "kiln/dtype.h"

namespace kiln {

// CUDA GPUs visible to this process: 0 when kiln was built without its CUDA backend or when no
// GPU (or no driver) is present.
int cuda_device_count();

// Bytes of device memory in use on CUDA GPU `index` (by every process, this one's context
// included); 0 without a CUDA backend. For measuring what a program takes: the difference
// between two calls.
size_t cuda_memory_in_use(int index);

// parse_device_spec, plus "auto": the first GPU when one is visible, else the CPU (what
// `kiln train` does unless --device says otherwise).
DeviceSpec resolve_device(const std::string& text);

}  // namespace kiln
