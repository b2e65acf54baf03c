// kiln_make_image_folders: makes image-folder datasets (torchvision ImageFolder layout) from real
// pixels on this machine, for testing and benchmarking `--format imagefolder`:
//   photos OUT   random crops of the photographs in Debian's opencv-doc, one class per photo
//   digits IDX_DIR OUT   the IDX digits as 20x20 grayscale PNGs
// The work is kiln::make_photo_folder / kiln::make_digits_png_folder (make_image_folders.h, beside
// this file: the library kiln_image_folder_maker, which the tests link too; kiln_data does not hold it).
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "make_image_folders/make_image_folders.h"

namespace {

const char* kUsage =
    "usage:\n"
    "  kiln_make_image_folders photos OUT [--classes N] [--train-per-class N] [--val-per-class N]\n"
    "                                     [--seed S] [--max-side N] [--source DIR] [--list]\n"
    "      An ImageNet-like folder OUT/{train,val}/<class>/NNNN.jpg: each class is one real photo\n"
    "      found under DIR (default /usr/share/doc/opencv-doc, from `apt-get install opencv-doc`;\n"
    "      JPEG/PNG, shorter side >= 200, photo-like, near duplicates skipped), each sample a random\n"
    "      crop (25-100% of the area, aspect 3:4..4:3) resized to ImageNet's size spread (longer side\n"
    "      200-800, median 500) and saved as a JPEG (quality 75-95, 4:2:0 or 4:4:4); about 6% are\n"
    "      grayscale, progressive, CMYK or EXIF-rotated. Val crops use their own random stream.\n"
    "        --classes N          source photos = classes (default: all that qualify, at most 100)\n"
    "        --train-per-class N  default 100\n"
    "        --val-per-class N    default 20\n"
    "        --seed S             default 0; the same seed gives the same bytes\n"
    "        --max-side N         cap on the longer side of a sample (default 800)\n"
    "        --source DIR         where to look for photos (recursively)\n"
    "        --list               print the qualifying photos and their class names, write nothing\n"
    "  kiln_make_image_folders digits IDX_DIR OUT\n"
    "      OUT/train/<digit>/NNNN.png and OUT/val/<digit>/NNNN.png: the IDX train and t10k images of\n"
    "      IDX_DIR (e.g. data/digits, made by scripts/setup.sh) as 8-bit grayscale PNGs, pixel-exact;\n"
    "      NNNN is the sample's index in its IDX file.\n"
    "OUT must not exist or be an empty folder; it is built in OUT.partial and renamed when complete.\n"
    "Threads: KILN_THREADS, else every available core.\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "kiln_make_image_folders: error: %s\n\n%s", message.c_str(), kUsage);
  std::exit(2);
}

long long parse_int(const std::string& flag, const std::string& value, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    kiln::fail("{} expects a whole number in {}..{}, got '{}'", flag, lo, hi, value);
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int photos_command(const std::vector<std::string>& args) {
  kiln::PhotoFolderOptions options;
  options.verbose = true;
  std::string out;
  bool list = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) usage_error(a + " needs a value");
      return args[++i];
    };
    if (a == "--classes")
      options.classes = int(parse_int(a, value(), 0, 1000000));
    else if (a == "--train-per-class")
      options.train_per_class = int(parse_int(a, value(), 1, 1000000));
    else if (a == "--val-per-class")
      options.val_per_class = int(parse_int(a, value(), 0, 1000000));
    else if (a == "--seed")
      options.seed = uint64_t(parse_int(a, value(), 0, (1LL << 62)));
    else if (a == "--max-side")
      options.max_side = int(parse_int(a, value(), 16, 4096));
    else if (a == "--source")
      options.source = value();
    else if (a == "--list")
      list = true;
    else if (!a.empty() && a[0] == '-')
      usage_error("unknown option '" + a + "'");
    else if (out.empty())
      out = a;
    else
      usage_error("unexpected argument '" + a + "'");
  }
  const auto start = std::chrono::steady_clock::now();
  if (list) {
    const auto photos = kiln::find_source_photos(options);
    for (const auto& p : photos) std::printf("%-40s %5dx%-5d %s\n", p.class_name.c_str(), p.width, p.height, p.path.c_str());
    std::printf("%zu qualifying source photos under %s\n", photos.size(), options.source.c_str());
    return 0;
  }
  if (out.empty()) usage_error("photos needs the output folder OUT");
  kiln::make_photo_folder(options, out);
  std::printf("wrote %s in %.1f s\n", out.c_str(), seconds_since(start));
  return 0;
}

int digits_command(const std::vector<std::string>& args) {
  if (args.size() != 2) usage_error("digits needs IDX_DIR and OUT");
  const auto start = std::chrono::steady_clock::now();
  kiln::make_digits_png_folder(args[0], args[1]);
  std::printf("wrote %s in %.1f s\n", args[1].c_str(), seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) usage_error("missing command (photos or digits)");
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  for (const auto& a : args)
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  try {
    if (command == "photos") return photos_command(args);
    if (command == "digits") return digits_command(args);
    usage_error("unknown command '" + command + "' (photos or digits)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_make_image_folders: error: %s\n", e.what());
    return 2;
  }
}
