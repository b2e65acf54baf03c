// PNG -> 8-bit pixels with libpng, as PIL's convert('RGB') / convert('L') sees them: palettes
// expanded, alpha and tRNS dropped, 1/2/4-bit gray scaled to 8 bits, 16-bit samples cut to their
// high byte, Adam7 interlacing undone. PNG has no partial decoding: a region is cropped from the
// rows as they are decoded.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "data/image/image_codec.h"
#include "data/image/png_errors.h"
#include "kiln/error.h"

namespace kiln {
namespace {


struct MemorySource {
  const uint8_t* bytes;
  size_t size, pos;
};

void read_from_memory(png_structp png, png_bytep out, size_t count) {
  auto* source = static_cast<MemorySource*>(png_get_io_ptr(png));
  if (count > source->size - source->pos) png_error(png, "unexpected end of file (the file is truncated)");
  std::memcpy(out, source->bytes + source->pos, count);
  source->pos += count;
}


// libpng's read and info structs, destroyed however the reader ends (a member, so also when the
// reader's constructor throws).
struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngHandles() = default;
  PngHandles(const PngHandles&) = delete;
  PngHandles& operator=(const PngHandles&) = delete;
  ~PngHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// Reads the header on construction and checks the image's size.
class PngReader {
 public:
  PngReader(const uint8_t* bytes, size_t size, const std::string& name) : source_{bytes, size, 0}, name_(name) {
    std::memset(&errors_, 0, sizeof errors_);
    run([&] {
      h_.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &errors_, png_jump_on_error, png_ignore_warning);
      if (h_.png == nullptr) return;
      h_.info = png_create_info_struct(h_.png);
      if (h_.info == nullptr) return;
      png_set_read_fn(h_.png, &source_, read_from_memory);
      png_read_info(h_.png, h_.info);
    });
    if (h_.png == nullptr || h_.info == nullptr) fail("cannot decode PNG '{}': out of memory", name_);
    check_image_size(png_get_image_width(h_.png, h_.info), png_get_image_height(h_.png, h_.info), name_);
  }

  // Runs `body` (see guarded()); a libpng failure becomes a kiln::Error naming the file.
  template <class Body>
  void run(Body&& body) {
    if (!guarded(errors_, body))
      fail("truncated or corrupt PNG '{}': {}; re-encode or remove the file, or pass --skip-bad", name_,
           errors_.message);
  }

  png_structp png() const { return h_.png; }
  png_infop info() const { return h_.info; }

 private:
  PngHandles h_;
  MemorySource source_;
  PngErrors errors_;
  const std::string& name_;
};

bool is_gray(int color_type) { return (color_type & PNG_COLOR_MASK_COLOR) == 0; }

}  // namespace

ImageInfo read_png_info(const uint8_t* bytes, size_t size, const std::string& name) {
  PngReader reader(bytes, size, name);
  ImageInfo info;
  info.format = ImageFormat::Png;
  info.width = int(png_get_image_width(reader.png(), reader.info()));
  info.height = int(png_get_image_height(reader.png(), reader.info()));
  info.stored_channels = is_gray(png_get_color_type(reader.png(), reader.info())) ? 1 : 3;
  return info;
}

DecodedImage decode_png(const uint8_t* bytes, size_t size, const std::string& name, const DecodeRequest& request) {
  PngReader reader(bytes, size, name);
  png_structp png = reader.png();
  png_infop info = reader.info();
  const int width = int(png_get_image_width(png, info)), height = int(png_get_image_height(png, info));
  const PixelRect region = requested_region(request, width, height, name);
  const int color_type = png_get_color_type(png, info), bit_depth = png_get_bit_depth(png, info);
  const bool interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;

  // Transformations to 8-bit gray, gray+alpha, RGB or RGBA rows (palette+tRNS becomes RGBA);
  // convert_pixels then drops alpha, as convert('RGB') ignores transparency.
  int passes = 1;
  size_t row_bytes = 0;
  int row_channels = 0;
  reader.run([&] {
    if (bit_depth == 16) png_set_strip_16(png);  // the high byte, as PIL's ";16B" raw modes read it
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (is_gray(color_type) && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);  // v * 255 / (2^bits - 1)
    if (interlaced) passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    row_bytes = png_get_rowbytes(png, info);
    row_channels = png_get_channels(png, info);
  });
  if (row_bytes != size_t(width) * row_channels || row_channels < 1 || row_channels > 4)
    fail("cannot decode PNG '{}': unexpected {}-channel rows of {} bytes for width {}", name, row_channels, row_bytes,
         width);
  const PixelLayout layout = row_channels == 1   ? PixelLayout::Gray
                             : row_channels == 2 ? PixelLayout::GrayAlpha
                             : row_channels == 3 ? PixelLayout::Rgb
                                                 : PixelLayout::Rgba;

  DecodedImage out;
  out.width = region.width;
  out.height = region.height;
  out.channels = request.channels;
  out.origin_x = region.x;
  out.origin_y = region.y;
  out.full_width = width;
  out.full_height = height;
  out.pixels.resize(size_t(out.width) * out.height * out.channels);
  auto keep_row = [&](const uint8_t* row, int y) {
    if (y < region.y || y >= region.y + region.height) return;
    convert_pixels(row + size_t(region.x) * row_channels, layout, size_t(region.width),
                   out.pixels.data() + size_t(y - region.y) * out.width * out.channels, out.channels);
  };
  // Every row is decoded, those outside the region too: a file truncated below the region fails
  // as a whole decode would. Interlaced passes each add pixels to every row, so they need the
  // whole image; otherwise one row at a time.
  std::vector<uint8_t> rows(row_bytes * (interlaced ? size_t(height) : 1));
  reader.run([&] {
    for (int pass = 0; pass < passes; ++pass)
      for (int y = 0; y < height; ++y) {
        uint8_t* row = rows.data() + (interlaced ? size_t(y) * row_bytes : 0);
        png_read_row(png, row, nullptr);
        if (!interlaced) keep_row(row, y);
      }
  });
  if (interlaced)
    for (int y = region.y; y < region.y + region.height; ++y) keep_row(rows.data() + size_t(y) * row_bytes, y);
  return out;
}

}  // namespace kiln
