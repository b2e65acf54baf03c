#pragma once
// Where the standard torchvision ImageNet recipe takes its crops from: RandomResizedCrop's random
// box (training) and Resize + CenterCrop's box (evaluation), in source-image pixels, for
// resize_box_bilinear (data/image/resize.h) to produce the sample in one pass.
#include <cstdint>

#include "core/random.h"

namespace kiln {

// A small counter-based generator: draw n is a pure function of (key, n), so a sample's crop
// depends only on its key, never on threads.
class SplitRng {
 public:
  explicit SplitRng(uint64_t key) : state_(mix64(key)) {}
  uint64_t next() {  // splitmix64
    const uint64_t x = mix64(state_);
    state_ += 0x9e3779b97f4a7c15ULL;
    return x;
  }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi). The product is rounded before the add (no FMA), so every build draws the
  // same values.
  double uniform(double lo, double hi) {
    volatile double span = (hi - lo) * uniform();
    return lo + span;
  }
  // Uniform integer in [0, n), unbiased (Lemire's multiply with rejection); 0 when n == 0.
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

// Python's round() (half to even) of a finite double, as torchvision's int(round(x)) computes.
double round_half_even(double x);

struct CropBox {
  int x = 0, y = 0, width = 0, height = 0;
};

struct RandomResizedCropParams {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

// torchvision.transforms.RandomResizedCrop.get_params with SplitRng(key) for torch's generator:
// up to 10 attempts of
//   target_area = area * U(scale_min, scale_max), aspect = exp(U(log ratio_min, log ratio_max)),
//   w = round(sqrt(target_area * aspect)), h = round(sqrt(target_area / aspect)),
// accepted when 0 < w <= width and 0 < h <= height, then y = randint(0, height - h + 1) and
// x = randint(0, width - w + 1); else the central crop of the aspect ratio clamped to
// [ratio_min, ratio_max]. The box lies inside the image, with positive size.
// Expects checked params (check_random_resized_crop) and a positive image size.
CropBox random_resized_crop_box(int width, int height, const RandomResizedCropParams& p, uint64_t key);

// kiln::Error naming the option (scale_min, scale_max, ratio_min, ratio_max) unless every value is
// finite, 0 < scale_min <= scale_max and 0 < ratio_min <= ratio_max. (scale_max > 1 is allowed,
// as in torchvision: attempts that do not fit fall back to the central crop.)
void check_random_resized_crop(const RandomResizedCropParams& p);

// torchvision's Resize(resize) (short side to `resize`, long side int(resize * long / short))
// followed by CenterCrop(crop), as one resampling of the original image:
// resize_box_bilinear(src, x, y, width, height, 0, 0, W, H, out_width, out_height, ...) yields the
// resampled part of the crop, which goes at (pad_left, pad_top) of the crop x crop output. When the
// crop is larger than the resized image along an axis, torchvision pads with zeros (left/top pad
// (crop - side) / 2, integer division): out_* is then the resized side and pad_* the offset; the
// rest of the output is 0. Otherwise out_* == crop and pad_* == 0. To match Pillow 13's pass order,
// pass pillow13_pass_order(width, height, resized_width, resized_height) (data/image/resize.h).
struct ResizeCropBox {
  double x = 0, y = 0, width = 0, height = 0;  // source box, original image pixels
  int out_width = 0, out_height = 0;
  int pad_left = 0, pad_top = 0;
  int resized_width = 0, resized_height = 0;  // Resize's output size (for reference)
};
// Errors (kiln::Error): non-positive image size, resize or crop; a resized long side over 2^31 - 1 pixels.
ResizeCropBox resize_center_crop_box(int width, int height, int resize, int crop);

}  // namespace kiln
