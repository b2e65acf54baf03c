// 8-bit pixels -> JPEG with libjpeg-turbo, for test data and packed datasets: baseline or
// progressive, 4:2:0 or 4:4:4, gray, Adobe-style CMYK/YCCK, an optional EXIF orientation.
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <map>
#include <new>
#include <string>

#include "data/image/image_codec.h"
#include "data/image/jpeg_errors.h"
#include "kiln/error.h"

namespace kiln {
namespace {

void ignore_message(j_common_ptr, int) {}


// A destination manager that grows a std::vector (jpeg_mem_dest's buffer leaks when libjpeg
// fails midway). An allocation failure is reported to libjpeg as its own out-of-memory error,
// after the exception is caught: nothing may unwind through libjpeg.
struct VectorSink {
  jpeg_destination_mgr pub;  // first: libjpeg hands callbacks a jpeg_destination_mgr*
  std::vector<uint8_t> bytes;

  static VectorSink* of(j_compress_ptr cinfo) { return reinterpret_cast<VectorSink*>(cinfo->dest); }

  static bool grow(j_compress_ptr cinfo, size_t used, size_t new_size) {
    VectorSink* sink = of(cinfo);
    try {
      sink->bytes.resize(new_size);
    } catch (const std::bad_alloc&) {
      return false;
    }
    sink->pub.next_output_byte = sink->bytes.data() + used;
    sink->pub.free_in_buffer = new_size - used;
    return true;
  }
  static void init(j_compress_ptr cinfo) {
    if (!grow(cinfo, 0, 1 << 16)) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
  }
  static boolean empty(j_compress_ptr cinfo) {  // called only when the buffer is full
    const size_t used = of(cinfo)->bytes.size();
    if (!grow(cinfo, used, used * 2)) ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 1);
    return TRUE;
  }
  static void term(j_compress_ptr cinfo) {
    VectorSink* sink = of(cinfo);
    sink->bytes.resize(sink->bytes.size() - sink->pub.free_in_buffer);
  }
};

// An APP1 payload: "Exif\0\0", a big-endian TIFF header and IFD0 holding only Orientation.
std::vector<uint8_t> exif_block(int orientation) {
  return {'E', 'x', 'i', 'f', 0, 0,                        //
          'M', 'M', 0, 42, 0, 0, 0, 8,                     // TIFF header, IFD0 at offset 8
          0, 1,                                            // one entry
          0x01, 0x12, 0, 3, 0, 0, 0, 1,                    // Orientation, SHORT, count 1
          0, uint8_t(orientation), 0, 0,                   // value, padded to 4 bytes
          0, 0, 0, 0};                                     // no next IFD
}

// RGB -> the stored samples of an Adobe CMYK JPEG (inverted: 255 - ink) that PIL's CMYK;I reading
// and cmyk2rgb turn back into about the same RGB: K takes the darkness (stored k = max(r, g, b))
// and C, M, Y the rest (stored c = r * 255 / k), so the decode R = c * k / 255 ~ r.
void rgb_to_adobe_cmyk(const uint8_t* rgb, uint8_t* cmyk) {
  const int k = std::max({rgb[0], rgb[1], rgb[2]});
  for (int c = 0; c < 3; ++c) cmyk[c] = uint8_t(k == 0 ? 255 : (rgb[c] * 255 + k / 2) / k);
  cmyk[3] = uint8_t(k);
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int width, int height, int channels,
                                 const JpegEncodeOptions& options) {
  if (width <= 0 || height <= 0 || width > JPEG_MAX_DIMENSION || height > JPEG_MAX_DIMENSION)
    fail("encode_jpeg: {}x{} is not a JPEG size (1..{} per side)", width, height, JPEG_MAX_DIMENSION);
  if (channels != 1 && channels != 3) fail("encode_jpeg: {} channels; 1 (gray) or 3 (RGB) are supported", channels);
  if (options.quality < 1 || options.quality > 100) fail("encode_jpeg: quality {} is not in 1..100", options.quality);
  if (options.exif_orientation < 0 || options.exif_orientation > 8)
    fail("encode_jpeg: EXIF orientation {} is not 0 (none) or 1..8", options.exif_orientation);
  if (options.ycck && !options.cmyk) fail("encode_jpeg: ycck needs cmyk");
  const std::string sampling = !options.sampling.empty() ? options.sampling : options.subsample_420 ? "4:2:0" : "4:4:4";
  // Luma's sampling factors (chroma's are 1x1).
  const std::map<std::string, std::pair<int, int>> luma_factors = {
      {"4:4:4", {1, 1}}, {"4:2:2", {2, 1}}, {"4:2:0", {2, 2}}, {"4:4:0", {1, 2}}, {"4:1:1", {4, 1}}};
  const auto factors = luma_factors.find(sampling);
  if (factors == luma_factors.end())
    fail("encode_jpeg: sampling '{}' is not one of 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1", sampling);
  const int luma_h = factors->second.first, luma_v = factors->second.second;

  // The samples libjpeg is given, row after row.
  const size_t count = size_t(width) * height;
  const int components = options.cmyk ? 4 : channels;
  std::vector<uint8_t> samples;
  if (options.cmyk) {
    samples.resize(count * 4);
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* p = pixels + i * channels;
      const uint8_t rgb[3] = {p[0], p[channels == 3 ? 1 : 0], p[channels == 3 ? 2 : 0]};
      rgb_to_adobe_cmyk(rgb, &samples[i * 4]);
    }
    pixels = samples.data();
  }
  const std::vector<uint8_t> exif =
      options.exif_orientation ? exif_block(options.exif_orientation) : std::vector<uint8_t>{};

  jpeg_compress_struct cinfo;
  std::memset(&cinfo, 0, sizeof cinfo);
  JpegErrors errors;
  std::memset(&errors, 0, sizeof errors);
  cinfo.err = jpeg_std_error(&errors.pub);
  errors.pub.error_exit = jpeg_jump_on_error;
  errors.pub.emit_message = ignore_message;
  VectorSink sink;
  std::memset(&sink.pub, 0, sizeof sink.pub);
  sink.pub.init_destination = VectorSink::init;
  sink.pub.empty_output_buffer = VectorSink::empty;
  sink.pub.term_destination = VectorSink::term;

  const bool ok = guarded(errors, [&] {
    jpeg_create_compress(&cinfo);
    cinfo.dest = &sink.pub;
    cinfo.image_width = JDIMENSION(width);
    cinfo.image_height = JDIMENSION(height);
    cinfo.input_components = components;
    cinfo.in_color_space = options.cmyk ? JCS_CMYK : channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);  // CMYK input: a CMYK JPEG with an Adobe marker
    if (options.ycck) jpeg_set_colorspace(&cinfo, JCS_YCCK);
    jpeg_set_quality(&cinfo, options.quality, TRUE);
    // Luma (and YCCK's K) at the sampling's factors, chroma at 1x1. Gray and plain CMYK stay 1x1.
    if (cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_YCCK)
      for (int i = 0; i < cinfo.num_components; ++i) {
        const bool full = i == 0 || i == 3;
        cinfo.comp_info[i].h_samp_factor = full ? luma_h : 1;
        cinfo.comp_info[i].v_samp_factor = full ? luma_v : 1;
      }
    if (options.progressive) jpeg_simple_progression(&cinfo);
    jpeg_start_compress(&cinfo, TRUE);
    if (!exif.empty()) jpeg_write_marker(&cinfo, JPEG_APP0 + 1, exif.data(), unsigned(exif.size()));
    while (cinfo.next_scanline < cinfo.image_height) {
      JSAMPROW row = const_cast<JSAMPROW>(pixels + size_t(cinfo.next_scanline) * width * components);
      jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
  });
  jpeg_destroy_compress(&cinfo);
  if (!ok) fail("encode_jpeg ({}x{}, {} channels): {}", width, height, channels, errors.message);
  return std::move(sink.bytes);
}

}  // namespace kiln
