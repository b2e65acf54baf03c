#include "data/image/crop_geometry.h"

#include <algorithm>
#include <cmath>

#include "kiln/error.h"

namespace kiln {

uint64_t SplitRng::below(uint64_t n) {
  if (n == 0) return 0;
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
  uint64_t low = uint64_t(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * n;
      low = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

double round_half_even(double x) {
  double r = std::round(x);  // half away from zero; r - x is exact
  if (std::fabs(r - x) == 0.5) r = 2.0 * std::round(x / 2.0);  // a tie: the even neighbour
  return r;
}

void check_random_resized_crop(const RandomResizedCropParams& p) {
  const struct {
    const char* name;
    double value;
  } fields[] = {{"scale_min", p.scale_min}, {"scale_max", p.scale_max}, {"ratio_min", p.ratio_min},
                {"ratio_max", p.ratio_max}};
  for (const auto& f : fields)
    if (!std::isfinite(f.value)) fail("RandomResizedCrop: {} must be a finite number, got {}", f.name, f.value);
  if (!(p.scale_min > 0))
    fail("RandomResizedCrop: scale_min must be > 0 (the smallest crop area, as a fraction of the image), got {}",
         p.scale_min);
  if (p.scale_min > p.scale_max)
    fail("RandomResizedCrop: scale_min ({}) must not exceed scale_max ({})", p.scale_min, p.scale_max);
  if (!(p.ratio_min > 0))
    fail("RandomResizedCrop: ratio_min must be > 0 (the smallest width/height aspect ratio), got {}", p.ratio_min);
  if (p.ratio_min > p.ratio_max)
    fail("RandomResizedCrop: ratio_min ({}) must not exceed ratio_max ({})", p.ratio_min, p.ratio_max);
}

CropBox random_resized_crop_box(int width, int height, const RandomResizedCropParams& p, uint64_t key) {
  if (width <= 0 || height <= 0) fail("RandomResizedCrop: empty image ({}x{})", width, height);
  SplitRng rng(key);
  const double area = double(width) * double(height);
  const double log_min = std::log(p.ratio_min), log_max = std::log(p.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(p.scale_min, p.scale_max);
    const double aspect = std::exp(rng.uniform(log_min, log_max));
    const double w = round_half_even(std::sqrt(target_area * aspect));
    const double h = round_half_even(std::sqrt(target_area / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.width = int(w);
      box.height = int(h);
      box.y = int(rng.below(uint64_t(height - box.height + 1)));
      box.x = int(rng.below(uint64_t(width - box.width + 1)));
      return box;
    }
  }
  // Fallback: the central crop, its aspect ratio clamped to the range.
  CropBox box;
  const double in_ratio = double(width) / double(height);
  if (in_ratio < p.ratio_min) {
    box.width = width;
    box.height = int(std::min<double>(round_half_even(width / p.ratio_min), height));
  } else if (in_ratio > p.ratio_max) {
    box.height = height;
    box.width = int(std::min<double>(round_half_even(height * p.ratio_max), width));
  } else {
    box.width = width;
    box.height = height;
  }
  box.width = std::max(box.width, 1);
  box.height = std::max(box.height, 1);
  box.y = (height - box.height) / 2;
  box.x = (width - box.width) / 2;
  return box;
}

ResizeCropBox resize_center_crop_box(int width, int height, int resize, int crop) {
  if (width <= 0 || height <= 0) fail("Resize + CenterCrop: empty image ({}x{})", width, height);
  if (resize <= 0) fail("Resize + CenterCrop: the resize size must be positive, got {}", resize);
  if (crop <= 0) fail("Resize + CenterCrop: the crop size must be positive, got {}", crop);
  // torchvision: short side -> resize, long side int(resize * long / short) (true division).
  const bool wide = width > height;
  const int64_t short_side = wide ? height : width, long_side = wide ? width : height;
  const double exact_long = double(int64_t(resize) * long_side) / double(short_side);
  // A sliver (a PNG may be 178956970 x 1 within kMaxImagePixels) would be longer than an int can say.
  if (exact_long >= 2147483648.0)
    fail("Resize + CenterCrop: resizing the short side of a {}x{} image to {} makes its long side {:.0f} pixels, "
         "more than an image side can be (2147483647); crop the image to a less extreme aspect ratio, or remove it",
         width, height, resize, exact_long);
  const int new_long = int(exact_long);
  ResizeCropBox r;
  r.resized_width = wide ? new_long : resize;
  r.resized_height = wide ? resize : new_long;
  // CenterCrop along one axis: zero padding when the crop is larger, else offset round((side - crop) / 2).
  auto axis = [crop](int side, int& offset, int& out, int& pad) {
    if (crop > side) {
      pad = (crop - side) / 2;
      offset = 0;
      out = side;
    } else {
      pad = 0;
      offset = int(round_half_even((side - crop) / 2.0));
      out = crop;
    }
  };
  int left = 0, top = 0;
  axis(r.resized_width, left, r.out_width, r.pad_left);
  axis(r.resized_height, top, r.out_height, r.pad_top);
  // PIL's scale for the resize is (source side) / (resized side).
  const double sx = double(width) / r.resized_width, sy = double(height) / r.resized_height;
  r.x = left * sx;
  r.y = top * sy;
  r.width = r.out_width * sx;
  r.height = r.out_height * sy;
  return r;
}

}  // namespace kiln
