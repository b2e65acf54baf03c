// Format sniffing and dispatch, the pixel conversions both decoders share (PIL's formulas), and
// EXIF orientation applied to decoded pixels.
#include "data/image/image_codec.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string_view>

#include "kiln/error.h"

namespace kiln {
namespace {

using namespace std::string_view_literals;  // "..."sv keeps the magics' NUL bytes

bool starts_with(const uint8_t* bytes, size_t size, std::string_view magic, size_t offset = 0) {
  return size >= offset + magic.size() && std::memcmp(bytes + offset, magic.data(), magic.size()) == 0;
}

bool looks_like_text(const uint8_t* bytes, size_t size) {
  for (size_t i = 0; i < std::min<size_t>(size, 512); ++i) {
    const uint8_t c = bytes[i];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') || c == 0x7f) return false;
  }
  return true;
}

std::string lowercase_prefix(const uint8_t* bytes, size_t size, size_t n) {
  std::string s;
  for (size_t i = 0; i < std::min(size, n); ++i) s += char(std::tolower(bytes[i]));
  return s;
}

// What a file that is neither JPEG nor PNG seems to be, so the message says what to convert from.
// The formats PIL opens come first: torchvision would have read them.
std::string describe_non_image(const uint8_t* bytes, size_t size) {
  if (starts_with(bytes, size, "GIF87a"sv) || starts_with(bytes, size, "GIF89a"sv)) return "a GIF image";
  if (starts_with(bytes, size, "BM"sv) && !looks_like_text(bytes, size)) return "a BMP image";
  if (starts_with(bytes, size, "RIFF"sv) && starts_with(bytes, size, "WEBP"sv, 8)) return "a WebP image";
  if (starts_with(bytes, size, "II*\0"sv) || starts_with(bytes, size, "MM\0*"sv)) return "a TIFF image";
  if (starts_with(bytes, size, "ftypavif"sv, 4) || starts_with(bytes, size, "ftypavis"sv, 4)) return "an AVIF image";
  if (starts_with(bytes, size, "ftyphei"sv, 4) || starts_with(bytes, size, "ftypmif1"sv, 4)) return "a HEIC image";
  if (starts_with(bytes, size, "\0\0\0\x0cjP  "sv)) return "a JPEG 2000 image";
  if (starts_with(bytes, size, "\0\0\1\0"sv)) return "an ICO icon";
  if (starts_with(bytes, size, "%PDF"sv)) return "a PDF document";
  if (starts_with(bytes, size, "PK\3\4"sv)) return "a ZIP archive";
  if (starts_with(bytes, size, "\x1f\x8b"sv)) return "a gzip archive";
  if (size >= 2 && bytes[0] == 0xff && bytes[1] == 0xd8) return "a damaged JPEG (no marker after SOI)";
  if (looks_like_text(bytes, size)) {
    std::string head = lowercase_prefix(bytes, size, 256);
    head.erase(0, head.find_first_not_of(" \t\r\n\f"));
    if (head.rfind("<!doctype html", 0) == 0 || head.rfind("<html", 0) == 0) return "an HTML page (a failed download?)";
    if (head.rfind("<svg", 0) == 0 || head.find("<svg") != std::string::npos) return "an SVG drawing";
    if (head.rfind("<?xml", 0) == 0) return "an XML file";
    return "a text file";
  }
  return "an unknown binary format";
}

std::string first_bytes_hex(const uint8_t* bytes, size_t size) {
  std::string hex;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) hex += fmt::format("{}{:02x}", i ? " " : "", bytes[i]);
  return hex;
}

ImageFormat format_or_fail(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size == 0 || bytes == nullptr)
    fail("'{}' is empty (0 bytes), not an image; re-copy it from its source, or remove it", name);
  if (std::optional<ImageFormat> format = sniff_image_format(bytes, size)) return *format;
  fail("'{}' is not a JPEG or PNG image: it looks like {} (first bytes: {}); convert it to JPEG or PNG, or "
       "remove it", name, describe_non_image(bytes, size), first_bytes_hex(bytes, size));
}

// PIL's MULDIV255: a * b / 255, rounded, without a division.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// PIL's cmyk2rgb of the inverted samples ("CMYK;I"): with ink C = 255 - stored c and
// K = 255 - stored k, R = (255 - K) - (C * (255 - K)) / 255.
inline void adobe_cmyk_to_rgb(const uint8_t* in, uint8_t* rgb) {
  const int nk = in[3];  // 255 - K
  for (int c = 0; c < 3; ++c) rgb[c] = uint8_t(std::clamp(nk - muldiv255(255 - in[c], nk), 0, 255));
}

}  // namespace

std::optional<ImageFormat> sniff_image_format(const uint8_t* bytes, size_t size) {
  // JPEG: SOI then the next marker's 0xff, as PIL's JpegImagePlugin accepts.
  if (starts_with(bytes, size, "\xff\xd8\xff"sv)) return ImageFormat::Jpeg;
  if (starts_with(bytes, size, "\x89PNG\r\n\x1a\n"sv)) return ImageFormat::Png;
  return std::nullopt;
}

ImageInfo read_image_info(const uint8_t* bytes, size_t size, const std::string& name) {
  return format_or_fail(bytes, size, name) == ImageFormat::Jpeg ? read_jpeg_info(bytes, size, name)
                                                                 : read_png_info(bytes, size, name);
}

DecodedImage decode_image(const uint8_t* bytes, size_t size, const std::string& name, const DecodeRequest& request) {
  return format_or_fail(bytes, size, name) == ImageFormat::Jpeg ? decode_jpeg(bytes, size, name, request)
                                                                 : decode_png(bytes, size, name, request);
}

void check_image_size(int64_t width, int64_t height, const std::string& name) {
  if (width <= 0 || height <= 0) fail("'{}' claims a {}x{} image; re-encode or remove the file", name, width, height);
  if (width * height > kMaxImagePixels)
    fail("'{}' is {}x{} = {} pixels, over the limit of {} (PIL's decompression-bomb limit); downscale it or remove it",
         name, width, height, width * height, kMaxImagePixels);
}

PixelRect requested_region(const DecodeRequest& request, int width, int height, const std::string& name) {
  if (request.channels != 1 && request.channels != 3)
    fail("decoding '{}' as {} channels: only 1 (L) or 3 (RGB) are supported", name, request.channels);
  if (!request.region) return {0, 0, width, height};
  const PixelRect& r = *request.region;
  if (r.x < 0 || r.y < 0 || r.width <= 0 || r.height <= 0 || r.x > width - r.width || r.y > height - r.height)
    fail("decode region {}x{} at ({}, {}) lies outside '{}' ({}x{})", r.width, r.height, r.x, r.y, name, width, height);
  return r;
}

int channels_of(PixelLayout layout) {
  switch (layout) {
    case PixelLayout::Gray: return 1;
    case PixelLayout::GrayAlpha: return 2;
    case PixelLayout::Rgb: return 3;
    case PixelLayout::Rgba: return 4;
    case PixelLayout::AdobeCmyk: return 4;
  }
  return 0;
}

void convert_pixels(const uint8_t* in, PixelLayout layout, size_t count, uint8_t* out, int out_channels) {
  const int step = channels_of(layout);
  const bool gray = layout == PixelLayout::Gray || layout == PixelLayout::GrayAlpha;
  if (out_channels == 1) {
    for (size_t i = 0; i < count; ++i, in += step) {
      if (gray) {
        out[i] = in[0];
      } else if (layout == PixelLayout::AdobeCmyk) {
        uint8_t rgb[3];
        adobe_cmyk_to_rgb(in, rgb);
        out[i] = luma_of(rgb[0], rgb[1], rgb[2]);
      } else {
        out[i] = luma_of(in[0], in[1], in[2]);
      }
    }
    return;
  }
  if (layout == PixelLayout::Rgb) {
    std::memcpy(out, in, count * 3);
    return;
  }
  for (size_t i = 0; i < count; ++i, in += step, out += 3) {
    if (gray) {
      out[0] = out[1] = out[2] = in[0];
    } else if (layout == PixelLayout::AdobeCmyk) {
      adobe_cmyk_to_rgb(in, out);
    } else {
      out[0] = in[0], out[1] = in[1], out[2] = in[2];
    }
  }
}

DecodedImage apply_orientation(const DecodedImage& image, int orientation) {
  if (orientation < 1 || orientation > 8) fail("EXIF orientation {} is not one of 1..8", orientation);
  const int s = image.step;
  if (image.origin_x != 0 || image.origin_y != 0 || image.width != (image.full_width + s - 1) / s ||
      image.height != (image.full_height + s - 1) / s)
    fail("apply_orientation needs a whole decoded image, got a {}x{} block at ({}, {}) of a {}x{} image",
         image.width, image.height, image.origin_x, image.origin_y, image.full_width, image.full_height);
  if (orientation == 1) return image;
  const bool swap = orientation >= 5;
  const int W = image.width, H = image.height, C = image.channels;
  DecodedImage out = image;
  if (swap) {
    std::swap(out.width, out.height);
    std::swap(out.full_width, out.full_height);
  }
  // For each output pixel (x, y), the source pixel (sx, sy), as PIL's exif_transpose maps them:
  // 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90
  // counter-clockwise.
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;
      switch (orientation) {
        case 2: sx = W - 1 - x; break;
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;
        case 4: sy = H - 1 - y; break;
        case 5: sx = y, sy = x; break;
        case 6: sx = y, sy = H - 1 - x; break;
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;
        case 8: sx = W - 1 - y, sy = x; break;
      }
      std::memcpy(&out.pixels[(size_t(y) * out.width + x) * C], &image.pixels[(size_t(sy) * W + sx) * C], C);
    }
  return out;
}

}  // namespace kiln
