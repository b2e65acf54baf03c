// Fuzz target "image_decode": the JPEG/PNG decoders behind read_image_info and decode_image
// (src/data/image/image_codec.h), with random regions, DCT scales and EXIF orientations, and the
// image-folder sample path built on them (ImageSource: RandomResizedCrop or Resize + CenterCrop,
// then the bilinear resampler).
// Feeds: 8 parameter bytes (b0 flags: 1 channel, a region, a region unchecked against the image,
// apply_orientation, the ImageSource path, its training transform, plain transform, DCT scaling;
// b1..b4 the region; b5, b6 min_width/min_height or the sample size; b7 the seed), then the file.
// Asserts: success or kiln::Error; on success the pixels are width x height x channels as asked,
// the full size is the header's, the step is 1, 2, 4 or 8 (1 for PNG), a step-1 region is exact and
// any region is covered; orientation swaps the sides for tags 5..8; a sample fills its shape.
// Images whose output would exceed 2^16 pixels are only read to their header: instrumented, every
// pixel costs, and at 2^22 the per-pixel loops (resampling, orientation, conversion) took 90% of the
// time (about 700 executions/s). The loops run the same code at 256 x 256 as at 2048 x 2048, and
// sizes past the cap still reach the header parsers and their checks.
#include <memory>

#include "data/image/image_codec.h"
#include "data/image_folder/image_source.h"
#include "fuzz_support.h"

namespace kiln::fuzz {
namespace {

constexpr int64_t kMaxDecodePixels = int64_t(1) << 16;

class OneRecord : public RecordReader {
 public:
  explicit OneRecord(Bytes bytes) : bytes_(bytes.begin(), bytes.end()) {}
  int64_t count() const override { return 1; }
  int32_t label(int64_t) const override { return 0; }
  void read(int64_t, std::vector<uint8_t>& out) const override { out = bytes_; }
  std::string name(int64_t) const override { return "fuzz.jpg"; }

 private:
  std::vector<uint8_t> bytes_;
};

void check_decoded(const DecodedImage& d, const ImageInfo& info, const DecodeRequest& request, const PixelRect& r) {
  KILN_FUZZ_CHECK(d.channels == request.channels);
  KILN_FUZZ_CHECK(d.width > 0 && d.height > 0);
  KILN_FUZZ_CHECK(d.pixels.size() == size_t(d.width) * size_t(d.height) * size_t(d.channels));
  KILN_FUZZ_CHECK(d.full_width == info.width && d.full_height == info.height);
  KILN_FUZZ_CHECK(d.step == 1 || d.step == 2 || d.step == 4 || d.step == 8);
  KILN_FUZZ_CHECK(info.format == ImageFormat::Jpeg || d.step == 1);
  KILN_FUZZ_CHECK(d.origin_x >= 0 && d.origin_y >= 0 && d.origin_x <= r.x && d.origin_y <= r.y);
  KILN_FUZZ_CHECK(int64_t(d.origin_x) + int64_t(d.width) * d.step >= int64_t(r.x) + r.width);
  KILN_FUZZ_CHECK(int64_t(d.origin_y) + int64_t(d.height) * d.step >= int64_t(r.y) + r.height);
  if (d.step == 1)
    KILN_FUZZ_CHECK(d.origin_x == r.x && d.origin_y == r.y && d.width == r.width && d.height == r.height);
}

void decode_wrappers(Bytes file, uint8_t flags, ByteReader& p) {
  const ImageInfo info = read_image_info(file.data(), file.size(), "fuzz");
  KILN_FUZZ_CHECK(info.width > 0 && info.height > 0);
  KILN_FUZZ_CHECK(int64_t(info.width) * info.height <= kMaxImagePixels);
  KILN_FUZZ_CHECK(info.orientation >= 1 && info.orientation <= 8);
  KILN_FUZZ_CHECK(info.stored_channels >= 1 && info.stored_channels <= 4);
  DecodeRequest request;
  request.channels = flags & 1 ? 1 : 3;
  const int W = info.width, H = info.height;
  const uint8_t b1 = p.u8(), b2 = p.u8(), b3 = p.u8(), b4 = p.u8();
  if (flags & 4) {  // anything, inside the image or not: requested_region must refuse what is outside
    request.region = PixelRect{int8_t(b1) * 64, int8_t(b2) * 64, int8_t(b3) * 64 + b1, int8_t(b4) * 64 + b2};
  } else if (flags & 2) {
    const int x = int(int64_t(b1) * W / 256), y = int(int64_t(b2) * H / 256);
    request.region = PixelRect{x, y, 1 + int(int64_t(b3) * (W - x - 1) / 255), 1 + int(int64_t(b4) * (H - y - 1) / 255)};
  }
  request.min_width = p.u8();
  request.min_height = p.u8();
  const PixelRect r = request.region.value_or(PixelRect{0, 0, W, H});
  if (int64_t(r.width) * r.height > kMaxDecodePixels && r.width > 0 && r.height > 0) return;
  const DecodedImage d = decode_image(file.data(), file.size(), "fuzz", request);
  check_decoded(d, info, request, r);
  if ((flags & 8) && !request.region && d.step == 1) {
    const DecodedImage o = apply_orientation(d, info.orientation);
    const bool swap = info.orientation >= 5;
    KILN_FUZZ_CHECK(o.width == (swap ? d.height : d.width) && o.height == (swap ? d.width : d.height));
    KILN_FUZZ_CHECK(o.pixels.size() == d.pixels.size());
  }
}

void sample_path(Bytes file, uint8_t flags, ByteReader& p) {
  const ImageInfo info = read_image_info(file.data(), file.size(), "fuzz");
  if (int64_t(info.width) * info.height > kMaxDecodePixels) return;
  p.u8(), p.u8(), p.u8(), p.u8();
  ImageTransform t;
  t.kind = flags & 64 ? ImageTransform::Kind::Plain : ImageTransform::Kind::ImageNet;
  t.channels = flags & 1 ? 1 : 3;
  t.size = 1 + p.u8() % 48;
  t.eval_resize = t.size + p.u8() % 16;
  t.dct_scaling = flags & 128;
  t.exif_orientation = flags & 8;
  t.augment = Augment{t.kind == ImageTransform::Kind::Plain ? int(flags & 2) : 0, bool(flags & 4)};
  const bool train = flags & 32;
  const ImageSource source(std::make_unique<OneRecord>(file), {"a"}, t, train, false);
  const SampleShape shape = source.shape();
  KILN_FUZZ_CHECK(shape.channels == t.channels && shape.width > 0 && shape.height > 0);
  std::vector<uint8_t> out(size_t(shape.size()) + 1, 0xa5);
  KILN_FUZZ_CHECK(source.write_sample(0, p.u8(), 1, out.data()) == 0);
  KILN_FUZZ_CHECK(out.back() == 0xa5);  // nothing written past the sample
}

}  // namespace

void image_decode_input(Bytes input) {
  ByteReader p(input);
  const uint8_t flags = p.u8();
  const Bytes file = input.subspan(std::min<size_t>(input.size(), 8));
  accept_kiln_errors([&] {
    if (flags & 16) sample_path(file, flags, p);
    else decode_wrappers(file, flags, p);
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(image_decode_input)
