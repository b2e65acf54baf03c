#include "data/image_folder/image_source.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "core/random.h"
#include "data/image/crop_geometry.h"
#include "data/image/image_codec.h"
#include "data/image/resize.h"
#include "data/transforms.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr uint64_t kFlipSalt = 0x6a09e667f3bcc909ULL;  // the flip's bit, apart from the crop's draws
constexpr int64_t kStatsSamples = 10000;

// The stored image's region (with `margin` pixels around, clipped) that a source box needs.
PixelRect region_around(double x, double y, double w, double h, double margin, int width, int height) {
  const int x0 = std::max(0, int(std::floor(x - margin))), y0 = std::max(0, int(std::floor(y - margin)));
  const int x1 = std::min(width, int(std::ceil(x + w + margin))), y1 = std::min(height, int(std::ceil(y + h + margin)));
  return {x0, y0, std::max(1, x1 - x0), std::max(1, y1 - y0)};
}

ImageView view_of(const DecodedImage& d) {
  return {d.pixels.data(), d.width, d.height, d.channels, int64_t(d.width) * d.channels};
}

}  // namespace

ImageSource::ImageSource(std::unique_ptr<RecordReader> records, std::vector<std::string> classes,
                         ImageTransform transform, bool train, bool skip_bad, const std::vector<std::string>& left_out)
    : records_(std::move(records)),
      classes_(std::move(classes)),
      t_(transform),
      train_(train),
      skip_bad_(skip_bad),
      bad_(left_out.begin(), left_out.end()) {
  check_image_transform(t_);
  if (t_.kind == ImageTransform::Kind::ImageNet) {
    shape_ = {t_.size, t_.size, t_.channels};
    return;
  }
  // Plain: the first readable image decides the geometry every other one must have.
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < count(); ++i) {
    try {
      records_->read(i, bytes);
      ImageInfo info = read_image_info(bytes.data(), bytes.size(), records_->name(i));
      const bool swap = t_.exif_orientation && info.orientation >= 5;
      shape_ = {swap ? info.width : info.height, swap ? info.height : info.width, t_.channels};
      return;
    } catch (const Error&) {
      if (!skip_bad_) throw;
    }
  }
  if (count() > 0) fail("no image of '{}' could be read", records_->name(0));
}

CropBox ImageSource::train_crop(int width, int height, int64_t key, uint64_t seed, int epoch, bool& flip) const {
  const uint64_t bits = augment_bits(seed, epoch, key);
  const RandomResizedCropParams params{t_.scale_min, t_.scale_max, t_.ratio_min, t_.ratio_max};
  flip = t_.augment.hflip && (mix64(bits ^ kFlipSalt) >> 63);
  return random_resized_crop_box(width, height, params, bits);
}

bool ImageSource::plan_gpu_crop(int64_t index, uint64_t seed, int epoch, GpuCropPlan& plan) const {
  if (!train_ || t_.kind != ImageTransform::Kind::ImageNet || t_.channels != 3) return false;
  try {
    records_->read(index, plan.bytes);
    const ImageInfo info = read_image_info(plan.bytes.data(), plan.bytes.size(), records_->name(index));
    if (info.format != ImageFormat::Jpeg || info.stored_channels == 4) return false;
    if (t_.exif_orientation && info.orientation != 1) return false;
    const CropBox box = train_crop(info.width, info.height, index, seed, epoch, plan.flip);
    plan.x = box.x, plan.y = box.y, plan.width = box.width, plan.height = box.height;
    plan.label = records_->label(index);
    return true;
  } catch (const Error&) {
    return false;  // write_sample reports or skips it
  }
}

void ImageSource::transform(int64_t record, int64_t key, uint64_t seed, int epoch, bool train, uint8_t* out) const {
  thread_local std::vector<uint8_t> bytes;
  const std::string name = records_->name(record);
  records_->read(record, bytes);
  const ImageInfo info = read_image_info(bytes.data(), bytes.size(), name);
  const bool orient = t_.exif_orientation && info.orientation != 1;
  const int C = t_.channels;
  DecodeRequest request;
  request.channels = C;
  auto decode_oriented = [&] {
    return apply_orientation(decode_image(bytes.data(), bytes.size(), name, request), info.orientation);
  };

  if (t_.kind == ImageTransform::Kind::Plain) {
    const DecodedImage image = orient ? decode_oriented() : decode_image(bytes.data(), bytes.size(), name, request);
    if (image.width != shape_.width || image.height != shape_.height)
      fail("image '{}' is {}x{} but the folder's images are {}x{} (the size of '{}'); --transform plain needs "
           "images of one size: resize them, or use --transform imagenet", name, image.width, image.height,
           shape_.width, shape_.height, records_->name(0));
    const Augment augment = train ? t_.augment : Augment{};
    const uint64_t bits = augment.pad_crop > 0 || augment.hflip ? augment_bits(seed, epoch, key) : 0;
    write_padded_crop(image.pixels.data(), image.height, image.width, C, augment, bits, out);
    return;
  }

  // Sizes as displayed (after the EXIF orientation when it is applied).
  const bool swap = orient && info.orientation >= 5;
  const int W = swap ? info.height : info.width, H = swap ? info.width : info.height;
  const int S = t_.size;
  if (train) {
    bool flip = false;
    const CropBox box = train_crop(W, H, key, seed, epoch, flip);
    DecodedImage image;
    if (orient) {
      image = decode_oriented();
    } else {
      request.region = PixelRect{box.x, box.y, box.width, box.height};
      if (t_.dct_scaling) request.min_width = request.min_height = S;
      image = decode_image(bytes.data(), bytes.size(), name, request);
    }
    // torchvision crops, then resizes: the filter sees only the crop's pixels.
    const double step = image.step;
    const double bx = (box.x - image.origin_x) / step, by = (box.y - image.origin_y) / step;
    const double bw = box.width / step, bh = box.height / step;
    const int vx0 = std::max(0, int(std::floor(bx))), vy0 = std::max(0, int(std::floor(by)));
    const int vx1 = std::min(image.width, int(std::ceil(bx + bw))), vy1 = std::min(image.height, int(std::ceil(by + bh)));
    resize_box_bilinear(view_of(image), bx, by, bw, bh, vx0, vy0, vx1, vy1, S, S, flip, out, int64_t(S) * C);
    return;
  }

  // Evaluation: Resize(eval_resize) then CenterCrop(size), as one resample of the crop's source box.
  ResizeCropBox rc;
  try {
    rc = resize_center_crop_box(W, H, t_.eval_resize, S);
  } catch (const Error& e) {
    fail("image '{}': {}", name, e.what());
  }
  DecodedImage image;
  if (orient) {
    image = decode_oriented();
  } else {
    // The filter reaches max(scale, 1) pixels beyond the box; decode that much more.
    const double scale = std::max(rc.width / rc.out_width, rc.height / rc.out_height);
    const PixelRect region = region_around(rc.x, rc.y, rc.width, rc.height, std::max(scale, 1.0) + 1, W, H);
    // Always at full scale: evaluation gives torchvision's pixels exactly (DCT scaling is for
    // training crops, where it moved 4.6% of the values of a validation set by a mean of 0.09).
    request.region = region;
    image = decode_image(bytes.data(), bytes.size(), name, request);
  }
  const double step = image.step;
  const double bx = (rc.x - image.origin_x) / step, by = (rc.y - image.origin_y) / step;
  if (rc.out_width < S || rc.out_height < S) std::fill(out, out + int64_t(S) * S * C, uint8_t(0));
  uint8_t* dst = out + (int64_t(rc.pad_top) * S + rc.pad_left) * C;
  resize_box_bilinear(view_of(image), bx, by, rc.width / step, rc.height / step, 0, 0, image.width, image.height,
                      rc.out_width, rc.out_height, false, dst, int64_t(S) * C);
}

int32_t ImageSource::write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const {
  const int64_t n = count();
  for (int64_t attempt = 0; attempt < n; ++attempt) {
    const int64_t record = (index + attempt) % n;
    try {
      transform(record, index, seed, epoch, train_, out);
      return records_->label(record);
    } catch (const Error& e) {
      if (!skip_bad_) fail("{}. (--skip-bad skips files that cannot be read and lists them at the end)", e.what());
      std::lock_guard lock(bad_mu_);
      bad_.insert(e.what());
    }
  }
  fail("no sample of the {} set could be read ({} samples, the first '{}'); check the files",
       train_ ? "training" : "evaluation", n, n ? records_->name(0) : "");
}

std::vector<std::string> ImageSource::skipped() const {
  std::lock_guard lock(bad_mu_);
  return {bad_.begin(), bad_.end()};
}

ChannelStats ImageSource::channel_stats() const {
  const bool imagenet = t_.normalize == ImageTransform::Normalize::ImageNet ||
                        (t_.normalize == ImageTransform::Normalize::Auto && t_.kind == ImageTransform::Kind::ImageNet &&
                         t_.channels == 3);
  if (imagenet) return imagenet_channel_stats();
  // The data's own: every sample through the evaluation transform (a spread of 10,000 when
  // there are more), summed as integers per piece and the pieces added in order: exact, and the
  // same whatever the thread count.
  const int64_t n = count();
  if (n == 0) fail("cannot compute the normalization of an empty set");
  const int64_t samples = std::min(n, kStatsSamples);
  const int64_t C = shape_.channels, values = shape_.size();
  const int64_t block = 64;
  const int64_t blocks = block_count(samples, block);
  // Per block: the sums of each channel and of its squares, then the samples counted.
  std::vector<std::vector<uint64_t>> sums(blocks, std::vector<uint64_t>(2 * C + 1, 0));
  parallel_for(blocks, [&](int64_t b) {
    std::vector<uint8_t> pixels(values);
    for (int64_t s = b * block; s < std::min(samples, (b + 1) * block); ++s) {
      const int64_t index = samples == n ? s : s * n / samples;
      try {
        transform(index, index, 0, 0, false, pixels.data());
      } catch (const Error& e) {
        if (!skip_bad_) throw;
        std::lock_guard lock(bad_mu_);
        bad_.insert(e.what());
        continue;
      }
      sums[b][2 * C] += 1;
      for (int64_t i = 0; i < values; i += C)
        for (int64_t c = 0; c < C; ++c) {
          sums[b][c] += pixels[i + c];
          sums[b][C + c] += uint64_t(pixels[i + c]) * pixels[i + c];
        }
    }
  });
  uint64_t counted = 0;
  for (const auto& s : sums) counted += s[2 * C];
  if (counted == 0) fail("no sample of '{}' could be read to compute the normalization", records_->name(0));
  ChannelStats stats;
  const double count_pixels = double(counted) * double(values / C);
  for (int64_t c = 0; c < C; ++c) {
    uint64_t sum = 0, sum_sq = 0;
    for (const auto& s : sums) sum += s[c], sum_sq += s[C + c];
    const double mean = double(sum) / count_pixels;
    const double var = double(sum_sq) / count_pixels - mean * mean;
    stats.mean.push_back(float(mean / 255.0));
    stats.std.push_back(float(std::sqrt(std::max(var, 0.0)) / 255.0));
  }
  return stats;
}

}  // namespace kiln
