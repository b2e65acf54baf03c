#include "data/transforms.h"

#include <cmath>
#include <numeric>

#include "core/pixel_affine.h"
#include "core/random.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// Independent random streams per epoch for the two uses, so the crop of a sample does not
// correlate with where the shuffle puts it.
uint64_t shuffle_stream(int epoch) { return uint64_t(uint32_t(epoch)) << 1; }
uint64_t augment_stream(int epoch) { return (uint64_t(uint32_t(epoch)) << 1) | 1; }

// Uniform integer in [0, bound) from 64 random bits (multiply-high: no modulo bias worth noting).
uint64_t below(uint64_t bits, uint64_t bound) {
  return uint64_t((static_cast<unsigned __int128>(bits) * bound) >> 64);
}

}  // namespace

ChannelStats imagenet_channel_stats() { return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}; }

ChannelStats compute_channel_stats(const Dataset& ds) {
  if (ds.channels <= 0 || ds.count <= 0) fail("compute_channel_stats: the dataset is empty");
  // Integer sums are exact, so the result does not depend on summation order.
  std::vector<uint64_t> sum(ds.channels, 0), sum_sq(ds.channels, 0);
  const int64_t pixels = ds.count * ds.height * ds.width;
  const uint8_t* p = ds.images.data();
  for (int64_t i = 0; i < pixels; ++i)
    for (int64_t c = 0; c < ds.channels; ++c, ++p) {
      sum[c] += *p;
      sum_sq[c] += uint64_t(*p) * *p;
    }
  ChannelStats stats;
  for (int64_t c = 0; c < ds.channels; ++c) {
    double mean = double(sum[c]) / double(pixels);
    double var = double(sum_sq[c]) / double(pixels) - mean * mean;
    stats.mean.push_back(float(mean / 255.0));
    stats.std.push_back(float(std::sqrt(std::max(var, 0.0)) / 255.0));
  }
  return stats;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int epoch) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), int64_t(0));
  const uint64_t stream = shuffle_stream(epoch);
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    int64_t j = int64_t(below(random_bits(seed, stream, uint64_t(i)), uint64_t(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

PixelAffine make_pixel_affine(const std::vector<float>& mean, const std::vector<float>& std, int64_t channels) {
  if (mean.size() != std.size())
    fail("normalization: mean has {} values but std has {}", mean.size(), std.size());
  if (!mean.empty() && int64_t(mean.size()) != channels)
    fail("normalization: mean/std have {} values but the dataset has {} channels", mean.size(), channels);
  PixelAffine affine;
  for (int64_t c = 0; c < channels; ++c) {
    float m = mean.empty() ? 0.0f : mean[c];
    float s = std.empty() ? 1.0f : std[c];
    if (!(s > 0.0f) || !std::isfinite(s) || !std::isfinite(m))
      fail("normalization: channel {} has mean {} and std {}; std must be positive and both finite", c, m, s);
    affine.scale.push_back(1.0f / (255.0f * s));
    affine.bias.push_back(-m / s);
  }
  return affine;
}

uint64_t augment_bits(uint64_t seed, int epoch, int64_t index) {
  return random_bits(seed, augment_stream(epoch), uint64_t(index));
}

void normalize_pixels(const uint8_t* pixels, int64_t count, const PixelAffine& affine, float* out) {
  normalize_pixels_rounded(pixels, count, affine.scale.data(), affine.bias.data(), int64_t(affine.scale.size()), out);
}

void write_padded_crop(const uint8_t* image, int64_t H, int64_t W, int64_t C, const Augment& augment, uint64_t bits,
                       uint8_t* out) {
  int64_t dy = 0, dx = 0;  // source offset of the crop window relative to the image
  bool flip = false;
  if (augment.pad_crop > 0 || augment.hflip) {
    const uint64_t span = 2 * uint64_t(augment.pad_crop) + 1;
    if (augment.pad_crop > 0) {
      dy = int64_t(below(mix64(bits), span)) - augment.pad_crop;
      dx = int64_t(below(mix64(bits ^ 0x5bd1e995ULL), span)) - augment.pad_crop;
    }
    flip = augment.hflip && (bits >> 63);
  }
  for (int64_t y = 0; y < H; ++y) {
    const int64_t sy = y + dy;
    for (int64_t x = 0; x < W; ++x) {
      const int64_t sx = (flip ? W - 1 - x : x) + dx;
      uint8_t* o = out + (y * W + x) * C;
      const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
      const uint8_t* px = inside ? image + (sy * W + sx) * C : nullptr;
      for (int64_t c = 0; c < C; ++c) o[c] = inside ? px[c] : 0;
    }
  }
}

std::string SampleSource::sample_name(int64_t index) const { return fmt::format("sample {}", index); }

bool SampleSource::plan_gpu_crop(int64_t, uint64_t, int, GpuCropPlan&) const { return false; }

DecodeDevice parse_decode_device(const std::string& name) {
  if (name == "auto") return DecodeDevice::Auto;
  if (name == "cpu") return DecodeDevice::Cpu;
  if (name == "gpu") return DecodeDevice::Gpu;
  fail("unknown decode device '{}'; use --decode cpu, gpu or auto", name);
}

DatasetSource::DatasetSource(const Dataset& dataset, Augment augment) : data_(dataset), augment_(augment) {
  if (augment.pad_crop < 0) fail("batch loader: pad_crop must be >= 0, got {}", augment.pad_crop);
  if (dataset.count < 0 || int64_t(dataset.images.size()) != dataset.count * dataset.image_size() ||
      int64_t(dataset.labels.size()) != dataset.count)
    fail("batch loader: dataset is inconsistent: count {} with {} image bytes ({}x{}x{} each) and {} labels",
         dataset.count, dataset.images.size(), dataset.height, dataset.width, dataset.channels,
         dataset.labels.size());
}

int32_t DatasetSource::write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const {
  const uint64_t bits = augment_.pad_crop > 0 || augment_.hflip ? augment_bits(seed, epoch, index) : 0;
  write_padded_crop(data_.images.data() + index * data_.image_size(), data_.height, data_.width, data_.channels,
                    augment_, bits, out);
  return data_.labels[index];
}

}  // namespace kiln
