#pragma once
// Per-sample work of the batch loader: augmentation of one image and its normalization.
#include <cstdint>
#include <vector>

#include "kiln/data.h"

namespace kiln {

// Normalization folded into one multiply-add per pixel: out = pixel * scale[c] + bias[c].
struct PixelAffine {
  std::vector<float> scale, bias;
};
// Validates mean/std against the channel count (empty = no normalization); names the culprit.
PixelAffine make_pixel_affine(const std::vector<float>& mean, const std::vector<float>& std, int64_t channels);

// `count` HWC pixels (a whole number of pixels of affine.scale.size() channels) to normalized floats.
void normalize_pixels(const uint8_t* pixels, int64_t count, const PixelAffine& affine, float* out);

// Writes the H x W x C `image`, cropped from its zero-padded copy and flipped as `augment` and the
// random `bits` decide (augment_bits), to `out` (same geometry). No augmentation copies the image.
void write_padded_crop(const uint8_t* image, int64_t height, int64_t width, int64_t channels, const Augment& augment,
                       uint64_t bits, uint8_t* out);

}  // namespace kiln
