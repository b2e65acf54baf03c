#pragma once
// Per-sample work of the batch loader: augmentation and normalization of one image.
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

// Writes sample `index` of `dataset`, augmented with randomness drawn from (seed, epoch, index),
// as H*W*C normalized floats to `out`.
void build_sample(const Dataset& dataset, int64_t index, const Augment& augment, uint64_t seed,
                  int epoch, const PixelAffine& affine, float* out);

}  // namespace kiln
