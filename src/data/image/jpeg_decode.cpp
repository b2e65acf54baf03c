// JPEG -> 8-bit pixels with libjpeg-turbo's libjpeg API, as PIL decodes them (libjpeg's default
// settings: JDCT_ISLOW, fancy upsampling), plus partial decoding (only the rows and iMCU columns
// a region needs: jpeg_skip_scanlines, jpeg_crop_scanline) and DCT scaling (1/2, 1/4, 1/8).
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>

#include "data/image/image_codec.h"
#include "data/image/jpeg_errors.h"
#include "kiln/error.h"

namespace kiln {
namespace {


// Warnings (level -1) are corrupt data libjpeg recovers from; PIL ignores them, and so do we,
// except running out of data (the in-memory source then feeds a fake EOI and libjpeg would fill
// the rest of the image with gray): that is a truncated file, which PIL refuses too.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_jump_on_error(cinfo);
}


class Decompressor {
 public:
  explicit Decompressor(const std::string& name) : name_(name) {
    std::memset(&cinfo, 0, sizeof cinfo);  // jpeg_destroy_decompress accepts a zeroed struct
    std::memset(&errors_, 0, sizeof errors_);
    cinfo.err = jpeg_std_error(&errors_.pub);
    errors_.pub.error_exit = jpeg_jump_on_error;
    errors_.pub.emit_message = on_message;
  }
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }
  Decompressor(const Decompressor&) = delete;
  Decompressor& operator=(const Decompressor&) = delete;

  // Runs `body` (see guarded()); a libjpeg failure becomes a kiln::Error naming the file.
  template <class Body>
  void run(Body&& body) {
    if (!guarded(errors_, body)) fail_corrupt(errors_.message);
  }

  [[noreturn]] void fail_corrupt(const char* message) const {
    fail("truncated or corrupt JPEG '{}': {}; re-encode or remove the file, or pass --skip-bad", name_, message);
  }

  // Reads the header (and the APP1 markers with `save_app1`) and checks what kiln can decode.
  void open(const uint8_t* bytes, size_t size, bool save_app1) {
    run([&] {
      jpeg_create_decompress(&cinfo);
      jpeg_mem_src(&cinfo, bytes, static_cast<unsigned long>(size));
      if (save_app1) jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
      jpeg_read_header(&cinfo, TRUE);
    });
    scan_data = cinfo.src->next_input_byte;  // jpeg_read_header stops right after the SOS header
    end = bytes + size;
    if (cinfo.num_components != 1 && cinfo.num_components != 3 && cinfo.num_components != 4)
      fail("'{}' is a JPEG with {} colour components; kiln reads 1 (gray), 3 (YCbCr/RGB) or 4 (CMYK/YCCK): "
           "convert it to RGB, or remove it", name_, cinfo.num_components);
    check_image_size(cinfo.image_width, cinfo.image_height, name_);
  }

  jpeg_decompress_struct cinfo;
  const uint8_t* scan_data = nullptr;  // the first scan's entropy-coded data
  const uint8_t* end = nullptr;        // of the file

 private:
  JpegErrors errors_;
  const std::string& name_;
};

// Whether an EOI marker (FF D9) lies in [from, end). Inside entropy-coded data a 0xff byte is
// always followed by 0x00 (byte stuffing) or a restart marker, so an FF D9 after the scan's start
// is where libjpeg stops; without one it would run out of data before the image ends.
bool has_eoi(const uint8_t* from, const uint8_t* end) {
  for (const uint8_t* p = end - 1; p > from; --p)  // backwards: EOI is nearly always at the end
    if (*p == 0xd9 && p[-1] == 0xff) return true;
  return false;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The coarsest DCT scale at which the region still spans min_width x min_height decoded pixels.
int dct_step(const PixelRect& region, const DecodeRequest& request) {
  if (request.min_width <= 0 && request.min_height <= 0) return 1;
  for (int step : {8, 4, 2})
    if (region.width / step >= request.min_width && region.height / step >= request.min_height) return step;
  return 1;
}

}  // namespace

int exif_orientation(const uint8_t* app1, size_t size) {
  if (size < 6 || std::memcmp(app1, "Exif\0\0", 6) != 0) return 1;
  const uint8_t* tiff = app1 + 6;
  const size_t n = size - 6;
  if (n < 8) return 1;
  bool little;
  if (tiff[0] == 'I' && tiff[1] == 'I') little = true;
  else if (tiff[0] == 'M' && tiff[1] == 'M') little = false;
  else return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? tiff[at] | tiff[at + 1] << 8 : tiff[at] << 8 | tiff[at + 1];
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return little ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd < 8 || ifd > n - 2) return 1;
  const size_t entries = u16(ifd);
  for (size_t i = 0; i < entries; ++i) {
    const size_t entry = ifd + 2 + 12 * i;
    if (entry + 12 > n) break;
    if (u16(entry) != 0x0112) continue;  // Orientation
    const uint32_t type = u16(entry + 2), count = u32(entry + 4);
    if (count != 1 || (type != 3 && type != 4)) return 1;  // SHORT (the standard) or LONG
    const uint32_t value = type == 3 ? u16(entry + 8) : u32(entry + 8);
    return value >= 1 && value <= 8 ? int(value) : 1;
  }
  return 1;
}

ImageInfo read_jpeg_info(const uint8_t* bytes, size_t size, const std::string& name) {
  Decompressor d(name);
  d.open(bytes, size, /*save_app1=*/true);
  ImageInfo info;
  info.format = ImageFormat::Jpeg;
  info.width = int(d.cinfo.image_width);
  info.height = int(d.cinfo.image_height);
  info.stored_channels = d.cinfo.num_components;
  // The first Exif APP1 counts, as in PIL.
  for (jpeg_saved_marker_ptr m = d.cinfo.marker_list; m != nullptr; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      info.orientation = exif_orientation(m->data, m->data_length);
      break;
    }
  return info;
}

DecodedImage decode_jpeg(const uint8_t* bytes, size_t size, const std::string& name, const DecodeRequest& request) {
  Decompressor d(name);
  d.open(bytes, size, /*save_app1=*/false);
  jpeg_decompress_struct& c = d.cinfo;
  const int full_width = int(c.image_width), full_height = int(c.image_height);
  const PixelRect region = requested_region(request, full_width, full_height, name);
  const int step = dct_step(region, request);
  const PixelLayout layout = c.num_components == 1   ? PixelLayout::Gray
                             : c.num_components == 3 ? PixelLayout::Rgb
                                                     : PixelLayout::AdobeCmyk;
  // libjpeg turns YCbCr (or RGB) into RGB and YCCK into CMYK; PIL's conversions do the rest.
  c.out_color_space = c.num_components == 1 ? JCS_GRAYSCALE : c.num_components == 3 ? JCS_RGB : JCS_CMYK;
  c.scale_num = 1;
  c.scale_denom = unsigned(step);
  c.dct_method = JDCT_ISLOW;      // libjpeg's default, as PIL leaves it
  c.do_fancy_upsampling = TRUE;   // likewise (it also keeps the merged upsampler, with its
                                  // partial-decoding bugs, out of the way)
  bool multiple_scans = false;
  d.run([&] {
    jpeg_start_decompress(&c);
    multiple_scans = jpeg_has_multiple_scans(&c);
  });

  // The block of the scaled output grid that covers the region.
  const int out_w = int(c.output_width), out_h = int(c.output_height);
  const int x0 = region.x / step, x1 = std::min(out_w, ceil_div(region.x + region.width, step));
  const int y0 = region.y / step, y1 = std::min(out_h, ceil_div(region.y + region.height, step));
  // jpeg_crop_scanline rounds the crop's left edge down to an iMCU boundary, and fancy upsampling
  // treats the crop's edges as the image's: the columns there blend their chroma differently from
  // a whole decode (up to 9 levels at full scale with 4:2:0; 4:2:2 also at 1/2 and 1/4). The
  // filters reach only the adjacent chroma sample, so one decoded column beyond the region on
  // each side keeps the region bit-identical (the tests check every subsampling and scale).
  // Rows need no margin: jpeg_skip_scanlines decodes the iMCU row above for upsampling context.
  const int margin = 1;
  JDIMENSION crop_x = JDIMENSION(std::max(0, x0 - margin));
  JDIMENSION crop_w = JDIMENSION(std::min(out_w, x1 + margin)) - crop_x;
  d.run([&] {
    if (int(crop_w) < out_w) jpeg_crop_scanline(&c, &crop_x, &crop_w);
    if (y0 > 0) jpeg_skip_scanlines(&c, JDIMENSION(y0));
  });

  DecodedImage out;
  out.width = x1 - x0;
  out.height = y1 - y0;
  out.channels = request.channels;
  out.origin_x = x0 * step;
  out.origin_y = y0 * step;
  out.step = step;
  out.full_width = full_width;
  out.full_height = full_height;
  out.pixels.resize(size_t(out.width) * out.height * out.channels);
  std::vector<uint8_t> row(size_t(c.output_width) * c.output_components);
  const size_t row_offset = size_t(x0 - int(crop_x)) * c.output_components;
  bool complete = true;
  d.run([&] {
    JSAMPROW samples = row.data();
    while (int(c.output_scanline) < y1) {
      const int y = int(c.output_scanline);
      if (jpeg_read_scanlines(&c, &samples, 1) != 1) {
        complete = false;
        return;
      }
      if (y >= y0)
        convert_pixels(row.data() + row_offset, layout, size_t(out.width),
                       out.pixels.data() + size_t(y - y0) * out.width * out.channels, out.channels);
    }
    if (c.output_scanline == c.output_height) jpeg_finish_decompress(&c);  // reads on to EOI
  });
  if (!complete) d.fail_corrupt("libjpeg returned no scanline");
  // The rows below the region are left undecoded. A whole decode would fail there if the file is
  // truncated, and a file must not fail for some crops only: a single-scan JPEG's remaining data
  // is complete iff an EOI marker follows its scan data (multi-scan and progressive JPEGs were
  // read to EOI by jpeg_start_decompress). libjpeg's own message, so both paths read alike.
  if (c.output_scanline < c.output_height && !multiple_scans && !has_eoi(d.scan_data, d.end))
    d.fail_corrupt("Premature end of JPEG file");
  return out;
}

}  // namespace kiln
