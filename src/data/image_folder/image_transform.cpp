#include <cmath>

#include "kiln/error.h"
#include "kiln/image_folder.h"

namespace kiln {

void check_image_transform(const ImageTransform& t) {
  if (t.channels != 1 && t.channels != 3)
    fail("image channels must be 1 (grayscale) or 3 (RGB), got {}; use --channels 3, or 1 for grayscale", t.channels);
  if (t.augment.pad_crop < 0) fail("--crop-pad must be >= 0, got {}", t.augment.pad_crop);
  if (t.kind == ImageTransform::Kind::Plain) return;
  if (t.size < 1 || t.size > 4096) fail("--image-size must be in [1, 4096], got {}; use e.g. --image-size 224", t.size);
  if (t.eval_resize < 1 || t.eval_resize > 8192)
    fail("--eval-resize must be in [1, 8192], got {}; use e.g. --eval-resize 256 (with --image-size 224)", t.eval_resize);
  if (t.augment.pad_crop != 0)
    fail("--crop-pad {} applies to --transform plain (images at their own size); the imagenet transform crops with "
         "--crop-scale and --crop-ratio instead", t.augment.pad_crop);
  if (!(t.scale_min > 0) || !(t.scale_min <= t.scale_max) || !(t.scale_max <= 1) || !std::isfinite(t.scale_min))
    fail("--crop-scale {},{} is not a range of area fractions: it needs 0 < min <= max <= 1; use e.g. --crop-scale "
         "0.08,1", t.scale_min, t.scale_max);
  if (!(t.ratio_min > 0) || !(t.ratio_min <= t.ratio_max) || !std::isfinite(t.ratio_max))
    fail("--crop-ratio {},{} is not a range of aspect ratios: it needs 0 < min <= max; use e.g. --crop-ratio "
         "0.75,1.3333", t.ratio_min, t.ratio_max);
  if (t.normalize == ImageTransform::Normalize::ImageNet && t.channels != 3)
    fail("ImageNet's normalization has 3 channels but the images are read with {}; use --normalize dataset",
         t.channels);
}

}  // namespace kiln
