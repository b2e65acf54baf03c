// kiln_make_digits <out_dir> [digits.png]: builds the "digits" IDX dataset from the digit
// sheet shipped in Debian's opencv-doc package. Only the PNG decode lives here; tiling,
// split and IDX writing are kiln::make_digits_idx (testable without libpng).
#include <png.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/error.h"

namespace {

const char* kDefaultPng = "/usr/share/doc/opencv-doc/examples/data/digits.png";

struct GrayImage {
  std::vector<uint8_t> pixels;
  int64_t width = 0, height = 0;
};

// Decodes any PNG to 8-bit gray (libpng converts RGB, palette, alpha and 16-bit inputs).
GrayImage decode_gray_png(const std::string& path) {
  if (!std::filesystem::exists(path))
    kiln::fail("'{}' does not exist: install it with `apt-get install opencv-doc`, or pass the "
               "path of digits.png as the second argument", path);
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str()))
    kiln::fail("cannot read PNG '{}': {}", path, image.message);
  image.format = PNG_FORMAT_GRAY;
  GrayImage gray;
  gray.width = image.width;
  gray.height = image.height;
  gray.pixels.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, gray.pixels.data(), 0, nullptr)) {
    std::string message = image.message;
    png_image_free(&image);
    kiln::fail("cannot decode PNG '{}': {}", path, message);
  }
  return gray;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fprintf(stderr,
                 "usage: %s <out_dir> [digits.png]\n"
                 "  writes train/t10k IDX files of OpenCV's 5000 handwritten digits to out_dir\n"
                 "  (default digits.png: %s, from `apt-get install opencv-doc`)\n",
                 argv[0], kDefaultPng);
    return argc == 2 ? 0 : 1;
  }
  const std::string out_dir = argv[1];
  const std::string png = argc == 3 ? argv[2] : kDefaultPng;
  try {
    GrayImage sheet = decode_gray_png(png);
    kiln::make_digits_idx(sheet.pixels, sheet.width, sheet.height, out_dir);
    std::printf("wrote 4000 train + 1000 test digits to %s\n", out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_make_digits (%s -> %s): %s\n", png.c_str(), out_dir.c_str(), e.what());
    return 1;
  }
}
