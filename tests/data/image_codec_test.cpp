// JPEG/PNG codecs: round trips with stated error bounds, PIL's conversions, partial and
// DCT-scaled JPEG decoding against whole decodes, EXIF orientation, errors that name the file,
// and fuzzed inputs that must decode or throw kiln::Error (never crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "data/image/image_codec.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::error_of;
using testing::expect_error;

// A smooth, random-ish image (three random plane waves per channel around mid-gray), values in
// [10, 245]: what JPEG is made for, and never all zeros.
Bytes smooth_image(int width, int height, int channels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  struct Wave {
    double fx, fy, phase, amplitude;
  };
  std::vector<std::vector<Wave>> waves(channels);
  for (auto& w : waves)
    for (int i = 0; i < 3; ++i) w.push_back({u(rng) * 0.2, u(rng) * 0.2, u(rng) * 6.28, 20 + 20 * u(rng)});
  Bytes pixels(size_t(width) * height * channels);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        double v = 128;
        for (const Wave& w : waves[c]) v += w.amplitude * std::sin(w.fx * x + w.fy * y + w.phase);
        pixels[(size_t(y) * width + x) * channels + c] = uint8_t(std::clamp(std::lround(v), 10L, 245L));
      }
  return pixels;
}

// An image of few colours (for palettes): each pixel one of `colours` random colours.
Bytes few_colour_image(int width, int height, int channels, int colours, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes palette(size_t(colours) * channels);
  for (uint8_t& v : palette) v = uint8_t(rng());
  Bytes pixels(size_t(width) * height * channels);
  for (size_t i = 0; i < size_t(width) * height; ++i)
    std::memcpy(&pixels[i * channels], &palette[(rng() % colours) * channels], channels);
  return pixels;
}

double mean_abs_error(const Bytes& a, const Bytes& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / double(std::max<size_t>(a.size(), 1));
}

int max_abs_error(const Bytes& a, const Bytes& b) {
  int m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

DecodedImage decode(const Bytes& file, const DecodeRequest& request = {}) {
  return decode_image(file.data(), file.size(), "test.img", request);
}

DecodeRequest gray_request() {
  DecodeRequest r;
  r.channels = 1;
  return r;
}

// A request whose minimum size makes the decoder pick exactly `step` for a region `rw` wide
// (rw >= step): rw / (2 * step) < rw / step.
DecodeRequest request_for_step(int step, std::optional<PixelRect> region, int rw, int channels = 3) {
  DecodeRequest r;
  r.channels = channels;
  r.region = region;
  if (step > 1) r.min_width = rw / step;
  return r;
}

// The window of `full` (a whole decode at the same step) that `part` claims to be.
Bytes window_of(const DecodedImage& full, const DecodedImage& part) {
  const int x0 = part.origin_x / part.step, y0 = part.origin_y / part.step, C = full.channels;
  Bytes out;
  for (int y = 0; y < part.height; ++y) {
    const uint8_t* row = full.pixels.data() + ((size_t(y0 + y) * full.width) + x0) * C;
    out.insert(out.end(), row, row + size_t(part.width) * C);
  }
  return out;
}

Bytes replicate_gray(const Bytes& gray) {
  Bytes rgb;
  for (uint8_t v : gray) rgb.insert(rgb.end(), {v, v, v});
  return rgb;
}

// ---------------------------------------------------------------- JPEG

TEST(ImageCodec, JpegRoundTripAtQuality95) {
  // Quality 95 scales the standard quantization tables to steps of 2..5 levels, so a smooth image
  // comes back within about a level on average. Measured (80x60, this seed): MAE 0.95 (4:4:4),
  // 1.35 (4:2:0), 1.11 (4:2:2); max 6 / 12 / 9. Subsampling adds the error of halved chroma
  // resolution where colour changes fastest.
  const int W = 80, H = 60;
  const Bytes rgb = smooth_image(W, H, 3, 1);
  struct Case {
    const char* sampling;
    double mae_bound;
  };
  for (const Case& c : {Case{"4:4:4", 1.5}, Case{"4:2:0", 2.0}, Case{"4:2:2", 2.0}}) {
    SCOPED_TRACE(c.sampling);
    JpegEncodeOptions options;
    options.quality = 95;
    options.sampling = c.sampling;
    const Bytes file = encode_jpeg(rgb.data(), W, H, 3, options);
    const ImageInfo info = read_image_info(file.data(), file.size(), "a.jpg");
    EXPECT_EQ(info.format, ImageFormat::Jpeg);
    EXPECT_EQ(info.width, W);
    EXPECT_EQ(info.height, H);
    EXPECT_EQ(info.stored_channels, 3);
    EXPECT_EQ(info.orientation, 1);
    const DecodedImage image = decode(file);
    EXPECT_EQ(image.width, W);
    EXPECT_EQ(image.height, H);
    EXPECT_EQ(image.channels, 3);
    EXPECT_EQ(image.step, 1);
    EXPECT_EQ(image.origin_x, 0);
    EXPECT_EQ(image.full_width, W);
    EXPECT_EQ(image.full_height, H);
    EXPECT_LT(mean_abs_error(image.pixels, rgb), c.mae_bound);
    EXPECT_LE(max_abs_error(image.pixels, rgb), 20);
    // subsample_420 = false without `sampling` is 4:4:4.
    if (std::string(c.sampling) == "4:4:4") {
      JpegEncodeOptions plain;
      plain.quality = 95;
      plain.subsample_420 = false;
      EXPECT_EQ(encode_jpeg(rgb.data(), W, H, 3, plain), file);
    }
  }
}

TEST(ImageCodec, ProgressiveDecodesExactlyAsBaseline) {
  // Progressive scans carry the same quantized coefficients, only reordered; once all scans are
  // in, libjpeg decodes them identically (no interblock smoothing), so the pixels are equal.
  const int W = 72, H = 40;
  const Bytes rgb = smooth_image(W, H, 3, 2);
  for (bool s420 : {false, true}) {
    JpegEncodeOptions options;
    options.quality = 95;
    options.subsample_420 = s420;
    const Bytes baseline = encode_jpeg(rgb.data(), W, H, 3, options);
    options.progressive = true;
    const Bytes progressive = encode_jpeg(rgb.data(), W, H, 3, options);
    EXPECT_NE(baseline, progressive);
    EXPECT_EQ(decode(progressive).pixels, decode(baseline).pixels) << "4:2:0 " << s420;
  }
}

TEST(ImageCodec, GrayJpeg) {
  // Luma only: MAE measured 0.45 at quality 95 (luma's finer quantization; no chroma error).
  const int W = 64, H = 48;
  const Bytes gray = smooth_image(W, H, 1, 3);
  JpegEncodeOptions options;
  options.quality = 95;
  const Bytes file = encode_jpeg(gray.data(), W, H, 1, options);
  EXPECT_EQ(read_image_info(file.data(), file.size(), "g.jpg").stored_channels, 1);
  const DecodedImage l = decode(file, gray_request());
  EXPECT_EQ(l.channels, 1);
  EXPECT_LT(mean_abs_error(l.pixels, gray), 0.75);
  // RGB of a gray image: the gray replicated, as PIL's L -> RGB.
  EXPECT_EQ(decode(file).pixels, replicate_gray(l.pixels));
}

TEST(ImageCodec, LumaIsPilsFormula) {
  // PIL: Image.new('RGB', (1, 1), c).convert('L') gives 76, 150, 29 for red, green, blue.
  EXPECT_EQ(luma_of(255, 0, 0), 76);
  EXPECT_EQ(luma_of(0, 255, 0), 150);
  EXPECT_EQ(luma_of(0, 0, 255), 29);
  EXPECT_EQ(luma_of(255, 255, 255), 255);
  EXPECT_EQ(luma_of(7, 7, 7), 7);
  // A colour JPEG read as L is luma_of its RGB decode, pixel by pixel (PIL decodes RGB, then converts).
  const Bytes rgb = smooth_image(40, 30, 3, 4);
  const Bytes file = encode_jpeg(rgb.data(), 40, 30, 3);
  const DecodedImage color = decode(file), l = decode(file, gray_request());
  ASSERT_EQ(l.pixels.size(), size_t(40 * 30));
  for (size_t i = 0; i < l.pixels.size(); ++i)
    ASSERT_EQ(l.pixels[i], luma_of(color.pixels[3 * i], color.pixels[3 * i + 1], color.pixels[3 * i + 2])) << i;
}

TEST(ImageCodec, AdobeCmykIsConvertedAsPilDoes) {
  // Stored (inverted) c, m, y, k = 255, 0, 128, 200: inks C 0, M 255, Y 127, K 55; PIL's cmyk2rgb:
  // R = 200 - 0, G = 200 - 200, B = 200 - MULDIV255(127, 200) = 200 - 100.
  const uint8_t cmyk[4] = {255, 0, 128, 200};
  uint8_t rgb[3];
  convert_pixels(cmyk, PixelLayout::AdobeCmyk, 1, rgb, 3);
  EXPECT_EQ(rgb[0], 200);
  EXPECT_EQ(rgb[1], 0);
  EXPECT_EQ(rgb[2], 100);
  uint8_t l;
  convert_pixels(cmyk, PixelLayout::AdobeCmyk, 1, &l, 1);
  EXPECT_EQ(l, luma_of(200, 0, 100));  // PIL goes CMYK -> RGB -> L
}

TEST(ImageCodec, CmykJpegDecodesToTheRgbEncoded) {
  // encode_jpeg's CMYK puts the darkness in K (stored k = max(r, g, b)) and c = r * 255 / k, so
  // the decode's c * k / 255 returns r up to the rounding of both (about a level) plus JPEG's
  // error. Measured MAE at quality 95: 0.64 (CMYK), 0.93 (YCCK 4:4:4), 1.37 (YCCK 4:2:0); bound 2.
  const int W = 80, H = 60;
  const Bytes rgb = smooth_image(W, H, 3, 1);
  for (bool ycck : {false, true})
    for (bool s420 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ycck " << ycck << " 4:2:0 " << s420);
      JpegEncodeOptions options;
      options.quality = 95;
      options.cmyk = true;
      options.ycck = ycck;
      options.subsample_420 = s420;
      const Bytes file = encode_jpeg(rgb.data(), W, H, 3, options);
      EXPECT_EQ(read_image_info(file.data(), file.size(), "c.jpg").stored_channels, 4);
      const DecodedImage image = decode(file);
      EXPECT_LT(mean_abs_error(image.pixels, rgb), 2.0);
      EXPECT_LE(max_abs_error(image.pixels, rgb), 20);
      const DecodedImage l = decode(file, gray_request());
      for (size_t i = 0; i < l.pixels.size(); ++i)
        ASSERT_EQ(l.pixels[i], luma_of(image.pixels[3 * i], image.pixels[3 * i + 1], image.pixels[3 * i + 2]));
    }
}

// Every chroma subsampling, progressive or not, gray and CMYK, at every scale: a region's decode
// equals the same pixels of a whole decode at that scale, bit for bit. Without the one-column
// margin the crop's edge columns differed by up to 9 levels (4:2:0, 4:2:2), 22 at 1/4 (4:2:2).
TEST(ImageCodec, JpegRegionEqualsWholeDecode) {
  struct Case {
    const char* sampling;
    bool progressive, cmyk;
    int channels;
  };
  const Case cases[] = {{"4:2:0", false, false, 3}, {"4:4:4", false, false, 3}, {"4:2:2", false, false, 3},
                        {"4:4:0", false, false, 3}, {"4:1:1", false, false, 3}, {"4:2:0", true, false, 3},
                        {"4:2:2", true, false, 3},  {"4:4:4", false, false, 1}, {"4:2:0", false, true, 3}};
  std::mt19937 rng(7);
  int index = 0;
  for (const Case& c : cases) {
    const int W = 93 + 11 * index, H = 61 + 5 * index;  // not multiples of any iMCU
    ++index;
    SCOPED_TRACE(::testing::Message() << c.sampling << " progressive " << c.progressive << " cmyk " << c.cmyk
                                      << " channels " << c.channels << " " << W << "x" << H);
    JpegEncodeOptions options;
    options.sampling = c.sampling;
    options.progressive = c.progressive;
    options.cmyk = c.cmyk;
    options.ycck = c.cmyk;
    const Bytes pixels = smooth_image(W, H, c.channels, index);
    const Bytes file = encode_jpeg(pixels.data(), W, H, c.channels, options);
    for (int step : {1, 2, 4, 8}) {
      const DecodedImage full = decode(file, request_for_step(step, std::nullopt, W));
      ASSERT_EQ(full.step, step);
      ASSERT_EQ(full.width, (W + step - 1) / step);
      ASSERT_EQ(full.height, (H + step - 1) / step);
      for (int t = 0; t < 12; ++t) {
        const int rw = step + int(rng() % (W - step)), rh = 1 + int(rng() % H);
        const PixelRect r{int(rng() % (W - rw + 1)), int(rng() % (H - rh + 1)), rw, rh};
        const DecodedImage part = decode(file, request_for_step(step, r, rw));
        ASSERT_EQ(part.step, step);
        // The smallest block of the step grid that covers the region.
        EXPECT_EQ(part.origin_x, r.x / step * step);
        EXPECT_EQ(part.origin_y, r.y / step * step);
        EXPECT_EQ(part.width, (r.x + r.width + step - 1) / step - r.x / step);
        EXPECT_EQ(part.height, (r.y + r.height + step - 1) / step - r.y / step);
        EXPECT_EQ(part.full_width, W);
        EXPECT_EQ(part.full_height, H);
        ASSERT_EQ(part.pixels, window_of(full, part)) << "step " << step << " region " << r.width << "x" << r.height
                                                      << " at " << r.x << "," << r.y;
      }
    }
  }
}

TEST(ImageCodec, DctScaleIsTheCoarsestThatKeepsTheMinimumSize) {
  const Bytes rgb = smooth_image(200, 100, 3, 5);
  const Bytes file = encode_jpeg(rgb.data(), 200, 100, 3);
  auto step_for = [&](int min_w, int min_h, std::optional<PixelRect> region = std::nullopt) {
    DecodeRequest r;
    r.region = region;
    r.min_width = min_w;
    r.min_height = min_h;
    return decode(file, r).step;
  };
  EXPECT_EQ(step_for(0, 0), 1);
  EXPECT_EQ(step_for(25, 12), 8);   // 200/8 = 25, 100/8 = 12
  EXPECT_EQ(step_for(25, 13), 4);   // 100/8 = 12 < 13
  EXPECT_EQ(step_for(12, 0), 8);
  EXPECT_EQ(step_for(0, 50), 2);
  EXPECT_EQ(step_for(101, 1), 1);
  EXPECT_EQ(step_for(12, 12, PixelRect{10, 10, 100, 50}), 4);  // the region's size counts: 50/8 < 12
  // PNG is always decoded at full scale.
  const Bytes png = encode_png(rgb.data(), 200, 100, 3);
  DecodeRequest r;
  r.min_width = r.min_height = 1;
  EXPECT_EQ(decode(png, r).step, 1);
}

TEST(ImageCodec, DctScaledDecodeIsCloseToABoxAverage) {
  // The scaled IDCT keeps the low frequencies, i.e. about the mean of each step x step block:
  // measured MAE vs the box average of the whole decode 0.39..1.18, max 11 (at 1/8, where the
  // last partial block row averages the encoder's edge padding too). Bounds: MAE 2, max 16.
  const int W = 80, H = 60;
  const Bytes rgb = smooth_image(W, H, 3, 1);
  for (bool s420 : {false, true}) {
    JpegEncodeOptions options;
    options.quality = 95;
    options.subsample_420 = s420;
    const Bytes file = encode_jpeg(rgb.data(), W, H, 3, options);
    const DecodedImage full = decode(file);
    for (int step : {2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "4:2:0 " << s420 << " step " << step);
      const DecodedImage scaled = decode(file, request_for_step(step, std::nullopt, W));
      ASSERT_EQ(scaled.step, step);
      ASSERT_EQ(scaled.width, (W + step - 1) / step);
      ASSERT_EQ(scaled.height, (H + step - 1) / step);
      EXPECT_EQ(scaled.origin_x, 0);
      EXPECT_EQ(scaled.origin_y, 0);
      Bytes box(scaled.pixels.size());
      for (int y = 0; y < scaled.height; ++y)
        for (int x = 0; x < scaled.width; ++x)
          for (int c = 0; c < 3; ++c) {
            double sum = 0;
            int n = 0;
            for (int yy = y * step; yy < std::min(H, (y + 1) * step); ++yy)
              for (int xx = x * step; xx < std::min(W, (x + 1) * step); ++xx, ++n)
                sum += full.pixels[(size_t(yy) * W + xx) * 3 + c];
            box[(size_t(y) * scaled.width + x) * 3 + c] = uint8_t(std::lround(sum / n));
          }
      EXPECT_LT(mean_abs_error(scaled.pixels, box), 2.0);
      EXPECT_LE(max_abs_error(scaled.pixels, box), 16);
    }
  }
}

TEST(ImageCodec, JpegExtraneousBytesAreIgnoredAsPilDoes) {
  // libjpeg warns "N extraneous bytes before marker" and decodes on; PIL ignores the warning.
  const Bytes rgb = smooth_image(32, 24, 3, 6);
  const Bytes file = encode_jpeg(rgb.data(), 32, 24, 3);
  ASSERT_EQ(file[file.size() - 2], 0xff);
  ASSERT_EQ(file[file.size() - 1], 0xd9);
  Bytes padded(file.begin(), file.end() - 2);
  padded.insert(padded.end(), {0x00, 0x01, 0x02, 0xff, 0xd9});
  EXPECT_EQ(decode(padded).pixels, decode(file).pixels);
}

// ---------------------------------------------------------------- EXIF

TEST(ImageCodec, ExifOrientationIsReadBack) {
  const Bytes rgb = smooth_image(16, 8, 3, 8);
  for (int orientation = 0; orientation <= 8; ++orientation) {
    JpegEncodeOptions options;
    options.exif_orientation = orientation;
    const Bytes file = encode_jpeg(rgb.data(), 16, 8, 3, options);
    const ImageInfo info = read_image_info(file.data(), file.size(), "o.jpg");
    EXPECT_EQ(info.orientation, orientation == 0 ? 1 : orientation);
    EXPECT_EQ(info.width, 16);  // as stored: the tag is only reported
    EXPECT_EQ(decode(file).width, 16);
  }
}

TEST(ImageCodec, ExifParserHandlesBothByteOrdersAndJunk) {
  // Little-endian ("II"), two entries, Orientation second.
  const Bytes le = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 2, 0,   //
                    0x0f, 0x01, 2, 0, 1, 0, 0, 0, 'x', 0, 0, 0,                        // Make
                    0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0};             // Orientation 6
  EXPECT_EQ(exif_orientation(le.data(), le.size()), 6);
  const Bytes be = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,  //
                    0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0};
  EXPECT_EQ(exif_orientation(be.data(), be.size()), 8);
  // Out of range, truncated anywhere, a wrong magic, an IFD offset past the end: 1.
  Bytes bad = be;
  bad[25] = 9;
  EXPECT_EQ(exif_orientation(bad.data(), bad.size()), 1);
  for (size_t n = 0; n < be.size(); ++n) EXPECT_EQ(exif_orientation(be.data(), n), 1) << n;
  bad = be;
  bad[9] = 43;
  EXPECT_EQ(exif_orientation(bad.data(), bad.size()), 1);
  bad = be;
  bad[13] = 200;
  EXPECT_EQ(exif_orientation(bad.data(), bad.size()), 1);
}

TEST(ImageCodec, ApplyOrientationRotatesAndFlipsAsPil) {
  // A 3x2 image whose pixel value says where it came from: 10 * y + x.
  DecodedImage image;
  image.width = image.full_width = 3;
  image.height = image.full_height = 2;
  image.channels = 1;
  image.pixels = {0, 1, 2, 10, 11, 12};
  // The expected results, row by row, as PIL's exif_transpose gives them.
  const std::vector<std::pair<int, Bytes>> expected = {
      {1, {0, 1, 2, 10, 11, 12}},  {2, {2, 1, 0, 12, 11, 10}},  {3, {12, 11, 10, 2, 1, 0}},
      {4, {10, 11, 12, 0, 1, 2}},  {5, {0, 10, 1, 11, 2, 12}},  {6, {10, 0, 11, 1, 12, 2}},
      {7, {12, 2, 11, 1, 10, 0}},  {8, {2, 12, 1, 11, 0, 10}}};
  for (const auto& [orientation, pixels] : expected) {
    const DecodedImage out = apply_orientation(image, orientation);
    EXPECT_EQ(out.pixels, pixels) << orientation;
    EXPECT_EQ(out.width, orientation >= 5 ? 2 : 3) << orientation;
    EXPECT_EQ(out.full_height, orientation >= 5 ? 3 : 2) << orientation;
  }
  // RGB pixels move whole; 6 then 8 is the identity.
  const Bytes rgb = smooth_image(5, 4, 3, 9);
  DecodedImage color;
  color.width = color.full_width = 5;
  color.height = color.full_height = 4;
  color.channels = 3;
  color.pixels = rgb;
  EXPECT_EQ(apply_orientation(apply_orientation(color, 6), 8).pixels, rgb);
  expect_error([&] { apply_orientation(color, 9); }, {"orientation 9"});
  DecodedImage part = color;
  part.origin_x = 1;
  expect_error([&] { apply_orientation(part, 3); }, {"whole decoded image"});
}

// ---------------------------------------------------------------- PNG

// Decodes `file` as RGB and as L and checks both against the pixels given (gray or RGB).
void expect_png_decodes_to(const Bytes& file, const Bytes& pixels, int width, int height, int channels,
                           int stored_channels) {
  const ImageInfo info = read_image_info(file.data(), file.size(), "p.png");
  EXPECT_EQ(info.format, ImageFormat::Png);
  EXPECT_EQ(info.width, width);
  EXPECT_EQ(info.height, height);
  EXPECT_EQ(info.stored_channels, stored_channels);
  EXPECT_EQ(info.orientation, 1);
  const DecodedImage rgb = decode(file);
  EXPECT_EQ(rgb.width, width);
  EXPECT_EQ(rgb.height, height);
  EXPECT_EQ(rgb.step, 1);
  EXPECT_EQ(rgb.pixels, channels == 3 ? pixels : replicate_gray(pixels));
  const DecodedImage l = decode(file, gray_request());
  if (channels == 1) {
    EXPECT_EQ(l.pixels, pixels);
  } else {
    ASSERT_EQ(l.pixels.size(), pixels.size() / 3);
    for (size_t i = 0; i < l.pixels.size(); ++i)
      ASSERT_EQ(l.pixels[i], luma_of(pixels[3 * i], pixels[3 * i + 1], pixels[3 * i + 2]));
  }
}

TEST(ImageCodec, PngRoundTripsExactly) {
  const int W = 37, H = 23;
  for (int channels : {1, 3}) {
    const Bytes smooth = smooth_image(W, H, channels, 10 + channels);
    const Bytes few = few_colour_image(W, H, channels, 200, 20 + channels);
    struct Case {
      const char* what;
      PngEncodeOptions options;
      const Bytes* pixels;
      int stored;  // read_image_info's stored_channels
    };
    PngEncodeOptions plain, sixteen, alpha, sixteen_alpha, palette, palette_trns, interlaced, interlaced_palette;
    sixteen.sixteen_bit = true;
    alpha.alpha = true;
    alpha.alpha_value = 77;  // any alpha: convert('RGB') drops it
    sixteen_alpha.sixteen_bit = sixteen_alpha.alpha = true;
    sixteen_alpha.alpha_value = 3;
    palette.palette = true;
    palette_trns.palette = palette_trns.alpha = true;
    palette_trns.alpha_value = 0;  // fully transparent: tRNS is ignored too
    interlaced.interlaced = true;
    interlaced_palette.interlaced = interlaced_palette.palette = true;
    const int color = channels == 1 ? 1 : 3;
    const Case cases[] = {{"8-bit", plain, &smooth, color},
                          {"16-bit (high byte)", sixteen, &smooth, color},
                          {"alpha dropped", alpha, &smooth, color},
                          {"16-bit + alpha", sixteen_alpha, &smooth, color},
                          {"palette", palette, &few, 3},
                          {"palette + tRNS", palette_trns, &few, 3},
                          {"interlaced", interlaced, &smooth, color},
                          {"interlaced palette", interlaced_palette, &few, 3}};
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << c.what << ", " << channels << " channels");
      const Bytes file = encode_png(c.pixels->data(), W, H, channels, c.options);
      expect_png_decodes_to(file, *c.pixels, W, H, channels, c.stored);
    }
  }
}

TEST(ImageCodec, LowBitGrayPngIsScaledTo8Bits) {
  // 1/2/4-bit gray values v become v * 255 / (2^bits - 1), as PIL's "1", "L;2", "L;4" modes:
  // images of those levels come back exactly.
  const int W = 29, H = 7;
  for (int bits : {1, 2, 4}) {
    const int levels = 1 << bits, unit = 255 / (levels - 1);
    Bytes gray(W * H);
    std::mt19937 rng(bits);
    for (uint8_t& v : gray) v = uint8_t(unit * int(rng() % levels));
    for (bool interlaced : {false, true}) {
      PngEncodeOptions options;
      options.gray_bit_depth = bits;
      options.interlaced = interlaced;
      const Bytes file = encode_png(gray.data(), W, H, 1, options);
      SCOPED_TRACE(::testing::Message() << bits << " bits, interlaced " << interlaced);
      expect_png_decodes_to(file, gray, W, H, 1, 1);
    }
  }
}

TEST(ImageCodec, PngRegionIsACropOfTheWholeDecode) {
  const int W = 41, H = 33;
  const Bytes rgb = smooth_image(W, H, 3, 12);
  std::mt19937 rng(3);
  for (bool interlaced : {false, true}) {
    PngEncodeOptions options;
    options.interlaced = interlaced;
    const Bytes file = encode_png(rgb.data(), W, H, 3, options);
    const DecodedImage full = decode(file);
    for (int t = 0; t < 20; ++t) {
      const int rw = 1 + int(rng() % W), rh = 1 + int(rng() % H);
      DecodeRequest request;
      request.region = PixelRect{int(rng() % (W - rw + 1)), int(rng() % (H - rh + 1)), rw, rh};
      request.min_width = 1;  // no DCT scaling for PNG
      const DecodedImage part = decode(file, request);
      EXPECT_EQ(part.origin_x, request.region->x);
      EXPECT_EQ(part.origin_y, request.region->y);
      EXPECT_EQ(part.width, rw);
      EXPECT_EQ(part.height, rh);
      EXPECT_EQ(part.step, 1);
      ASSERT_EQ(part.pixels, window_of(full, part));
    }
  }
}

TEST(ImageCodec, PaletteNeedsAtMost256Colours) {
  const Bytes rgb = smooth_image(40, 40, 3, 13);
  PngEncodeOptions options;
  options.palette = true;
  expect_error([&] { encode_png(rgb.data(), 40, 40, 3, options); }, {"256 colours"});
}

// ---------------------------------------------------------------- errors

// The CRC-32 PNG chunks carry, to forge a valid header.
uint32_t crc32_of(const uint8_t* data, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

void put_be32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24), p[1] = uint8_t(v >> 16), p[2] = uint8_t(v >> 8), p[3] = uint8_t(v);
}

TEST(ImageCodec, ErrorsNameTheFileAndTheFix) {
  const std::string name = "/data/train/cat/img_0042.jpg";
  auto info_error = [&](const Bytes& b) { return error_of([&] { read_image_info(b.data(), b.size(), name); }); };
  auto decode_error = [&](const Bytes& b) { return error_of([&] { decode_image(b.data(), b.size(), name); }); };
  auto expect_both = [&](const Bytes& b, const std::vector<std::string>& parts) {
    for (const std::string& message : {info_error(b), decode_error(b)}) {
      EXPECT_NE(message.find(name), std::string::npos) << message;
      for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  };
  expect_both({}, {"empty (0 bytes)", "remove it"});
  const std::string text = "class,label\ncat,0\n";
  expect_both(Bytes(text.begin(), text.end()),
              {"not a JPEG or PNG", "a text file", "convert it to JPEG or PNG, or remove it"});
  const std::string html = "<!DOCTYPE html><html><body>404</body></html>";
  expect_both(Bytes(html.begin(), html.end()), {"an HTML page"});
  expect_both({'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0}, {"a GIF image", "47 49 46 38 39 61"});
  expect_both({'B', 'M', 0x3e, 0, 0, 0, 0, 0, 0, 0, 0x36, 0}, {"a BMP image"});
  expect_both({'R', 'I', 'F', 'F', 0x24, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', ' '}, {"a WebP image"});
  std::mt19937 rng(5);
  Bytes random(300);
  for (uint8_t& b : random) b = uint8_t(rng());
  random[0] = 0x00;  // not a magic by chance
  expect_both(random, {"not a JPEG or PNG", "an unknown binary format"});

  const Bytes rgb = smooth_image(160, 120, 3, 14);
  const Bytes jpeg = encode_jpeg(rgb.data(), 160, 120, 3);
  const Bytes half_jpeg(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  EXPECT_NO_THROW(read_image_info(half_jpeg.data(), half_jpeg.size(), name));  // the header is whole
  const std::string jpeg_message = decode_error(half_jpeg);
  for (const char* part : {"truncated or corrupt JPEG", "Premature end of JPEG file", "--skip-bad"})
    EXPECT_NE(jpeg_message.find(part), std::string::npos) << jpeg_message;
  EXPECT_NE(jpeg_message.find(name), std::string::npos) << jpeg_message;
  // Also when the region lies above the cut: every row is still read, so whether a file fails
  // does not depend on the crop.
  DecodeRequest top;
  top.region = PixelRect{0, 0, 16, 8};
  expect_error([&] { decode_image(half_jpeg.data(), half_jpeg.size(), name, top); }, {name, "truncated"});
  const Bytes header_only(jpeg.begin(), jpeg.begin() + 20);
  expect_both(header_only, {"truncated or corrupt JPEG"});

  const Bytes png = encode_png(rgb.data(), 160, 120, 3);
  const Bytes half_png(png.begin(), png.begin() + png.size() / 2);
  const std::string png_message = decode_error(half_png);
  for (const char* part : {"truncated or corrupt PNG", "--skip-bad"})
    EXPECT_NE(png_message.find(part), std::string::npos) << png_message;
  EXPECT_NE(png_message.find(name), std::string::npos) << png_message;
  expect_error([&] { decode_image(half_png.data(), half_png.size(), name, top); }, {name, "truncated"});

  // Headers that claim more pixels than PIL's decompression-bomb limit are refused up front.
  Bytes huge_png = png;
  put_be32(&huge_png[16], 20000);  // IHDR width, height
  put_be32(&huge_png[20], 20000);
  put_be32(&huge_png[29], crc32_of(&huge_png[12], 17));
  expect_both(huge_png, {"20000x20000", "decompression-bomb"});
  Bytes huge_jpeg = jpeg;
  for (size_t i = 2; i + 8 < huge_jpeg.size(); ++i)
    if (huge_jpeg[i] == 0xff && huge_jpeg[i + 1] == 0xc0) {  // SOF0: length, precision, height, width
      huge_jpeg[i + 5] = huge_jpeg[i + 7] = 0xfd;
      huge_jpeg[i + 6] = huge_jpeg[i + 8] = 0xe8;  // 65000 x 65000
      break;
    }
  expect_both(huge_jpeg, {"65000x65000", "decompression-bomb"});

  // Requests that make no sense are errors too.
  DecodeRequest outside;
  outside.region = PixelRect{155, 0, 10, 10};
  expect_error([&] { decode_image(jpeg.data(), jpeg.size(), name, outside); }, {"outside", name});
  DecodeRequest two;
  two.channels = 2;
  expect_error([&] { decode_image(png.data(), png.size(), name, two); }, {"2 channels", name});
}

TEST(ImageCodec, TruncatedJpegFailsWhateverTheRegion) {
  // A region decode leaves the rows below it undecoded, yet a truncated file must fail for every
  // crop as it fails whole (the EOI check stands in for reading the rest). Every cut from the
  // first scan byte on, baseline and progressive; bytes after the EOI are harmless.
  const Bytes rgb = smooth_image(48, 40, 3, 17);
  JpegEncodeOptions progressive;
  progressive.progressive = true;
  for (const Bytes& file : {encode_jpeg(rgb.data(), 48, 40, 3), encode_jpeg(rgb.data(), 48, 40, 3, progressive)}) {
    DecodeRequest top, top_scaled;
    top.region = top_scaled.region = PixelRect{8, 0, 16, 8};
    top_scaled.min_width = 2;
    size_t first_cut = 0;
    for (size_t i = 2; i + 1 < file.size(); ++i)
      if (file[i] == 0xff && file[i + 1] == 0xda) first_cut = i + 2;  // the last SOS
    ASSERT_GT(first_cut, 0u);
    for (size_t n = first_cut; n < file.size(); ++n) {
      const Bytes cut(file.begin(), file.begin() + n);
      for (const DecodeRequest& request : {DecodeRequest{}, top, top_scaled})
        expect_error([&] { decode_image(cut.data(), cut.size(), "cut.jpg", request); },
                     {"cut.jpg", "Premature end of JPEG file"});
    }
    Bytes padded = file;
    padded.insert(padded.end(), {0, 0, 0x12, 0xff});
    EXPECT_EQ(decode(padded, top).pixels, decode(file, top).pixels);
    EXPECT_EQ(decode(padded).pixels, decode(file).pixels);
  }
}

// ---------------------------------------------------------------- fuzzing

// Decodes `bytes` (info, whole, and a region at a DCT scale when the header reads); anything but
// success or kiln::Error fails the test (a crash or a sanitizer report ends it).
void decode_or_error(const Bytes& bytes, std::mt19937& rng, int& decoded, int& refused) {
  try {
    const ImageInfo info = read_image_info(bytes.data(), bytes.size(), "fuzz");
    DecodeRequest request;
    request.channels = rng() % 2 ? 3 : 1;
    const DecodedImage whole = decode_image(bytes.data(), bytes.size(), "fuzz", request);
    EXPECT_EQ(whole.pixels.size(), size_t(whole.width) * whole.height * whole.channels);
    const int rw = 1 + int(rng() % info.width), rh = 1 + int(rng() % info.height);
    request.region = PixelRect{int(rng() % (info.width - rw + 1)), int(rng() % (info.height - rh + 1)), rw, rh};
    request.min_width = int(rng() % 4);
    request.min_height = int(rng() % 4);
    decode_image(bytes.data(), bytes.size(), "fuzz", request);
    ++decoded;
  } catch (const Error&) {
    ++refused;
  }
}

TEST(ImageCodec, FuzzedBytesDecodeOrThrowKilnError) {
  const auto start = std::chrono::steady_clock::now();
  std::mt19937 rng(2024);
  const Bytes rgb = smooth_image(24, 16, 3, 15);
  JpegEncodeOptions progressive;
  progressive.progressive = true;
  PngEncodeOptions interlaced_palette;
  interlaced_palette.interlaced = true;
  interlaced_palette.palette = true;
  const Bytes few = few_colour_image(24, 16, 3, 12, 16);
  const std::vector<Bytes> seeds = {encode_jpeg(rgb.data(), 24, 16, 3), encode_jpeg(rgb.data(), 24, 16, 3, progressive),
                                    encode_png(rgb.data(), 24, 16, 3),
                                    encode_png(few.data(), 24, 16, 3, interlaced_palette)};
  int decoded = 0, refused = 0;
  for (const Bytes& seed : seeds) {
    // Every truncation (those that lose only what follows the pixels, PNG's IEND, still decode).
    for (size_t n = 0; n <= seed.size(); ++n)
      decode_or_error(Bytes(seed.begin(), seed.begin() + n), rng, decoded, refused);
    // Random byte flips past the signature.
    for (int t = 0; t < 500; ++t) {
      Bytes mutated = seed;
      const int flips = 1 + int(rng() % 4);
      for (int f = 0; f < flips; ++f) mutated[8 + rng() % (mutated.size() - 8)] ^= uint8_t(1 + rng() % 255);
      decode_or_error(mutated, rng, decoded, refused);
    }
    // The signature followed by random bytes.
    for (int t = 0; t < 200; ++t) {
      Bytes random(seed.begin(), seed.begin() + 8);
      random.resize(8 + rng() % 600);
      for (size_t i = 8; i < random.size(); ++i) random[i] = uint8_t(rng());
      decode_or_error(random, rng, decoded, refused);
    }
  }
  for (int t = 0; t < 300; ++t) {  // random bytes of any kind
    Bytes random(rng() % 200);
    for (uint8_t& b : random) b = uint8_t(rng());
    decode_or_error(random, rng, decoded, refused);
  }
  EXPECT_GT(decoded, 4);  // the untouched files, at least
  EXPECT_GT(refused, 1000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz: %d decoded, %d refused in %.2f s\n", decoded, refused, seconds);
}

}  // namespace
}  // namespace kiln
