#pragma once
// uint8 HWC pixels to the F32 input tensor on the device: value = pixel * scale[c] + bias[c], the
// multiply and the add each rounded as the host's loader rounds them (no fused multiply-add), so
// a batch normalized here is bit for bit the batch the CPU would have delivered.
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/backend.h"

namespace kiln {

void launch_normalize_pixels(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n,
                             cudaStream_t stream);

}  // namespace kiln
