#pragma once
// JPEG and PNG files <-> 8-bit pixels, matching what torchvision's ImageFolder sees (PIL's
// Image.open(f).convert('RGB') or convert('L')), so accuracy compares with a PyTorch run.
// JPEGs can be decoded in part (only the rows and iMCU columns a crop needs) and at 1/2, 1/4 or
// 1/8 scale (libjpeg-turbo's DCT scaling): a RandomResizedCrop of a large photo then costs a
// fraction of a full decode. The encoders exist to make test data and packed datasets.
//
// Every failure is a kiln::Error naming the file (`name`) and the fix; no input bytes, however
// malformed, crash or leak (the tests fuzz this).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class ImageFormat { Jpeg, Png };

// Images over this many pixels are refused before any pixel is decoded: PIL's
// DecompressionBombError threshold (2 * Image.MAX_IMAGE_PIXELS), so a tiny file claiming
// 65535 x 65535 cannot make a worker allocate gigabytes.
inline constexpr int64_t kMaxImagePixels = 2 * 89478485LL;

struct ImageInfo {  // from the header alone
  ImageFormat format = ImageFormat::Jpeg;
  int width = 0, height = 0;  // as stored (before any EXIF orientation)
  int stored_channels = 0;    // JPEG: 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK; PNG (palette expanded, alpha left out): 1 or 3
  int orientation = 1;        // EXIF orientation tag 1..8 (JPEG APP1 'Exif'), 1 when absent or unreadable
};

// Throws kiln::Error naming `name` (a file path, used only in messages) for: 0 bytes, bytes that
// are not a JPEG/PNG (saying what they look like: a text file, GIF, BMP, WebP, ...), a header
// that cannot be read, an image over kMaxImagePixels.
ImageInfo read_image_info(const uint8_t* bytes, size_t size, const std::string& name);

struct PixelRect {
  int x = 0, y = 0, width = 0, height = 0;
};

struct DecodeRequest {
  // 3: RGB as PIL's convert('RGB'); 1: luma as PIL's convert('L'), i.e. luma_of() of the RGB
  // pixels. A gray image is used as is for 1 channel and replicated for 3.
  int channels = 3;
  // The part of the (stored-orientation) image that is needed; empty: the whole image. It must lie
  // inside the image.
  std::optional<PixelRect> region;
  // DCT scaling (JPEG only): decode at the smallest of 1/8, 1/4, 1/2 scale at which the region
  // still spans at least min_width x min_height decoded pixels (region.width / step >= min_width,
  // likewise height). 0, 0: always full scale.
  int min_width = 0, min_height = 0;
};

struct DecodedImage {
  std::vector<uint8_t> pixels;  // height * width * channels, row-major HWC
  int width = 0, height = 0, channels = 0;
  // Where these pixels lie in the full-resolution stored image: decoded pixel column x covers
  // source columns [origin_x + x*step, origin_x + (x+1)*step), likewise rows; step is 1, 2, 4 or 8
  // (the DCT scale's inverse; always 1 for PNG). The pixels are the smallest block of the decoded
  // grid that covers the requested region, so at step 1 exactly the region; they equal the same
  // pixels of a whole-image decode at that scale, bit for bit.
  int origin_x = 0, origin_y = 0, step = 1;
  int full_width = 0, full_height = 0;  // the stored image's size
};

// Throws kiln::Error naming `name` for what read_image_info refuses, a bad request, and a
// truncated or corrupt file ("truncated or corrupt JPEG/PNG '<name>': <libjpeg/libpng message>;
// re-encode or remove the file, or pass --skip-bad"). As with PIL, libjpeg's warnings about
// corrupt data it recovers from (extraneous bytes, bad Huffman codes) are not errors; running out
// of data is. A truncated file fails whatever the region: a JPEG region decode leaves the rows
// below it undecoded but checks that the scan data ends in an EOI marker, which a whole decode
// would reach; PNG rows are all decoded.
DecodedImage decode_image(const uint8_t* bytes, size_t size, const std::string& name,
                          const DecodeRequest& request = {});

// EXIF orientation (1..8) applied to a decoded whole image (rotate/flip as the tag says, as PIL's
// ImageOps.exif_transpose), for when the user asks for it: torchvision's loader does not rotate.
// The result is again a whole image (origin 0, the step kept, full sizes swapped for 5..8).
DecodedImage apply_orientation(const DecodedImage& image, int orientation);

// ---- encoders, for test data and packed datasets ----

struct JpegEncodeOptions {  // ycck and sampling come last: positional initializers of the rest still work
  int quality = 90;             // 1..100, libjpeg's quality scale
  bool subsample_420 = true;    // false: 4:4:4 (no chroma subsampling)
  bool progressive = false;     // libjpeg's simple progression script
  bool cmyk = false;            // write an Adobe-style (inverted) CMYK JPEG from RGB input
  int exif_orientation = 0;     // 0: no EXIF; 1..8: an APP1 Exif block with this orientation tag
  bool ycck = false;            // with cmyk: store it as YCCK (Adobe transform 2), as Photoshop does
  // Other chroma subsamplings, as cameras write them: "4:4:4", "4:2:2", "4:2:0", "4:4:0" or
  // "4:1:1"; empty: subsample_420 decides.
  std::string sampling;
};
// `channels` 1 (gray) or 3 (RGB); rows of width * channels bytes.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int width, int height, int channels,
                                 const JpegEncodeOptions& options = {});

struct PngEncodeOptions {
  bool sixteen_bit = false;  // 16-bit samples, each v stored as v * 257 (so its high byte is v)
  bool alpha = false;        // add an alpha channel of alpha_value (a tRNS chunk with `palette`)
  uint8_t alpha_value = 255;
  bool palette = false;      // an indexed PNG; the image must have at most 256 colours
  bool interlaced = false;   // Adam7
  int gray_bit_depth = 8;    // 1, 2, 4 or 8, gray input only: each value's top bits are stored
};
std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels,
                                const PngEncodeOptions& options = {});

// ---- pieces shared by the decoders, declared for them and for tests ----

// The format by its magic bytes, or empty.
std::optional<ImageFormat> sniff_image_format(const uint8_t* bytes, size_t size);

// Per-format entry points behind read_image_info / decode_image (the bytes must be of that
// format, at least 1 byte).
ImageInfo read_jpeg_info(const uint8_t* bytes, size_t size, const std::string& name);
DecodedImage decode_jpeg(const uint8_t* bytes, size_t size, const std::string& name, const DecodeRequest& request);
ImageInfo read_png_info(const uint8_t* bytes, size_t size, const std::string& name);
DecodedImage decode_png(const uint8_t* bytes, size_t size, const std::string& name, const DecodeRequest& request);

// The orientation tag of a JPEG APP1 payload ("Exif\0\0" + TIFF header + IFD0, either byte
// order); 1 when it is absent, malformed or out of 1..8.
int exif_orientation(const uint8_t* app1, size_t size);

// PIL's RGB -> L (ImagingConvertRGB2L): ITU-R 601 luma in 16-bit fixed point, rounded.
inline uint8_t luma_of(uint8_t r, uint8_t g, uint8_t b) {
  return uint8_t((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

// Sample layouts the decoders produce. AdobeCmyk is libjpeg's CMYK output of a 4-component JPEG,
// which PIL reads as inverted ("CMYK;I", Adobe's convention) whatever the markers say.
enum class PixelLayout { Gray, GrayAlpha, Rgb, Rgba, AdobeCmyk };
int channels_of(PixelLayout layout);
// `count` pixels of `layout` -> out_channels (1: L, 3: RGB) as PIL's convert does: alpha dropped,
// gray replicated, RGB -> luma_of, CMYK -> RGB by PIL's cmyk2rgb.
void convert_pixels(const uint8_t* in, PixelLayout layout, size_t count, uint8_t* out, int out_channels);

// The region a request asks for, checked against the image (kiln::Error naming `name`); the
// whole image when it is empty. Also checks request.channels.
PixelRect requested_region(const DecodeRequest& request, int width, int height, const std::string& name);
// kiln::Error naming `name` when width * height is over kMaxImagePixels or not positive.
void check_image_size(int64_t width, int64_t height, const std::string& name);

}  // namespace kiln
