#pragma once
// Antialiased bilinear resampling of 8-bit images, pixel for pixel as PIL's
// Image.resize(size, Image.BILINEAR, box=...) computes it (the resampling torchvision's
// Resize / RandomResizedCrop use on PIL images with antialias=True).
#include <cstdint>

namespace kiln {

// A read-only uint8 image, channels interleaved (HWC); rows row_stride bytes apart.
struct ImageView {
  const uint8_t* data = nullptr;
  int width = 0, height = 0, channels = 0;
  int64_t row_stride = 0;  // bytes between rows
};

// Which pass runs first; the other reads its 8-bit result, so the order changes some pixels by 1.
// Pillow up to 12.x always resamples horizontally first. Pillow 13 resamples vertically first when
// the image's height shrinks by more than twice as many pixels as its width (pillow13_pass_order).
enum class PassOrder { HorizontalFirst, VerticalFirst };

// Pillow 13's choice when it resizes an in_w x in_h image to out_w x out_h: vertical first when
// out_h < in_h and in_h - out_h > 2 * (in_w - out_w). in_* is the size of the image PIL resizes,
// whatever the box: for RandomResizedCrop the crop (the valid range); for Resize + CenterCrop done
// as one pass, the whole image, with out_* the Resize's output size (not the crop's).
PassOrder pillow13_pass_order(int in_w, int in_h, int out_w, int out_h);

// Resamples the source box [box_x, box_x + box_w) x [box_y, box_y + box_h) of `src` (pixel units,
// fractional allowed) to out_w x out_h pixels with PIL's bilinear filter:
//   per axis, scale = box_len / out_len, filterscale = max(scale, 1), support = filterscale;
//   output pixel i has center = box_start + (i + 0.5) * scale and takes the source pixels x of
//   the window [int(center - support + 0.5), int(center + support + 0.5)) clipped to the valid
//   range, weighted tri((x + 0.5 - center) / filterscale), tri(t) = max(0, 1 - |t|), the weights
//   normalized to sum 1 and then rounded to fixed point (22 fractional bits); each pass rounds
//   its sums (+ 1/2, >> 22) and clamps them to [0, 255], as PIL does.
// The valid range [valid_x0, valid_x1) x [valid_y0, valid_y1) is the image PIL would see: for
// RandomResizedCrop (torchvision crops, then resizes) it is the crop itself; for Resize followed by
// CenterCrop it is the whole image. Coordinates are computed relative to (valid_x0, valid_y0), as
// PIL does on the cropped image, so results match PIL's bit for bit. (The box is used in double
// precision; PIL rounds a box passed to Image.resize to float32 - torchvision never passes one.)
// Two passes into an 8-bit intermediate, in `order` (see PassOrder). A pass whose scale is exactly
// 1 at an integral offset inside the valid range is a copy (PIL skips it too). `flip` mirrors the
// output left-right (a horizontal flip after the resize). A window that misses the valid range
// entirely (a box far outside it) takes the nearest valid pixel (PIL would produce 0 there).
// Writes out_h rows of out_w * channels bytes at `out` (not overlapping `src`), rows out_row_stride
// bytes apart.
// Errors (kiln::Error): empty or out-of-image valid range, non-positive or non-finite box size,
// non-positive output size, channels < 1, row strides shorter than a row.
// Checked bit for bit against Pillow 12.1.1 (HorizontalFirst) and 13.0.0 (pillow13_pass_order) on
// RandomResizedCrop boxes, fractional boxes and Resize + CenterCrop, 1 and 3 channels.
// Allocation-free after the first calls on a thread (scratch buffers are thread-local); integer
// arithmetic, the same result on every machine and build (SSE2 where available, else scalar).
void resize_box_bilinear(const ImageView& src, double box_x, double box_y, double box_w, double box_h,
                         int valid_x0, int valid_y0, int valid_x1, int valid_y1, int out_w, int out_h, bool flip,
                         uint8_t* out, int64_t out_row_stride, PassOrder order = PassOrder::HorizontalFirst);

}  // namespace kiln
