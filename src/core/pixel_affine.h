#pragma once
// The one host loop that turns uint8 pixels into normalized floats, pixel * scale[c] + bias[c],
// with the multiply and the add each rounded, as the device's kernel (pixel_normalize_cuda.cu)
// rounds them: the loader's batches and the CPU backend's pixel input give the GPU's bits.
#include <cstdint>

namespace kiln {

// `count` values of HWC pixels with `channels` channels into `out`.
void normalize_pixels_rounded(const uint8_t* pixels, int64_t count, const float* scale, const float* bias,
                              int64_t channels, float* out);

}  // namespace kiln
