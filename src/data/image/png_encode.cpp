// 8-bit pixels -> PNG with libpng, for test data and packed datasets. The options produce each
// kind of PNG the decoder must handle: 16-bit, alpha, palette (+tRNS), Adam7, 1/2/4-bit gray.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>

#include "data/image/image_codec.h"
#include "data/image/png_errors.h"
#include "kiln/error.h"

namespace kiln {
namespace {


// Appends to a vector; a failed allocation becomes a libpng error once the exception is caught.
void write_to_vector(png_structp png, png_bytep data, size_t count) {
  auto* bytes = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    bytes->insert(bytes->end(), data, data + count);
  } catch (const std::bad_alloc&) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");
}

void flush_nothing(png_structp) {}


// The image as a palette and one index per pixel (channels 1 or 3); throws when over 256 colours.
void to_palette(const uint8_t* pixels, size_t count, int channels, std::vector<png_color>& palette,
                std::vector<uint8_t>& indices) {
  std::map<uint32_t, uint8_t> index_of;
  indices.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* p = pixels + i * channels;
    const uint8_t r = p[0], g = p[channels == 3 ? 1 : 0], b = p[channels == 3 ? 2 : 0];
    const uint32_t key = uint32_t(r) << 16 | g << 8 | b;
    auto it = index_of.find(key);
    if (it == index_of.end()) {
      if (index_of.size() == 256) fail("encode_png: a palette PNG holds at most 256 colours; this image has more");
      it = index_of.emplace(key, uint8_t(index_of.size())).first;
      palette.push_back(png_color{r, g, b});
    }
    indices[i] = it->second;
  }
}

}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels,
                                const PngEncodeOptions& options) {
  if (width <= 0 || height <= 0) fail("encode_png: {}x{} is not an image size", width, height);
  if (channels != 1 && channels != 3) fail("encode_png: {} channels; 1 (gray) or 3 (RGB) are supported", channels);
  const int gray_bits = options.gray_bit_depth;
  if (gray_bits != 1 && gray_bits != 2 && gray_bits != 4 && gray_bits != 8)
    fail("encode_png: gray_bit_depth {} is not 1, 2, 4 or 8", gray_bits);
  if (gray_bits != 8 && (channels != 1 || options.alpha || options.sixteen_bit || options.palette))
    fail("encode_png: gray_bit_depth {} needs plain gray input (no alpha, 16-bit or palette)", gray_bits);
  if (options.palette && options.sixteen_bit) fail("encode_png: a palette PNG cannot be 16-bit");

  // Each row as libpng is given it: one byte per sample (packed by libpng below 8 bits), two
  // big-endian bytes for 16-bit, an alpha sample after each pixel.
  const size_t count = size_t(width) * height;
  std::vector<png_color> palette;
  std::vector<uint8_t> samples;
  int color_type, bit_depth = options.sixteen_bit ? 16 : 8;
  if (options.palette) {
    to_palette(pixels, count, channels, palette, samples);
    color_type = PNG_COLOR_TYPE_PALETTE;
  } else {
    color_type = (channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB) |
                 (options.alpha ? PNG_COLOR_MASK_ALPHA : 0);
    const int stored_channels = channels + (options.alpha ? 1 : 0);
    const int bytes_per_sample = options.sixteen_bit ? 2 : 1;
    samples.resize(count * stored_channels * bytes_per_sample);
    uint8_t* s = samples.data();
    for (size_t i = 0; i < count; ++i) {
      for (int c = 0; c <= channels; ++c) {
        if (c == channels && !options.alpha) break;
        uint8_t v = c == channels ? options.alpha_value : pixels[i * channels + c];
        if (gray_bits != 8) v = uint8_t(v >> (8 - gray_bits));
        *s++ = v;
        if (options.sixteen_bit) *s++ = v;  // v * 257: the high byte and the low byte are both v
      }
    }
    if (gray_bits != 8) bit_depth = gray_bits;
  }
  const size_t row_bytes = samples.size() / height;
  std::vector<png_bytep> rows(height);
  for (int y = 0; y < height; ++y) rows[y] = samples.data() + size_t(y) * row_bytes;
  const std::vector<png_byte> trns(palette.size(), options.alpha_value);

  std::vector<uint8_t> bytes;
  PngErrors errors;
  std::memset(&errors, 0, sizeof errors);
  png_structp png = nullptr;
  png_infop info = nullptr;
  const bool ok = guarded(errors, [&] {
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &errors, png_jump_on_error, png_ignore_warning);
    if (png == nullptr) return;
    info = png_create_info_struct(png);
    if (info == nullptr) png_error(png, "out of memory");
    png_set_write_fn(png, &bytes, write_to_vector, flush_nothing);
    png_set_IHDR(png, info, png_uint_32(width), png_uint_32(height), bit_depth, color_type,
                 options.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (options.palette) {
      png_set_PLTE(png, info, palette.data(), int(palette.size()));
      if (options.alpha) png_set_tRNS(png, info, trns.data(), int(trns.size()), nullptr);
    }
    png_write_info(png, info);
    if (bit_depth < 8) png_set_packing(png);
    png_write_image(png, rows.data());  // handles the Adam7 passes itself
    png_write_end(png, info);
  });
  const bool created = png != nullptr;
  png_destroy_write_struct(&png, &info);
  if (!created) fail("encode_png: out of memory");
  if (!ok) fail("encode_png ({}x{}, {} channels): {}", width, height, channels, errors.message);
  return bytes;
}

}  // namespace kiln
