// The photo-crop and digits-PNG image folders (tools/make_image_folders/make_image_folders.h).
#include "make_image_folders/make_image_folders.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/random.h"
#include "data/image/image_codec.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// A photo-like synthetic image: smooth colour waves (different per `kind`) plus per-pixel noise, so it
// has no flat areas, no uniform lines and many grey levels.
std::vector<uint8_t> synthetic_photo(int w, int h, int kind) {
  std::vector<uint8_t> px(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const double wave = std::sin(x * (0.013 + 0.011 * kind) + c * 2.1 + kind) *
                            std::cos(y * (0.021 + 0.007 * kind) - c + 0.5 * kind);
        const double noise = double(random_bits(kind, c, uint64_t(y) * w + x) % 41) - 20;
        px[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(128 + 90 * wave + noise, 0.0, 255.0));
      }
  return px;
}

// Source photos in `dir`: four that qualify (one PNG, one stored as *.dpkg-new, one whose name needs
// sanitizing) and some that do not (too small, flat drawing, not an image).
void write_sources(const fs::path& dir) {
  fs::create_directories(dir / "sub");
  auto jpeg = [&](int w, int h, int kind) { return encode_jpeg(synthetic_photo(w, h, kind).data(), w, h, 3); };
  write_bytes((dir / "Alpha Photo.JPG").string(), jpeg(320, 240, 0));
  write_bytes((dir / "beta.jpg.dpkg-new").string(), jpeg(260, 300, 1));
  write_bytes((dir / "sub" / "gamma.png").string(),
              encode_png(synthetic_photo(300, 220, 2).data(), 300, 220, 3));
  write_bytes((dir / "sub" / "delta.jpeg").string(), jpeg(400, 250, 3));
  write_bytes((dir / "tiny.jpg").string(), jpeg(120, 90, 4));  // shorter side < 200
  std::vector<uint8_t> flat(300 * 300 * 3, 200);                // a drawing: one colour and a line
  for (int x = 0; x < 300; ++x) flat[(150 * 300 + x) * 3] = 0;
  write_bytes((dir / "drawing.png").string(), encode_png(flat.data(), 300, 300, 3));
  write_bytes((dir / "notes.jpg").string(), {'h', 'e', 'l', 'l', 'o'});
}

PhotoFolderOptions small_options(const fs::path& source) {
  PhotoFolderOptions o;
  o.source = source.string();
  o.classes = 3;
  o.train_per_class = 4;
  o.val_per_class = 2;
  o.seed = 7;
  o.max_side = 96;
  o.special_block = 5;  // 4 special files in every 5: each kind appears in each split
  return o;
}

// Every regular file under `root`, relative path -> bytes.
std::map<std::string, std::vector<uint8_t>> tree(const fs::path& root) {
  std::map<std::string, std::vector<uint8_t>> files;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) files[fs::relative(e.path(), root).string()] = read_bytes(e.path().string());
  return files;
}

// Whether a JPEG's frame is progressive (SOF2), found by walking the markers up to the scan.
bool is_progressive(const std::vector<uint8_t>& b) {
  size_t i = 2;
  while (i + 4 <= b.size() && b[i] == 0xFF) {
    const uint8_t marker = b[i + 1];
    if (marker == 0xC2) return true;
    if (marker == 0xDA) return false;
    i += 2 + (size_t(b[i + 2]) << 8 | b[i + 3]);
  }
  return false;
}

TEST(MakeImageFolders, FindsPhotoLikeSourcesWithUniqueNames) {
  TempDir dir;
  write_sources(dir.path() / "src");
  std::vector<SourcePhoto> photos = find_source_photos(small_options(dir.path() / "src"));
  std::set<std::string> names;
  for (const auto& p : photos) names.insert(p.class_name);
  EXPECT_EQ(names, (std::set<std::string>{"alpha_photo", "beta", "delta", "gamma"}));
  ASSERT_EQ(photos.size(), 4u);
  // JPEGs first, by path; the PNG last.
  EXPECT_EQ(photos.back().class_name, "gamma");
  EXPECT_TRUE(std::any_of(photos.begin(), photos.end(),
                          [](const SourcePhoto& p) { return p.path.ends_with("beta.jpg.dpkg-new"); }));
  EXPECT_EQ(photos.front().width, 320);
  EXPECT_EQ(photos.front().height, 240);
}

TEST(MakeImageFolders, PhotoFolderLayoutSpecialsAndDeterminism) {
  TempDir dir;
  write_sources(dir.path() / "src");
  PhotoFolderOptions options = small_options(dir.path() / "src");
  options.threads = 2;
  const fs::path out = dir.path() / "photos";
  make_photo_folder(options, out.string());
  EXPECT_FALSE(fs::exists(dir.path() / "photos.partial"));

  const auto files = tree(out);
  ASSERT_EQ(files.size(), 3u * (4 + 2));
  std::set<std::string> classes;
  int gray = 0, cmyk = 0, exif = 0, progressive = 0;
  for (const auto& [name, bytes] : files) {
    const fs::path rel(name);
    ASSERT_EQ(std::distance(rel.begin(), rel.end()), 3) << name;  // split/class/file
    const std::string split = rel.begin()->string();
    EXPECT_TRUE(split == "train" || split == "val") << name;
    classes.insert(std::next(rel.begin())->string());
    const int index = std::stoi(rel.stem().string());
    EXPECT_EQ(rel.filename().string().size(), 8u) << name;  // NNNN.jpg
    EXPECT_LT(index, split == "train" ? 4 : 2) << name;
    const ImageInfo info = read_image_info(bytes.data(), bytes.size(), name);
    EXPECT_EQ(info.format, ImageFormat::Jpeg);
    EXPECT_LE(std::max(info.width, info.height), options.max_side) << name;
    EXPECT_GE(std::min(info.width, info.height), options.max_side * 3 / 4 - 1) << name;  // aspect 3:4..4:3
    gray += info.stored_channels == 1;
    cmyk += info.stored_channels == 4;
    exif += info.orientation != 1;
    progressive += is_progressive(bytes);
    const DecodedImage image = decode_image(bytes.data(), bytes.size(), name);
    EXPECT_EQ(image.width, info.width);
    EXPECT_EQ(image.height, info.height);
  }
  EXPECT_EQ(classes, (std::set<std::string>{"alpha_photo", "beta", "delta"}));
  // Blocks of 5: train 12 samples (blocks 0, 1 whole, block 2 partial), val 6 (block 0 whole).
  EXPECT_GE(gray, 3);
  EXPECT_GE(cmyk, 3);
  EXPECT_GE(exif, 3);
  EXPECT_GE(progressive, 3);
  EXPECT_LE(gray + cmyk + exif + progressive, 4 * 4);

  // What kiln's image-folder reader sees.
  EXPECT_EQ(detect_dataset_format(out.string()), "imagefolder");
  const ImageFolderIndex index = scan_image_folder((out / "train").string());
  EXPECT_EQ(index.classes, (std::vector<std::string>{"alpha_photo", "beta", "delta"}));
  EXPECT_EQ(index.files.size(), 12u);
  EXPECT_TRUE(index.unsupported.empty());

  // Val crops are other draws than train's.
  for (const std::string& c : classes)
    EXPECT_NE(files.at("train/" + c + "/0000.jpg"), files.at("val/" + c + "/0000.jpg")) << c;

  // The same bytes again, whatever the thread count.
  PhotoFolderOptions one_thread = options;
  one_thread.threads = 1;
  make_photo_folder(one_thread, (dir.path() / "again").string());
  EXPECT_TRUE(tree(dir.path() / "again") == files);
  PhotoFolderOptions other_seed = options;
  other_seed.seed = 8;
  other_seed.threads = 3;
  make_photo_folder(other_seed, (dir.path() / "seed8").string());
  EXPECT_FALSE(tree(dir.path() / "seed8") == files);
}

TEST(MakeImageFolders, NeverOverwritesExistingData) {
  TempDir dir;
  write_sources(dir.path() / "src");
  const PhotoFolderOptions options = small_options(dir.path() / "src");
  const fs::path out = dir.path() / "photos";
  fs::create_directories(out);
  write_bytes((out / "mine.txt").string(), {'x'});
  testing::expect_error([&] { make_photo_folder(options, out.string()); }, {out.string(), "not an empty folder"});
  testing::expect_error([&] { make_digits_png_folder(dir.path().string(), out.string()); }, {out.string()});
  EXPECT_EQ(read_bytes((out / "mine.txt").string()), std::vector<uint8_t>{'x'});
  EXPECT_EQ(tree(out).size(), 1u);
  EXPECT_FALSE(fs::exists(dir.path() / "photos.partial"));

  // A file in the way, and a foreign folder where the output is built, are refused too.
  write_bytes((dir.path() / "file").string(), {'y'});
  testing::expect_error([&] { make_photo_folder(options, (dir.path() / "file").string()); }, {"file"});
  fs::create_directories(dir.path() / "other.partial");
  write_bytes((dir.path() / "other.partial" / "keep.txt").string(), {'z'});
  testing::expect_error([&] { make_photo_folder(options, (dir.path() / "other").string()); }, {"other.partial"});
  EXPECT_TRUE(fs::exists(dir.path() / "other.partial" / "keep.txt"));

  // An empty folder is filled; an interrupted run's leftovers are replaced.
  fs::create_directories(dir.path() / "empty");
  make_photo_folder(options, (dir.path() / "empty").string());
  EXPECT_EQ(tree(dir.path() / "empty").size(), 18u);
  PhotoFolderOptions broken = options;
  broken.classes = 10;  // more than qualify: fails after the partial folder was made
  testing::expect_error([&] { make_photo_folder(broken, (dir.path() / "next").string()); }, {"--classes 10", "only 4"});
  EXPECT_FALSE(fs::exists(dir.path() / "next"));
  EXPECT_FALSE(fs::exists(dir.path() / "next.partial"));
  fs::create_directories(dir.path() / "nothing");
  broken.source = (dir.path() / "nothing").string();
  testing::expect_error([&] { make_photo_folder(broken, (dir.path() / "next").string()); }, {"no source photo", "nothing"});
}

TEST(MakeImageFolders, ReplacesAnInterruptedRunsPartialFolder) {
  TempDir dir;
  write_sources(dir.path() / "src");
  // What an interrupted run leaves: the partial folder with its marker and some files.
  make_photo_folder(small_options(dir.path() / "src"), (dir.path() / "done").string());
  fs::rename(dir.path() / "done", dir.path() / "photos.partial");
  write_bytes((dir.path() / "photos.partial" / ".kiln_make_image_folders_partial").string(), {});
  write_bytes((dir.path() / "photos.partial" / "stale.jpg").string(), {'s'});
  make_photo_folder(small_options(dir.path() / "src"), (dir.path() / "photos").string());
  EXPECT_FALSE(fs::exists(dir.path() / "photos.partial"));
  EXPECT_FALSE(fs::exists(dir.path() / "photos" / "stale.jpg"));
  EXPECT_EQ(tree(dir.path() / "photos").size(), 18u);
}

TEST(MakeImageFolders, FromTheRealPhotos) {
  PhotoFolderOptions options;
  options.source = std::string(kOpencvDocDir) + "/examples/data";  // a part of the default source, to be quick
  if (!fs::is_directory(options.source)) GTEST_SKIP() << options.source << " is absent (apt-get install opencv-doc)";
  EXPECT_GE(find_source_photos(options).size(), 20u);
  TempDir dir;
  options.classes = 2;
  options.train_per_class = 3;
  options.val_per_class = 1;
  options.max_side = 64;
  make_photo_folder(options, dir.file("photos"));
  const auto files = tree(dir.path() / "photos");
  EXPECT_EQ(files.size(), 8u);
  for (const auto& [name, bytes] : files) {
    const DecodedImage image = decode_image(bytes.data(), bytes.size(), name);
    EXPECT_LE(std::max(image.width, image.height), 64) << name;
  }
}

// Writes a small IDX dataset (random pixels and labels) to `dir`.
void write_small_idx(const fs::path& dir) {
  fs::create_directories(dir);
  for (int split = 0; split < 2; ++split) {
    Dataset ds;
    ds.count = split == 0 ? 23 : 11;
    ds.height = 20;
    ds.width = 20;
    ds.channels = 1;
    ds.num_classes = 10;
    for (int64_t i = 0; i < ds.count * 400; ++i) ds.images.push_back(uint8_t(random_bits(3, split, i)));
    for (int64_t i = 0; i < ds.count; ++i) ds.labels.push_back(int32_t((i * 7 + split) % 10));  // each digit
    const std::string prefix = (dir / (split == 0 ? "train" : "t10k")).string();
    write_idx(ds, prefix + "-images-idx3-ubyte", prefix + "-labels-idx1-ubyte");
  }
}

// Every PNG of the folder decodes to its IDX image, in the folder of its label.
void expect_digits_match(const fs::path& idx_dir, const fs::path& out) {
  for (int split = 0; split < 2; ++split) {
    const Dataset ds = load_dataset(idx_dir.string(), "idx", split == 0);
    const fs::path root = out / (split == 0 ? "train" : "val");
    int64_t seen = 0;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (!e.is_regular_file()) continue;
      const std::string name = e.path().string();
      ASSERT_EQ(e.path().extension().string(), ".png") << name;
      EXPECT_EQ(e.path().stem().string().size(), 4u) << name;
      const int64_t index = std::stoll(e.path().stem().string());
      ASSERT_LT(index, ds.count) << name;
      EXPECT_EQ(e.path().parent_path().filename().string(), std::to_string(ds.labels[index])) << name;
      const std::vector<uint8_t> bytes = read_bytes(name);
      EXPECT_EQ(read_image_info(bytes.data(), bytes.size(), name).stored_channels, 1) << name;
      DecodeRequest gray;
      gray.channels = 1;
      const DecodedImage image = decode_image(bytes.data(), bytes.size(), name, gray);
      ASSERT_EQ(image.width, 20);
      ASSERT_EQ(image.height, 20);
      EXPECT_TRUE(std::equal(image.pixels.begin(), image.pixels.end(), ds.images.begin() + index * 400)) << name;
      ++seen;
    }
    EXPECT_EQ(seen, ds.count);
  }
  for (int d = 0; d < 10; ++d) EXPECT_TRUE(fs::is_directory(out / "train" / std::to_string(d))) << d;
}

TEST(MakeImageFolders, DigitsPngsArePixelExact) {
  TempDir dir;
  write_small_idx(dir.path() / "idx");
  make_digits_png_folder((dir.path() / "idx").string(), dir.file("png"));
  expect_digits_match(dir.path() / "idx", dir.path() / "png");
  EXPECT_EQ(detect_dataset_format(dir.file("png")), "imagefolder");
  EXPECT_EQ(scan_image_folder(dir.file("png") + "/val").files.size(), 11u);
  make_digits_png_folder((dir.path() / "idx").string(), dir.file("again"), 1);
  EXPECT_TRUE(tree(dir.path() / "again") == tree(dir.path() / "png"));
  testing::expect_error([&] { make_digits_png_folder(dir.file("missing"), dir.file("out")); }, {"missing"});
  EXPECT_FALSE(fs::exists(dir.path() / "out"));
  EXPECT_FALSE(fs::exists(dir.path() / "out.partial"));
}

TEST(MakeImageFolders, RealDigitsPngs) {
  std::string idx;
  for (const std::string& d : {std::string(KILN_SOURCE_DIR "/../shared/data/digits"), std::string(KILN_SOURCE_DIR "/data/digits")})
    if (fs::exists(d + "/t10k-labels-idx1-ubyte")) idx = d;
  if (idx.empty()) GTEST_SKIP() << "no digits IDX data (scripts/setup.sh makes data/digits)";
  TempDir dir;
  make_digits_png_folder(idx, dir.file("png"));
  int train = 0, val = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path() / "png"))
    if (e.is_regular_file()) ++(e.path().string().find("/train/") != std::string::npos ? train : val);
  EXPECT_EQ(train, 4000);
  EXPECT_EQ(val, 1000);
  expect_digits_match(idx, dir.path() / "png");
}

TEST(MakeImageFolders, CommandLine) {
  const std::string tool = KILN_BINARY_DIR "/kiln_make_image_folders";
  if (!fs::exists(tool)) GTEST_SKIP() << tool << " not built";
  TempDir dir;
  write_small_idx(dir.path() / "idx");
  const std::string err = dir.file("err.txt");
  auto run = [&](const std::string& args) {
    const int status = std::system((tool + " " + args + " > /dev/null 2> '" + err + "'").c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  auto error_text = [&] {
    const auto bytes = read_bytes(err);
    return std::string(bytes.begin(), bytes.end());
  };
  EXPECT_EQ(run("digits '" + dir.file("idx") + "' '" + dir.file("png") + "'"), 0);
  EXPECT_TRUE(fs::exists(dir.path() / "png" / "val"));
  EXPECT_EQ(run("digits '" + dir.file("idx") + "' '" + dir.file("png") + "'"), 2);
  EXPECT_NE(error_text().find("kiln_make_image_folders: error: "), std::string::npos) << error_text();
  EXPECT_NE(error_text().find("not an empty folder"), std::string::npos) << error_text();
  EXPECT_EQ(run("photos '" + dir.file("p") + "' --classes x"), 2);
  EXPECT_NE(error_text().find("--classes"), std::string::npos) << error_text();
  EXPECT_EQ(run("bogus"), 2);
  EXPECT_NE(error_text().find("usage"), std::string::npos) << error_text();
  EXPECT_EQ(run("--help"), 0);
}

}  // namespace
}  // namespace kiln
