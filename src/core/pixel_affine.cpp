// Compiled with -ffp-contract=off (CMakeLists.txt): under -march=native GCC's default
// -ffp-contract=fast would fuse the multiply and add into one FMA, one rounding instead of two,
// and the host's floats would differ in the last bit from the device's.
#include "core/pixel_affine.h"

namespace kiln {

void normalize_pixels_rounded(const uint8_t* pixels, int64_t count, const float* scale, const float* bias,
                              int64_t channels, float* out) {
  for (int64_t i = 0; i < count; i += channels)
    for (int64_t c = 0; c < channels; ++c) out[i + c] = float(pixels[i + c]) * scale[c] + bias[c];
}

}  // namespace kiln
